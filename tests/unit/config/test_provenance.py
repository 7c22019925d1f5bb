"""Where each setting comes from when config files are merged, and the effective configuration."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from miracl_eval.config.provenance import (
    HEADER,
    changed_by,
    describe,
    origins,
    snakemake_layers,
    write_effective_config,
)
from miracl_eval.config.validate import validate

LAYERS = [
    ("/w/config.yaml", {"dataset": "miracl", "hits": 5, "threads": 8, "bm25": {"k1": 0.9, "b": 0.4}}),
    ("/w/exp2.yaml", {"dataset": "miracl", "languages": ["yo"], "bm25": {"b": 0.75}}),
    ("--config", {"threads": 1}),
]


def _merged() -> dict:
    return validate({"dataset": "miracl", "languages": ["yo"], "hits": 5, "threads": 1, "bm25": {"k1": 0.9, "b": 0.75}})


def test_each_setting_comes_from_the_last_source_that_sets_it() -> None:
    where = origins(LAYERS, _merged())
    assert {k: v for k, v in where.items() if v != "default"} == {
        "dataset": "/w/exp2.yaml",
        "languages": "/w/exp2.yaml",
        "hits": "/w/config.yaml",
        "threads": "--config",
        "bm25.k1": "/w/config.yaml",
        "bm25.b": "/w/exp2.yaml",
    }
    assert where["split"] == where["dense_index.type"] == "default"


def test_what_the_default_file_changes() -> None:
    """config.yaml's bm25.k1=0.9 is the default and its threads are overridden: only hits=5 changes the run."""
    assert changed_by(LAYERS, ["/w/config.yaml"], _merged()) == ["hits"]
    # without exp2.yaml the config has no languages (invalid): all that exp2.yaml sets counts
    assert changed_by(LAYERS, ["/w/exp2.yaml"], _merged()) == ["dataset", "languages", "bm25.b"]


def test_merged_sources_are_logged_one_line_each() -> None:
    lines = describe(LAYERS, _merged()).splitlines()
    assert lines[0] == (
        "the configuration merges /w/config.yaml, /w/exp2.yaml, --config (a later one wins for each key it sets):"
    )
    assert lines[1] == "  from /w/config.yaml: hits=5, bm25.k1=0.9"
    assert lines[2] == "  from /w/exp2.yaml: dataset='miracl', languages=['yo'], bm25.b=0.75"
    assert lines[3] == "  from --config: threads=1"
    assert lines[4].startswith("  and ") and lines[4].endswith(
        " settings from the defaults (all in results/{dataset}_config.yaml)"
    )
    assert describe(LAYERS[1:2], _merged()) is None, "one source: nothing merged"


def test_effective_config_file_reproduces_the_config(tmp_path: Path) -> None:
    out = tmp_path / "config.yaml"
    write_effective_config(_merged(), out)
    text = out.read_text(encoding="utf-8")
    assert text.startswith(HEADER)
    assert validate(yaml.safe_load(text)) == _merged()


def test_effective_config_records_the_commit_of_each_fetched_checkpoint(tmp_path: Path) -> None:
    fetched = tmp_path / "BAAI--bge-m3"
    fetched.mkdir()
    (fetched / "miracl-eval-fetch.json").write_text(
        '{"repo_id": "BAAI/bge-m3", "revision": "main", "commit": "' + "5" * 40 + '"}'
    )
    out = tmp_path / "config.yaml"
    write_effective_config(_merged(), out, {"models.bge-m3.commit": str(fetched),
                                            "rerankers.ce.commit": str(tmp_path / "copied-by-hand")})  # fmt: skip
    text = out.read_text(encoding="utf-8")
    assert f"# models.bge-m3.commit: {'5' * 40}  (BAAI/bge-m3 at revision main, {fetched})" in text.splitlines()
    assert f"# rerankers.ce.commit: unknown ({tmp_path / 'copied-by-hand'} has no miracl-eval-fetch.json" in text
    assert validate(yaml.safe_load(text)) == _merged()  # comments: the file still runs as a config


def test_snakemake_sources_in_merge_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Snakemake lists the --configfile files first and appends the workflow's default file once read."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.yaml").write_text("hits: 5\n")
    (tmp_path / "exp2.yaml").write_text("languages: [yo]\n")
    given = [tmp_path / "exp2.yaml"]

    def workflow(replace: bool) -> SimpleNamespace:
        settings = SimpleNamespace(replace_workflow_config=replace, config={"threads": 1})
        return SimpleNamespace(
            configfiles=[*given, "config.yaml"], overwrite_configfiles=given, config_settings=settings
        )

    layers, unasked = snakemake_layers(workflow(False))
    assert layers == [
        (str(tmp_path / "config.yaml"), {"hits": 5}),
        (str(tmp_path / "exp2.yaml"), {"languages": ["yo"]}),
        ("--config", {"threads": 1}),
    ]
    assert unasked == [str(tmp_path / "config.yaml")]
    layers, unasked = snakemake_layers(workflow(True))  # --replace-workflow-config
    assert [label for label, _ in layers] == [str(tmp_path / "exp2.yaml"), "--config"] and unasked == []
