"""The generated reference pages follow what they describe: a change to the schema, a preset, a published
file or a rule changes the page at the next build, with nothing written by hand."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from miracl_eval.config import validate
from miracl_eval.config.models import PRESETS_FILE, load_presets, presets
from miracl_eval.config.rerankers import PRESETS_FILE as RERANKER_PRESETS_FILE
from miracl_eval.encoders.registry import FAMILIES
from miracl_eval.evaluation.published import FILES, load_published
from miracl_eval.manual import config_keys, pages, published
from miracl_eval.manual import presets as preset_pages
from miracl_eval.manual.layout import LAYERS, imported_modules, layout_table, stages_table
from miracl_eval.manual.markdown import cell, code, inline
from miracl_eval.manual.workflow import (
    PARSE_CONFIGS,
    Workflow,
    comment_above,
    library_calls,
    parse_all,
    stage_function,
)
from tests.helpers import REPO


def _schema_with(change: dict[str, Any]) -> dict[str, Any]:
    schema = copy.deepcopy(validate.schema())
    schema["properties"].update(change)
    return schema


def test_a_new_config_key_appears_with_its_type_default_and_description(monkeypatch: pytest.MonkeyPatch) -> None:
    key = {"probe_depth": {"description": "how deep the probe goes", "type": "integer", "minimum": 3, "default": 7}}
    before = config_keys.config_page()
    assert "probe_depth" not in before
    monkeypatch.setattr(config_keys, "schema", lambda: _schema_with(key))
    after = config_keys.config_page()
    assert "| `probe_depth` | integer ≥ 3 | `7` | how deep the probe goes |" in after


def test_a_changed_default_and_a_nested_key_change_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    schema = copy.deepcopy(validate.schema())
    schema["properties"]["encoder"]["properties"]["batch_size"]["default"] = 999
    schema["properties"]["encoder"]["properties"]["warp"] = {"type": "boolean", "default": True, "description": "w"}
    monkeypatch.setattr(config_keys, "schema", lambda: schema)
    page = config_keys.config_page()
    assert "| `encoder.batch_size` | integer ≥ 1 | `999` |" in page
    assert "| `encoder.warp` | boolean | `true` | w |" in page


def test_every_key_of_the_schema_and_of_every_family_is_on_the_page() -> None:
    page = config_keys.config_page()

    def keys(properties: dict[str, Any], prefix: str) -> list[str]:
        out = []
        for name, node in properties.items():
            out.append(f"{prefix}{name}")
            if isinstance(node.get("properties"), dict):
                out += keys(node["properties"], f"{prefix}{name}.")
        return out

    top = validate.schema()["properties"]
    groups = [k for k, v in top.items() if isinstance(v.get("properties"), dict)]
    expected = [k for k in keys(top, "") if k not in groups]
    for family in FAMILIES.values():
        expected += keys(family.properties(), "models.{name}.")
    missing = [k for k in expected if f"| {code(k)} |" not in page]
    assert missing == []
    assert all(f"### `{group}`\n" in page for group in groups)


def _presets_file(tmp_path: Path, source: Path, name: str, entry: dict[str, Any]) -> Path:
    data = yaml.safe_load(source.read_text(encoding="utf-8"))
    data[name] = entry
    path = tmp_path / source.name
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


def test_a_new_model_preset_appears_with_its_settings_and_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    entry = {
        "source": "the probe's model card",
        "training_source": "the probe's paper: MIRACL's training split",
        "settings": {"family": "dense", "checkpoint": "org/probe-e5", "pooling": "mean", "trained_on": ["miracl"]},
    }
    changed = load_presets(_presets_file(tmp_path, PRESETS_FILE, "probe-e5", entry))
    monkeypatch.setattr(preset_pages, "presets", lambda: changed)
    page = preset_pages.models_page()
    assert f"{len(changed)} presets ship" in page
    assert "### probe-e5" in page and "**Source.** the probe's model card" in page
    assert "The probe's paper: MIRACL's training split" in page
    assert "| `checkpoint` | `org/probe-e5` |" in page and "| `pooling` | `mean` |" in page
    assert "| [`probe-e5`](#probe-e5) | `dense` | `org/probe-e5` | miracl |  |" in page


def test_a_refused_preset_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = {
        "source": "s",
        "refused": "it runs only with its own code",
        "settings": {"family": "dense", "checkpoint": "x/y"},
    }
    changed = load_presets(_presets_file(tmp_path, PRESETS_FILE, "probe-refused", entry))
    monkeypatch.setattr(preset_pages, "presets", lambda: changed)
    page = preset_pages.models_page()
    assert '!!! failure "Refused"\n    it runs only with its own code' in page


def test_a_new_reranker_preset_appears(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = {"source": "its card", "settings": {"family": "cross-encoder", "checkpoint": "org/probe-ce", "depth": 30}}
    changed = load_presets(_presets_file(tmp_path, RERANKER_PRESETS_FILE, "probe-ce", entry))
    monkeypatch.setattr(preset_pages, "reranker_presets", lambda: changed)
    page = preset_pages.rerankers_page()
    assert "### probe-ce" in page and "| `depth` | `30` |" in page


def test_every_shipped_preset_is_on_its_page() -> None:
    page = preset_pages.models_page()
    assert all(f"### {name}\n" in page for name in presets())
    assert f"{len(presets())} presets ship" in page and f"over {len(FAMILIES)} families" in page


def test_the_published_page_counts_every_shipped_number_and_source() -> None:
    page = published.published_page()
    rows = load_published()
    assert f"{len(rows):,} published numbers ship" in page
    assert all(code(r.source_id) in page for r in rows)
    assert all(f"| {code(name)} |" in page for name in FILES)
    sources = (REPO / "miracl_eval/data/published/SOURCES.md").read_text(encoding="utf-8")
    assert sources.splitlines()[2] in page  # SOURCES.md's text follows the generated tables


def test_the_published_page_follows_the_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(published, "FILES", FILES[:1])
    page = published.published_page()
    assert f"| {code(FILES[0])} |" in page and f"| {code(FILES[1])} |" not in page
    assert f"{len(load_published(FILES[:1])):,} published numbers ship" in page


def test_the_reference_sizes_page_lists_every_corpus() -> None:
    page = published.reference_sizes_page()
    assert "| `miracl` | `en` | 32,893,221 | miracl-table1 |" in page
    assert "| `messirve` | `eswiki` | 14,047,759 |" in page


def test_cells_and_values_survive_any_text() -> None:
    assert cell("a | b\nc <d>") == "a \\| b c &lt;d&gt;"
    assert inline(None) == "null" and inline([1, 2]) == "[1, 2]" and inline({"a": 0.3}) == "{a: 0.3}"
    assert code("Instruct: {task}\nQuery:{query}") == "`Instruct: {task}\\nQuery:{query}`"
    assert code("") == "`''`"


@pytest.fixture(scope="module")
def parsed() -> Workflow:
    """The workflow as Snakemake parses it with every family and both kinds of dense search (a few seconds)."""
    return parse_all(REPO)


def _spelled_rules() -> set[str]:
    """The rule names the rule files spell (``rule NAME:``; the encoding rules' names are made in a loop)."""
    import re

    names = set()
    for path in [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]:
        names |= set(re.findall(r"^\s*rule (\w+):", path.read_text(encoding="utf-8"), re.MULTILINE))
    return names


def test_the_rules_page_has_every_rule_and_path_pattern(parsed: Workflow) -> None:
    page = pages.rules_page_for(parsed)
    names = {r.name for r in parsed.rules}
    assert _spelled_rules() <= names
    assert {f"encode_corpus_{k}" for k in ("dense", "dense_sparse", "sparse", "api_dense")} <= names
    assert {"dense_block_search", "dense_merge", "dense_index", "dense_search", "api_cost_plan"} <= names
    assert all(f"### `{name}`\n" in page for name in names)
    assert "| `bm25_index` | `resources/{dataset}/indexes/{corpus}/bm25` |" in page
    bm25 = next(r for r in parsed.rules if r.name == "bm25_search")
    assert bm25.file == "rules/bm25.smk" and bm25.script == "scripts/bm25_search.py"
    assert ("run", "runs/{dataset}/{part}/bm25.parquet") in bm25.outputs
    assert "`scripts/bm25_search.py` → `miracl_eval.lucene.bm25.bm25_search`" in page
    exact = next(r for r in parsed.rules if r.name == "dense_block_search")
    assert exact.configs == ["dense_index.type: flat"]


def test_a_rule_added_to_a_rule_file_appears(tmp_path: Path) -> None:
    """The page is the parse's: a copy of the workflow with one more rule gives one more section."""
    import shutil

    copy_repo = tmp_path / "repo"
    copy_repo.mkdir()
    for name in ("Snakefile", "rules", "scripts", "miracl_eval", "report", "envs"):
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, copy_repo / name)
    with open(copy_repo / "rules/bm25.smk", "a", encoding="utf-8") as fh:
        fh.write('\n\n# the probe: a rule the docs must show\nrule probe:\n    output:\n        "results/probe.txt",\n'
                 '    shell:\n        "touch {output}"\n')  # fmt: skip
    wf = parse_all(copy_repo, {"flat": next(iter(PARSE_CONFIGS.values()))})
    probe = next(r for r in wf.rules if r.name == "probe")
    assert probe.comment == "the probe: a rule the docs must show" and probe.outputs == [("", "results/probe.txt")]


