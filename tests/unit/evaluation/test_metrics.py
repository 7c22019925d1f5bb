"""Metrics against independent oracles: pytrec_eval directly, and Anserini's Java trec_eval -c."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest
import pytrec_eval

from miracl_eval import schemas
from miracl_eval.evaluation.metrics import evaluate_run, format_table, mean_by_measure, write_tables
from miracl_eval.lucene.anserini import anserini_jar
from miracl_eval.lucene.jvm import java_executable
from miracl_eval.runs import write_run
from tests.helpers import rank_hits


def _random_case(seed: int) -> tuple[dict[str, dict[str, int]], dict[str, list[tuple[str, float]]]]:
    rng = random.Random(seed)
    docs = [f"{a}#{b}" for a in range(40) for b in range(5)]
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, list[tuple[str, float]]] = {}
    for i in range(60):
        qid = docs[i] if i % 7 == 0 else str(i)  # some qids look like (and equal) docids
        judged = rng.sample(docs, rng.randint(1, 15))
        qrels[qid] = {d: rng.choice([0, 0, 1, 1, 2]) for d in judged}
        if i % 7 == 0:
            qrels[qid][qid] = 1
        if i % 11 == 5:
            continue  # a query of the qrels without any hit counts 0
        hits = rng.sample(docs, rng.randint(1, 150))
        # coarse scores create ties, which trec_eval breaks by docid
        run[qid] = [(d, round(rng.uniform(0, 5), 1)) for d in hits]
    run["not-judged"] = [("1#0", 1.0)]
    return qrels, run


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equal_to_pytrec_eval(tmp_path: Path, seed: int) -> None:
    qrels, hits = _random_case(seed)
    write_run(rank_hits(hits), tmp_path / "r.parquet", tmp_path / "r.trec", "t")
    ours = evaluate_run(tmp_path / "r.parquet", qrels, chunk=17).to_pylist()
    oracle = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"}).evaluate(
        {q: dict(h) for q, h in hits.items()}
    )
    names = {"nDCG@10": "ndcg_cut_10", "R@100": "recall_100"}
    seen = set()
    for row in ours:
        expected = oracle[row["qid"]][names[row["measure"]]] if row["qid"] in oracle else 0.0
        assert row["value"] == pytest.approx(expected, abs=1e-9), row
        seen.add(row["qid"])
    assert seen == set(qrels), "every query of the qrels, and only those"


def _java_trec_eval(qrels_path: Path, run_path: Path) -> dict[tuple[str, str], float]:
    out = subprocess.run(
        [java_executable(), "-cp", anserini_jar(), "trec_eval", "-c", "-q", "-m", "ndcg_cut.10", "-m", "recall.100",
         str(qrels_path), str(run_path)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    values = {}
    for line in out.splitlines():
        measure, qid, value = line.split()
        values[(measure, qid)] = float(value)
    return values


def test_aggregate_equals_trec_eval_minus_c(tmp_path: Path) -> None:
    qrels, hits = _random_case(3)
    write_run(rank_hits(hits), tmp_path / "r.parquet", tmp_path / "r.trec", "t")
    (tmp_path / "qrels").write_text(
        "".join(f"{q} 0 {d} {r}\n" for q, judged in qrels.items() for d, r in judged.items())
    )
    java = _java_trec_eval(tmp_path / "qrels", tmp_path / "r.trec")
    table = evaluate_run(tmp_path / "r.parquet", qrels)
    means = mean_by_measure(table)
    assert means["nDCG@10"] == pytest.approx(java[("ndcg_cut_10", "all")], abs=5e-5)
    assert means["R@100"] == pytest.approx(java[("recall_100", "all")], abs=5e-5)
    for row in table.to_pylist():
        key = ({"nDCG@10": "ndcg_cut_10", "R@100": "recall_100"}[row["measure"]], row["qid"])
        if key in java:
            assert row["value"] == pytest.approx(java[key], abs=5e-5)


def test_tables_have_method_rows_language_columns_and_mean(tmp_path: Path) -> None:
    qrels = {"1": {"a": 1}, "2": {"b": 1}}
    files = {}
    for method, hits in {"bm25": {"1": [("a", 1.0)]}, "dense": {"1": [("a", 1.0)], "2": [("b", 1.0)]}}.items():
        for part in ("sw", "yo"):
            write_run(rank_hits(hits), tmp_path / "r.parquet", tmp_path / "r.trec", method)
            path = tmp_path / f"{method}-{part}.parquet"
            schemas.write_table(evaluate_run(tmp_path / "r.parquet", qrels), path, schemas.PER_QUERY)
            files[(method, part)] = path
    out = {"ndcg": tmp_path / "ndcg.tsv", "recall100": tmp_path / "r100.tsv"}
    write_tables(files, ["bm25", "dense"], ["sw", "yo"], out)
    lines = out["ndcg"].read_text().splitlines()
    assert lines == ["method\tsw\tyo\tmean", "bm25\t0.5000\t0.5000\t0.5000", "dense\t1.0000\t1.0000\t1.0000"]


def test_table_without_mean_column() -> None:
    text = format_table({"bm25": {"full": 0.17851}}, ["bm25"], ["full"], mean_column=False)
    assert text == "method\tfull\nbm25\t0.1785\n"
