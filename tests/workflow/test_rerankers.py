"""Rerankers in real Snakemake runs on the sample: `{row}>>{reranker}` rows over BM25, over a first stage that
is not a row (me5-small), and over a reranked row; their scores against FlagEmbedding's rerankers; and which
jobs a new reranker, a new depth or a new setting runs."""

from __future__ import annotations

import copy
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from miracl_eval.evaluation.published import read_results_table
from miracl_eval.runs import read_run
from tests.helpers import BATCH_TOL, planned_jobs, read_trec, sample_config, snakemake, write_config

LANGS = ["sw", "yo"]
CE, LLM = "ce-random", "llm-random"
RERANKERS = {
    CE: {"family": "cross-encoder", "checkpoint": "resources/models/tiny-cross-encoder", "max_length": 128},
    LLM: {"family": "llm", "checkpoint": "resources/models/tiny-llm", "max_length": 128, "depth": 20},
}
METHODS = ["bm25", f"bm25>>{CE}", f"me5-small/dense>>{LLM}", f"bm25>>{CE}>>{LLM}"]
TARGET = "results/miracl_ndcg.tsv"


def rerankers_config(rerankers: dict | None = None, methods: list[str] | None = None) -> dict:
    cfg = sample_config(LANGS, threads=1, query_chunk=5, preload=True)
    cfg.update(
        models={"me5-small": {"checkpoint": "resources/models/me5-small"}},
        hybrids={},
        rerankers=copy.deepcopy(RERANKERS if rerankers is None else rerankers),
        methods=list(METHODS if methods is None else methods),
    )
    return cfg


@pytest.fixture(scope="module")
def rerank_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("rerankers")
    snakemake(work, write_config(work, rerankers_config()), TARGET)
    return work


def _dry(work: Path, cfg: dict, name: str) -> dict[str, int]:
    return planned_jobs(snakemake(work, write_config(work, cfg, name), TARGET, args=("-n",)))


def _score_files(work: Path, reranker: str, first: str, langs: list[str] = LANGS) -> list[Path]:
    """The score files of a reranker over a first stage (query ids repeat across languages)."""
    return sorted(
        p for lang in langs for p in (work / "resources/miracl/rerankers" / reranker / lang / first).glob("*.parquet")
    )


def _texts(work: Path, lang: str) -> tuple[dict[str, str], dict[str, str]]:
    """The partition's queries and its passages as FlagEmbedding's MIRACL evaluation joins them."""
    queries = pq.read_table(work / f"resources/miracl/topics/{lang}/queries.parquet").to_pylist()
    corpus = pq.read_table(work / f"resources/miracl/corpus/{lang}/corpus.parquet").to_pylist()
    return {q["qid"]: q["query"] for q in queries}, {p["docid"]: f"{p['title']} {p['text']}".strip() for p in corpus}


def test_every_row_has_its_table_row_tag_and_exactly_the_top_depth_of_its_first_stage(rerank_run: Path) -> None:
    for table in ("miracl_ndcg.tsv", "miracl_recall100.tsv"):
        assert list(read_results_table(rerank_run / "results" / table)) == METHODS
    for label in METHODS:
        for lang in LANGS:
            lines = (rerank_run / f"runs/miracl/{lang}/{label}.trec").read_text(encoding="utf-8").splitlines()
            assert lines and {line.split(" ")[5] for line in lines} == {label}
            assert read_trec(rerank_run / f"runs/miracl/{lang}/{label}.trec").num_rows == len(lines)
    # me5-small/dense is computed as a first stage, not evaluated as a row
    assert (rerank_run / "runs/miracl/sw/me5-small/dense.parquet").is_file()
    assert not (rerank_run / "results/miracl/sw/me5-small/dense.per_query.parquet").exists()
    for first, reranker, depth in (("bm25", CE, 100), ("me5-small/dense", LLM, 20), (f"bm25>>{CE}", LLM, 20)):
        for lang in LANGS:
            run = read_run(rerank_run / f"runs/miracl/{lang}/{first}>>{reranker}.parquet")
            stage = read_run(rerank_run / f"runs/miracl/{lang}/{first}.parquet")
            top = stage.filter(pa.compute.less_equal(stage["rank"], depth))
            assert sorted(zip(run["qid"].to_pylist(), run["docid"].to_pylist(), strict=True)) == sorted(
                zip(top["qid"].to_pylist(), top["docid"].to_pylist(), strict=True)
            )
            scores = pa.concat_tables([pq.read_table(p) for p in _score_files(rerank_run, reranker, first, [lang])])
            score = {
                (q, d): s for q, d, s in zip(*(scores[c].to_pylist() for c in ("qid", "docid", "score")), strict=True)
            }
            for qid in set(run["qid"].to_pylist()):
                mine = run.filter(pa.compute.equal(run["qid"], qid))
                expected = sorted(mine["docid"].to_pylist(), key=lambda d, q=qid: (-score[(q, d)], d))
                assert mine["docid"].to_pylist() == expected and mine["rank"].to_pylist() == list(
                    range(1, len(expected) + 1)
                )


def test_scores_equal_flagembedding_rerankers_on_the_same_pairs(rerank_run: Path) -> None:
    import numpy as np

    flag_embedding = pytest.importorskip("FlagEmbedding")
    queries, passages = _texts(rerank_run, "sw")
    for reranker, first, oracle, tol in (
        (CE, "bm25", flag_embedding.FlagReranker, BATCH_TOL["cross-encoder"]),
        (LLM, "me5-small/dense", flag_embedding.FlagLLMReranker, BATCH_TOL["llm"]),
    ):
        table = pq.read_table(rerank_run / "resources/miracl/rerankers" / reranker / "sw" / first / "0000.parquet")
        pairs = [
            [queries[q], passages[d]] for q, d in zip(table["qid"].to_pylist(), table["docid"].to_pylist(), strict=True)
        ]
        model = oracle(
            str(rerank_run / RERANKERS[reranker]["checkpoint"]), use_fp16=False, devices="cpu", max_length=128
        )
        theirs = np.asarray(model.compute_score(pairs, batch_size=16))
        np.testing.assert_allclose(table["score"].to_numpy(), theirs, atol=tol, rtol=tol)  # batched otherwise