def test_comments_and_calls_are_read_from_the_files(tmp_path: Path) -> None:
    text = "# one\n# two\nrule x:\n"
    assert comment_above(text, 3) == "one two" and comment_above(text, 1) == ""
    script = tmp_path / "s.py"
    script.write_text(
        "from miracl_eval.jobs.runner import run_stage\nfrom miracl_eval.jobs.preload import Call\n"
        "from miracl_eval.lucene.bm25 import bm25_search\nrun_stage(sm, Call('miracl_eval.fusion.hybrids', 'hybrid_stage'))\n"
    )
    assert library_calls(script) == ["miracl_eval.lucene.bm25.bm25_search", "miracl_eval.fusion.hybrids.hybrid_stage"]
    assert stage_function(script) == "miracl_eval.fusion.hybrids.hybrid_stage"
    script.write_text("from miracl_eval.inputs.download import read_version\nfrom miracl_eval.report.settings import "
                      "settings_stage as stage\nrun_stage(sm, lambda: stage(read_version(v)))\n")  # fmt: skip
    assert stage_function(script) == "miracl_eval.report.settings.settings_stage"


def test_the_layout_table_names_every_subpackage_and_its_rules(parsed: Workflow) -> None:
    table = layout_table(REPO, parsed)
    for name in LAYERS:
        assert f"`miracl_eval/{name}/`" in table
    lucene = next(line for line in table.splitlines() if "`miracl_eval/lucene/`" in line)
    assert "[`bm25_search`](../reference/rules.md#bm25_search)" in lucene
    inputs = next(line for line in table.splitlines() if "`miracl_eval/inputs/`" in line)
    assert "comparability" not in inputs  # its script reads the data version with an inputs helper: not its stage
    assert ":mod:" not in table


