"""Several models side by side in one run (tiny offline checkpoints of every family), each cached under
its own name: the rows, the TREC tags, and which jobs adding, editing or removing a model runs."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from miracl_eval.evaluation.published import read_results_table
from tests.helpers import m3_config, planned_jobs, snakemake, write_config

LANG = "sw"
MODELS = {
    "bge-m3": {"checkpoint": "resources/models/tiny-bge-m3", "rerank_depth": 20},
    # two dense models on tiny checkpoints of two shapes, with different pooling and prefixes
    "cls-bert": {"family": "dense", "checkpoint": "resources/models/tiny-bert", "pooling": "cls", "normalize": False},
    "e5": {
        "family": "dense",
        "checkpoint": "resources/models/tiny-xlm-r",
        "pooling": "mean",
        "normalize": True,
        "query_prefix": "query: ",
        "passage_prefix": "passage: ",
        "query_max_length": 64,
    },
    "splade": {"family": "splade", "checkpoint": "resources/models/tiny-mlm"},
}
METHODS = [
    "bm25",
    "bge-m3/dense",
    "bge-m3/sparse",
    "bge-m3/all",
    "cls-bert/dense",
    "e5/dense",
    "splade/sparse",
    "bm25+e5",
]
HYBRIDS = {"bm25+e5": {"systems": ["bm25", "e5/dense"], "method": "interpolation", "alpha": 0.5}}
TARGET = "results/miracl_ndcg.tsv"


def models_config(models: dict | None = None, methods: list[str] | None = None, hybrids: dict | None = None) -> dict:
    cfg = m3_config([LANG], encoder={"device": "cpu", "shard_size": 200, "batch_size": 8}, query_chunk=50, preload=True)
    cfg.update(
        models=copy.deepcopy(MODELS if models is None else models),
        methods=list(METHODS if methods is None else methods),
        hybrids=copy.deepcopy(HYBRIDS if hybrids is None else hybrids),
    )
    return cfg


@pytest.fixture(scope="module")
def models_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("models")
    snakemake(work, write_config(work, models_config()), TARGET)
    return work


def _dry(work: Path, cfg: dict, name: str) -> dict[str, int]:
    return planned_jobs(snakemake(work, write_config(work, cfg, name), TARGET, args=("-n",)))


def _mtimes(work: Path, model: str) -> dict[str, int]:
    """Every file of ``model``: encodings, indexes, runs and per-query results."""
    files = [
        *(work / "resources/miracl/encoded" / model).rglob("*"),
        *(work / "resources/miracl/indexes" / LANG / model).rglob("*"),
        *(work / "runs/miracl" / LANG / model).rglob("*"),
        *(work / "results/miracl" / LANG / model).rglob("*"),
    ]
    found = {str(p.relative_to(work)): p.stat().st_mtime_ns for p in files if p.is_file()}
    assert found, f"no files of {model}"
    return found


def test_every_model_and_method_has_its_row_and_tag(models_run: Path) -> None:
    for table in ("miracl_ndcg.tsv", "miracl_recall100.tsv"):
        rows = read_results_table(models_run / "results" / table)
        assert list(rows) == METHODS
        assert all(0.0 <= v <= 1.0 for values in rows.values() for v in values.values())
    for label in METHODS:
        trec = (models_run / "runs/miracl" / LANG / f"{label}.trec").read_text(encoding="utf-8").splitlines()
        assert trec and {line.split(" ")[5] for line in trec} == {label}
    # each model's encodings under its own name (beside the manifests of its blocks)
    for model, kinds in (("bge-m3", {"dense", "sparse"}), ("cls-bert", {"dense"}), ("e5", {"dense"})):
        folder = models_run / "resources/miracl/encoded" / model / "corpus" / LANG
        assert {p.name for p in folder.iterdir()} == {*kinds, "blocks"}
    folder = models_run / "resources/miracl/encoded/splade/corpus" / LANG
    assert {p.name for p in folder.iterdir()} == {"sparse", "blocks"}


def test_rerun_has_nothing_to_do(models_run: Path) -> None:
    assert _dry(models_run, models_config(), "same.yaml") == {}


def test_editing_one_model_reruns_only_its_jobs(models_run: Path) -> None:
    models = copy.deepcopy(MODELS)
    models["e5"]["query_prefix"] = "question: "
    jobs = _dry(models_run, models_config(models), "e5-prefix.yaml")
    assert jobs == {  # a query setting: the passages keep their encodings; the exact search runs again
        "encode_queries_dense": 1,
        "dense_block_search": 1,
        "dense_merge": 1,
        "hybrid": 1,
        "evaluate": 2,  # e5/dense and the hybrid that uses it
        "tables": 1,
    }
    models["e5"]["passage_prefix"] = ""
    jobs = _dry(models_run, models_config(models), "e5-prefixes.yaml")
    assert jobs["encode_corpus_dense"] == jobs["dense_block_search"] == jobs["encode_queries_dense"] == 1
    # a retrieval-stage setting of SPLADE re-indexes without re-encoding
    models = copy.deepcopy(MODELS)
    models["splade"]["quantization"] = {"scale": 100}
    jobs = _dry(models_run, models_config(models), "splade-q.yaml")
    assert jobs == {"sparse_index": 1, "sparse_search": 1, "evaluate": 1, "tables": 1}
    # a hybrid's weight re-fuses only the hybrid
    hybrids = copy.deepcopy(HYBRIDS)
    hybrids["bm25+e5"]["alpha"] = 0.7
    assert _dry(models_run, models_config(hybrids=hybrids), "alpha.yaml") == {"hybrid": 1, "evaluate": 1, "tables": 1}


def test_adding_and_removing_models_touch_nothing_else(models_run: Path, tmp_path: Path) -> None:
    before = {m: _mtimes(models_run, m) for m in MODELS}
    # add a model (an existing tiny checkpoint with other settings): only its jobs and the table
    models = {**MODELS, "cls-bert-norm": {**MODELS["cls-bert"], "normalize": True}}
    cfg = models_config(models, [*METHODS, "cls-bert-norm/dense"])
    assert _dry(models_run, cfg, "added.yaml") == {
        "encode_corpus_dense": 1,
        "encode_queries_dense": 1,
        "dense_block_search": 1,
        "dense_merge": 1,
        "evaluate": 1,
        "tables": 1,
    }
    snakemake(models_run, write_config(models_run, cfg, "added.yaml"), TARGET)
    assert list(read_results_table(models_run / "results/miracl_ndcg.tsv")) == [*METHODS, "cls-bert-norm/dense"]
    # remove two models: only the table is rewritten
    kept = {k: v for k, v in MODELS.items() if k not in ("cls-bert", "splade")}
    methods = [m for m in METHODS if not m.startswith(("cls-bert/", "splade/"))]
    cfg = models_config(kept, methods)
    assert _dry(models_run, cfg, "removed.yaml") == {"tables": 1}
    snakemake(models_run, write_config(models_run, cfg, "removed.yaml"), TARGET)
    assert list(read_results_table(models_run / "results/miracl_ndcg.tsv")) == methods
    for model, mtimes in before.items():
        assert _mtimes(models_run, model) == mtimes, f"{model}'s files were rewritten"
    # back to the fixture's configuration: again only the table
    snakemake(models_run, write_config(models_run, models_config(), "config.yaml"), TARGET)