def test_a_rerun_and_a_new_batch_size_have_nothing_to_do(rerank_run: Path) -> None:
    assert _dry(rerank_run, rerankers_config(), "same.yaml") == {}
    rerankers = copy.deepcopy(RERANKERS)
    rerankers[CE]["batch_size"] = 3
    assert _dry(rerank_run, rerankers_config(rerankers), "batch.yaml") == {}


def test_a_new_setting_reruns_only_that_rerankers_rows(rerank_run: Path) -> None:
    chunks = len(_score_files(rerank_run, LLM, "me5-small/dense"))
    assert chunks == len(_score_files(rerank_run, CE, "bm25")) >= 4  # several query chunks per partition
    rerankers = copy.deepcopy(RERANKERS)
    rerankers[LLM]["max_length"] = 96
    assert _dry(rerank_run, rerankers_config(rerankers), "llm-length.yaml") == {
        "reranker_scores": 2 * chunks,  # over me5-small and over the reranked BM25
        "reranked_run": 2 * len(LANGS),
        "evaluate": 2,
        "tables": 1,
    }
    # a new reranker runs its own jobs only
    added = {**RERANKERS, "ce-sigmoid": {**RERANKERS[CE], "sigmoid": True}}
    assert _dry(rerank_run, rerankers_config(added, [*METHODS, "bm25>>ce-sigmoid"]), "added.yaml") == {
        "reranker_scores": chunks,
        "reranked_run": len(LANGS),
        "evaluate": 1,
        "tables": 1,
    }


def test_a_hub_reranker_is_fetched_once_by_its_own_job(rerank_run: Path) -> None:
    cfg = rerankers_config({"bge-reranker-v2-m3": {}}, ["bm25", "bm25>>bge-reranker-v2-m3"])
    proc = snakemake(rerank_run, write_config(rerank_run, cfg, "hub.yaml"), TARGET, args=("-n",))
    jobs = planned_jobs(proc)
    assert jobs["fetch_model"] == 1 and jobs["reranked_run"] == len(LANGS)
    assert "resources/models/hub/BAAI--bge-reranker-v2-m3" in proc.stdout  # the folder every scoring job loads


def test_the_report_compares_each_reranked_row_with_its_first_stage_and_lists_the_rerankers(rerank_run: Path) -> None:
    from miracl_eval.tsv import read_tsv

    pages = ("results/miracl_significance.tsv", "results/miracl_settings.tsv", "results/miracl_ndcg.html")
    snakemake(rerank_run, rerank_run / "config.yaml", *pages)
    header, rows = read_tsv(rerank_run / pages[0])
    pairs = {(r[header.index("method_a")], r[header.index("method_b")]) for r in rows}
    assert pairs == {(f"bm25>>{CE}", "bm25"), (f"me5-small/dense>>{LLM}", "bm25"), (f"bm25>>{CE}>>{LLM}", "bm25"),
                     (f"bm25>>{CE}>>{LLM}", f"bm25>>{CE}")}  # fmt: skip
    header, rows = read_tsv(rerank_run / pages[1])
    settings = {(r[0], r[1]): r[2] for r in rows}
    assert settings[(f"reranker {LLM}", "reranks")] == f"me5-small/dense, bm25>>{CE}"
    assert settings[(f"reranker {CE}", f"rerankers.{CE}.depth")] == "100"
    assert settings[("model me5-small", "models.me5-small.checkpoint")] == "resources/models/me5-small"
    html = (rerank_run / pages[2]).read_text(encoding="utf-8")
    assert all(label.replace(">", "&gt;") in html for label in METHODS)


def test_a_lower_depth_reranks_from_the_kept_scores_without_a_model(rerank_run: Path) -> None:
    kept = {p: p.stat().st_mtime_ns for p in _score_files(rerank_run, CE, "bm25")}
    rerankers = copy.deepcopy(RERANKERS)
    rerankers[CE]["depth"] = 30
    cfg = write_config(rerank_run, rerankers_config(rerankers), "depth30.yaml")
    jobs = planned_jobs(snakemake(rerank_run, cfg, TARGET, args=("-n",)))
    chained = len(_score_files(rerank_run, LLM, f"bm25>>{CE}"))  # the reranked row over it has a new first stage
    assert jobs == {"reranked_run": 2 * len(LANGS), "reranker_scores": chained, "evaluate": 2, "tables": 1}
    snakemake(rerank_run, cfg, TARGET)
    assert {p: p.stat().st_mtime_ns for p in _score_files(rerank_run, CE, "bm25")} == kept  # no model ran
    for lang in LANGS:
        run = read_run(rerank_run / f"runs/miracl/{lang}/bm25>>{CE}.parquet")
        stage = read_run(rerank_run / f"runs/miracl/{lang}/bm25.parquet")
        top = stage.filter(pa.compute.less_equal(stage["rank"], 30))
        assert (
            sorted(run["docid"].to_pylist()) == sorted(top["docid"].to_pylist()) and max(run["rank"].to_pylist()) <= 30
        )
    # and back at the scored depth: nothing runs but the reranked rows
    jobs = _dry(rerank_run, rerankers_config(), "depth100.yaml")
    assert jobs.get("reranker_scores", 0) == chained and jobs["reranked_run"] == 2 * len(LANGS)
