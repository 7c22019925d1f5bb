"""pyserini's 2CR references per release: 2.4.0's (installed, checked against its own yaml) and 1.6.0's (the
BGE-M3 paper's; pyserini 2.3.0's PR #2556 moved fa and ko), and a run compared with the references of the
release its Lucene jobs run."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from miracl_eval.errors import InputError
from miracl_eval.evaluation import published
from miracl_eval.inputs.datasets import MIRACL_LANGUAGES
from miracl_eval.lucene.release import ENV_FILE, engine_facts, installed_release, pinned_release, pyserini_release
from tests.helpers import REPO, run_config

KINDS = ("bm25", "dense", "hybrid")
#: the cells pyserini 2.3.0 changed (``pyserini/2cr/miracl.yaml`` of the 2.4.0 sdist, sha256 5a3d17e3...;
#: its commit "Update MIRACL and Mr.TyDi Lucene index metadata"): BM25 and BM25 + mDPR for fa and ko
CHANGED = {
    ("bm25.fa", "nDCG@10"): "0.3568", ("bm25.fa", "R@100"): "0.7413",
    ("bm25.ko", "nDCG@10"): "0.4533", ("bm25.ko", "R@100"): "0.8579",
    ("bm25-mdpr-tied-pft-msmarco-hybrid.fa", "nDCG@10"): "0.6099",
    ("bm25-mdpr-tied-pft-msmarco-hybrid.fa", "R@100"): "0.9322",
    ("bm25-mdpr-tied-pft-msmarco-hybrid.ko", "nDCG@10"): "0.6178",
    ("bm25-mdpr-tied-pft-msmarco-hybrid.ko", "R@100"): "0.9025",
}  # fmt: skip


def rows(release: str, kind: str) -> list[published.Row]:
    name = f"pyserini_{release}_miracl_{kind}.tsv"
    assert name in published.FILES
    return published.load_published([name])


#: sha256 of ``pyserini/2cr/miracl.yaml`` in the 2.4.0 release (SOURCES.md)
YAML_2_4_0 = "5a3d17e3a2ca83cef97ed9c93714b65a05ea57c87d9190f6d53c9e51eee5db22"


def test_the_installed_pyserini_is_the_pinned_one_and_its_references_are_shipped() -> None:
    assert installed_release() == pinned_release(REPO / ENV_FILE) == "2.4.0"
    assert 'pyserini==2.4.0"' in (REPO / "pyproject.toml").read_text(encoding="utf-8")
    import pyserini

    raw = (Path(pyserini.__file__).parent / "2cr" / "miracl.yaml").read_bytes()
    assert hashlib.sha256(raw).hexdigest() == YAML_2_4_0
    spec = yaml.safe_load(raw.decode("utf-8"))
    dev = {c["name"]: next(s for s in c["splits"] if s["split"] == "dev")["scores"][0] for c in spec["conditions"]}
    for kind in KINDS:
        for r in rows("2.4.0", kind):
            assert dict(r.config)["pyserini.release"] == "2.4.0" and r.source_id.startswith("pyserini-2.4.0-2cr")
            assert r.text == f"{dev[r.system][r.measure]:.4f}"


@pytest.mark.parametrize("kind", KINDS)
def test_2_4_0_differs_from_1_6_0_only_where_pyserini_rebuilt_fa_and_ko(kind: str) -> None:
    old = {(r.system, r.measure): r for r in rows("1.6.0", kind)}
    new = {(r.system, r.measure): r for r in rows("2.4.0", kind)}
    assert set(old) == set(new) and {r.partition for r in new.values()} == set(MIRACL_LANGUAGES)
    for key, r in new.items():
        o = old[key]
        assert r.source_id == o.source_id.replace("1.6.0", "2.4.0")
        assert (r.method, r.model, r.partition) == (o.method, o.model, o.partition)
        assert dict(r.config) == {**dict(o.config), "pyserini.release": "2.4.0"}
        if key in CHANGED:
            assert r.text == CHANGED[key] != o.text
        else:
            assert r.text == o.text


@pytest.mark.parametrize(("release", "shown"), [("1.6.0", {"pyserini-1.6.0-2cr"}), ("2.4.0", {"pyserini-2.4.0-2cr"}),
                                                ("2.2.0", set())])  # fmt: skip
def test_a_run_meets_the_references_of_its_own_release(release: str, shown: set[str]) -> None:
    cfg = run_config({"languages": list(MIRACL_LANGUAGES)}, release=release)
    ours = {"bm25": {lang: 0.4 for lang in MIRACL_LANGUAGES} | {"mean": 0.4}}
    got = published.side_by_side(ours, "miracl", "dev", "nDCG@10", cfg)
    assert {str(r["source_id"]) for r in got} - {"bge-m3-table11"} == shown
    if shown:
        ko = next(r for r in got if r["partition"] == "ko" and str(r["source_id"]).startswith("pyserini"))
        assert ko["published"] == ("0.4190" if release == "1.6.0" else "0.4533")
    # the facts are not configuration: without them, no pyserini reference is met
    cfg.pop("pyserini")
    assert {str(r["source_id"]) for r in published.side_by_side(ours, "miracl", "dev", "nDCG@10", cfg)} == {
        "bge-m3-table11"
    }


def test_the_release_is_the_conda_pin_or_the_installed_one(tmp_path: Path) -> None:
    (tmp_path / "envs").mkdir()
    (tmp_path / ENV_FILE).write_text("dependencies:\n  - pip:\n      - pyserini==2.4.0\n      - numpy\n")
    assert pyserini_release(tmp_path, conda=True) == "2.4.0"
    assert pyserini_release(tmp_path, conda=False) == installed_release()
    assert engine_facts("2.4.0") == {"pyserini": {"release": "2.4.0"}}
    (tmp_path / ENV_FILE).write_text("dependencies:\n  - pip:\n      - pyserini>=1\n")
    with pytest.raises(InputError, match=r"lucene\.yaml.*0 pins of pyserini"):
        pyserini_release(tmp_path, conda=True)