def test_the_stages_table_names_every_rule_file_its_rules_and_its_library_code(parsed: Workflow) -> None:
    table = stages_table(REPO, parsed)
    lines = table.splitlines()
    files = [line.split(" | ")[0].strip("| `") for line in lines[2:]]
    included = [f"rules/{f.relative_to(REPO / 'rules')}" for f in (REPO / "rules").rglob("*.smk")]
    assert files[0] == "Snakefile" and sorted(files[1:]) == sorted(included)
    assert files.index("rules/common/paths.smk") < files.index("rules/data.smk")  # the order of the includes
    bm25 = next(line for line in lines if line.startswith("| `rules/bm25.smk`"))
    assert "[`bm25_search`](../reference/rules.md#bm25_search)" in bm25 and "`miracl_eval.lucene.bm25`" in bm25
    requests = next(line for line in lines if line.startswith("| `rules/common/requests.smk`"))
    assert requests.startswith("| `rules/common/requests.smk` | (none) | (none) |")  # no rules: shared code
    assert "`miracl_eval.jobs.requests`" in requests
    snakefile = next(line for line in lines if line.startswith("| `Snakefile`"))
    assert "[`all`]" in snakefile and "`miracl_eval.config.validate`" in snakefile


def test_a_rule_files_imports_are_its_modules() -> None:
    text = (
        "from miracl_eval.jobs import requests\nfrom miracl_eval.shards import (\n    BLOCK_PATTERN,\n    tiling,\n)\n"
        "from miracl_eval.evaluation.reproduction import run_notice as notice\nimport os\nfrom snakemake import x\n"
    )
    assert imported_modules(REPO, text) == [
        "miracl_eval.jobs.requests",
        "miracl_eval.shards",
        "miracl_eval.evaluation.reproduction",
    ]
