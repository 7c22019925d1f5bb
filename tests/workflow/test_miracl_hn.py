"""Every method on MTEB's MIRACL hard negatives (``dataset: miracl-hn``) unchanged: the same sample data run as
``miracl`` and as ``miracl-hn`` gives the same numbers for BM25, BGE-M3's dense, sparse, multi-vector and fused
rows, a hybrid and a reranking (the sample's passages have no whitespace for MTEB's join to strip)."""

from __future__ import annotations

from pathlib import Path

from miracl_eval.evaluation import published
from tests.helpers import M3_METHODS, m3_config, snakemake, write_config

METHODS = [*M3_METHODS, "bm25+bge-m3", "bm25>>ce-random"]


def test_every_method_runs_on_the_hard_negatives_as_on_miracl(tmp_path: Path) -> None:
    tables = {}
    for dataset in ("miracl", "miracl-hn"):
        cfg = m3_config(
            ["sw"],
            dataset=dataset,
            methods=METHODS,
            hybrids={"bm25+bge-m3": {"systems": ["bm25", "bge-m3/dense"], "method": "rrf"}},
            rerankers={"ce-random": {"family": "cross-encoder", "checkpoint": "resources/models/tiny-cross-encoder",
                                     "max_length": 256, "depth": 20}},
        )  # fmt: skip
        snakemake(tmp_path, write_config(tmp_path, cfg, f"{dataset}.yaml"), f"results/{dataset}_ndcg.tsv")
        tables[dataset] = published.read_results_table(tmp_path / "results" / f"{dataset}_ndcg.tsv")
    assert set(tables["miracl-hn"]) == set(METHODS)
    for method in METHODS:
        ours, theirs = tables["miracl-hn"][method], tables["miracl"][method]
        assert ours["sw"] == theirs["sw"], method
    assert len({round(t["sw"], 4) for t in tables["miracl-hn"].values()}) > 3  # not one number for all
