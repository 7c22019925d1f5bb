"""Fusion-weight sensitivity: equal to evaluating hand-fused runs through the workflow's path."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pyarrow as pa
import pytest

from miracl_eval import schemas
from miracl_eval.errors import InputError
from miracl_eval.evaluation import metrics, sensitivity
from tests.helpers import rank_hits


def make_data(seed: int = 7, n_queries: int = 40, n_cands: int = 30, coarse: bool = False):
    """Components (qid, docid, dense, sparse, multivec) and qrels with gaps on both sides."""
    rng = random.Random(seed)
    cols: dict[str, list] = {"qid": [], "docid": [], "dense": [], "sparse": [], "multivec": []}
    qrels: dict[str, dict[str, int]] = {}
    for q in range(n_queries):
        qid = f"{q}" if q % 3 else f"d{q}#0"  # ids that look like docids, too
        docs = rng.sample(range(500), n_cands)
        for d in docs:
            cols["qid"].append(qid)
            cols["docid"].append(f"d{d}#0")
            if coarse:  # many ties
                cols["dense"].append(rng.choice([0.25, 0.5, 0.75]))
                cols["sparse"].append(rng.choice([0.0, 0.1, 0.2]))
                cols["multivec"].append(rng.choice([0.5, 0.6]))
            else:
                cols["dense"].append(rng.random())
                cols["sparse"].append(rng.random() * 0.4)
                cols["multivec"].append(rng.random())
        if q % 10 != 9:  # some candidate queries are unjudged
            judged = rng.sample(docs, 5) + [10_000 + q]  # one relevant passage never retrieved
            qrels[qid] = {f"d{d}#0": rng.choice([0, 1, 1, 2]) for d in judged}
    for q in range(3):  # judged queries without any candidate count 0
        qrels[f"nocand{q}"] = {"d1#0": 1}
    return pa.table(cols), qrels


def hand_fused_ndcg(table: pa.Table, qrels, weights: dict[str, float], tmp: Path) -> tuple[float, dict[str, float]]:
    """Fuse row by row in plain Python, write a run Parquet and evaluate it like the workflow."""
    data = table.to_pylist()
    hits: dict[str, list[tuple[str, float]]] = {}
    for row in data:
        score = 0.0
        for name, w in weights.items():
            score = score + w * row[name]
        hits.setdefault(row["qid"], []).append((row["docid"], score))
    path = tmp / f"run-{'-'.join(f'{k}{v}' for k, v in weights.items())}.parquet"
    schemas.write_table(rank_hits(hits), path, schemas.RUN)
    per_query = metrics.evaluate_run(path, qrels, (metrics.NDCG10,))
    values = dict(zip(per_query.column("qid").to_pylist(), per_query.column("value").to_pylist(), strict=True))
    return metrics.mean_by_measure(per_query)["nDCG@10"], values


@pytest.mark.parametrize("coarse", [False, True])
def test_sensitivity_equals_hand_fused_runs(tmp_path: Path, coarse: bool) -> None:
    table, qrels = make_data(coarse=coarse)
    rows = sensitivity.sensitivity(table, qrels, partition="xx")
    assert [(r["method"], r["sparse_weight"]) for r in rows] == [
        (m, w) for m in ("dense+sparse", "all") for w in sensitivity.DEFAULT_WEIGHTS
    ]
    assert sensitivity.DEFAULT_WEIGHTS == (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
    comp = sensitivity.Components(table)
    for r in rows:
        w = r["sparse_weight"]
        weights = sensitivity.method_weights(r["method"], w)
        expected, per_query = hand_fused_ndcg(table, qrels, weights, tmp_path)
        assert r["partition"] == "xx"
        assert r["ndcg10"] == pytest.approx(expected, rel=1e-12, abs=1e-15)
        # per query, exactly the same values (top-10-plus-ties == full run)
        got = sensitivity.evaluate_hits(comp.run(comp.fused(weights), 10), qrels)["nDCG@10"]
        assert got == per_query
        full = sensitivity.evaluate_hits(comp.run(comp.fused(weights), None), qrels)["nDCG@10"]
        assert full == per_query


def test_sensitivity_varies_with_weight_and_includes_zero_queries() -> None:
    table, qrels = make_data()
    rows = sensitivity.sensitivity(table, qrels, weights=[0.0, 1.0], methods=["dense+sparse"])
    assert len({r["ndcg10"] for r in rows}) == 2
    # the three judged queries without candidates pull the mean down: mean over all qrels
    comp = sensitivity.Components(table)
    per_query = sensitivity.evaluate_hits(comp.run(comp.fused({"dense": 1.0, "sparse": 0.0}), 10), qrels)["nDCG@10"]
    assert set(per_query) == set(qrels)
    assert all(per_query[f"nocand{q}"] == 0.0 for q in range(3))
    assert rows[0]["ndcg10"] == pytest.approx(math.fsum(per_query.values()) / len(qrels))


def test_matches_the_workflow_fusion_module(tmp_path: Path) -> None:
    from miracl_eval.fusion import weighted as fusion

    table, qrels = make_data(coarse=True)
    for method, w in (("dense+sparse", 0.3), ("all", 0.7)):
        weights = sensitivity.method_weights(method, w)
        run = fusion.fuse(table.cast(fusion.COMPONENTS), weights)
        path = tmp_path / f"{method}.parquet"
        schemas.write_table(run, path, schemas.RUN)
        per_query = metrics.evaluate_run(path, qrels, (metrics.NDCG10,))
        expected = metrics.mean_by_measure(per_query)["nDCG@10"]
        (row,) = sensitivity.sensitivity(table, qrels, weights=[w], methods=[method])
        assert row["ndcg10"] == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_per_method_files_and_missing_components(tmp_path: Path) -> None:
    table, qrels = make_data()
    union = table.set_column(4, "multivec", pa.nulls(table.num_rows, pa.float64()))  # dense+sparse candidates
    top = table.slice(0, table.num_rows // 2)  # 'all' candidates
    schemas.write_table(union, tmp_path / "ds.parquet", union.schema)
    schemas.write_table(top, tmp_path / "all.parquet", top.schema)
    rows = sensitivity.sensitivity(
        {"dense+sparse": tmp_path / "ds.parquet", "all": tmp_path / "all.parquet"}, qrels, weights=[0.3]
    )
    assert [r["method"] for r in rows] == ["dense+sparse", "all"]
    assert rows[1]["ndcg10"] == sensitivity.sensitivity(top, qrels, weights=[0.3], methods=["all"])[0]["ndcg10"]
    # a single file without multi-vector scores serves only dense+sparse
    assert [r["method"] for r in sensitivity.sensitivity(union, qrels, weights=[0.3])] == ["dense+sparse"]
    # a partly missing component score is an error, never 0
    sparse = table.column("sparse").to_pylist()
    sparse[5] = None
    broken = table.set_column(3, "sparse", pa.array(sparse, pa.float64()))
    with pytest.raises(InputError, match="1 of .* have no sparse score"):
        sensitivity.sensitivity(broken, qrels, weights=[0.3], methods=["dense+sparse"])
    with pytest.raises(InputError, match="needs the dense, sparse, multivec"):
        sensitivity.sensitivity({"all": union}, qrels, weights=[0.3])


def test_sensitivity_table_writes_tidy_tsv(tmp_path: Path) -> None:
    table, qrels = make_data()
    out = tmp_path / "sens.tsv"
    rows = sensitivity.sensitivity_table(
        {"sw": table, "yo": table}, {"sw": qrels, "yo": qrels}, weights=[0.0, 0.5], output=out
    )
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "partition\tmethod\tsparse_weight\tndcg10"
    assert len(lines) == 1 + len(rows) == 1 + 2 * 2 * 2
    part, method, w, v = lines[1].split("\t")
    assert (part, method, w) == ("sw", "dense+sparse", "0")
    assert float(v) == pytest.approx(rows[0]["ndcg10"], abs=1e-6)
