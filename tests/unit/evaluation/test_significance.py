"""Paired randomisation test and bootstrap CIs: behaviour on real runs and in simulations."""

from __future__ import annotations

import csv
import itertools
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from miracl_eval import schemas
from miracl_eval.errors import InputError
from miracl_eval.evaluation import metrics, significance
from miracl_eval.inputs.loading import iter_qrels
from tests.helpers import rank_hits


def synthetic_qrels(n_queries: int, seed: int, prefix: str = "") -> dict[str, dict[str, int]]:
    rng = random.Random(seed)
    qrels = {}
    for q in range(n_queries):
        rel = {f"{prefix}{q}-r{i}": rng.choice([1, 1, 2]) for i in range(rng.randint(1, 4))}
        non = {f"{prefix}{q}-n{i}": 0 for i in range(rng.randint(5, 15))}
        qrels[f"{prefix}{q}"] = rel | non
    return qrels


def good_and_shuffled_runs(qrels: dict[str, dict[str, int]], seed: int) -> tuple[dict, dict]:
    """A run with high nDCG (relevant passages near the top) and the same run with each query's
    passage order shuffled (same passages, same scores multiset: a poor ranking)."""
    rng = random.Random(seed)
    good, poor = {}, {}
    for qid, judged in sorted(qrels.items()):
        rel = [d for d, r in judged.items() if r > 0]
        non = [d for d, r in judged.items() if r == 0] + [f"{qid}-u{i}" for i in range(30)]
        rng.shuffle(rel)
        rng.shuffle(non)
        order = rel + non
        if rng.random() < 0.3 and len(order) > 2:  # a little noise at the top
            i, j = rng.sample(range(min(6, len(order))), 2)
            order[i], order[j] = order[j], order[i]
        scores = [float(len(order) - k) for k in range(len(order))]
        good[qid] = list(zip(order, scores, strict=True))
        shuffled = order[:]
        rng.shuffle(shuffled)
        poor[qid] = list(zip(shuffled, scores, strict=True))
    return good, poor


def per_query_file(hits: dict, qrels: dict, path: Path) -> Path:
    run_path = path.with_suffix(".run.parquet")
    schemas.write_table(rank_hits(hits), run_path, schemas.RUN)
    table = metrics.evaluate_run(run_path, qrels)
    schemas.write_table(table, path, schemas.PER_QUERY)
    return path


def test_identical_runs_give_p_one(tmp_path: Path) -> None:
    qrels = synthetic_qrels(150, seed=1)
    good, _ = good_and_shuffled_runs(qrels, seed=2)
    f = per_query_file(good, qrels, tmp_path / "a.parquet")
    g = per_query_file(good, qrels, tmp_path / "b.parquet")
    rows = significance.significance_table({("a", "xx"): f, ("b", "xx"): g}, [("a", "b")], n_permutations=2000)
    (row,) = rows
    assert row["p_value"] == 1.0
    assert row["diff"] == 0.0 and row["ci_low"] == 0.0 and row["ci_high"] == 0.0
    assert row["mean_a"] == row["mean_b"] and row["n_queries"] == 150


def test_run_against_its_shuffled_copy_is_significant(tmp_path: Path) -> None:
    files = {}
    for part, seed in (("p1", 10), ("p2", 20)):
        qrels = synthetic_qrels(120 if part == "p1" else 60, seed=seed, prefix=part)
        good, poor = good_and_shuffled_runs(qrels, seed=seed + 1)
        files[("good", part)] = per_query_file(good, qrels, tmp_path / f"good-{part}.parquet")
        files[("poor", part)] = per_query_file(poor, qrels, tmp_path / f"poor-{part}.parquet")
    out = tmp_path / "results" / "miracl_significance.tsv"
    rows = significance.significance_table(files, [("good", "poor")], measure="nDCG@10", output=out)
    assert [r["partition"] for r in rows] == ["p1", "p2", "mean"]
    for r in rows:
        assert r["diff"] > 0.2
        assert r["p_value"] < 0.01
        assert 0 < r["ci_low"] <= r["diff"] <= r["ci_high"]
        assert r["mean_a"] > 0.8
    assert rows[2]["n_queries"] == 180
    assert rows[2]["diff"] == pytest.approx((rows[0]["diff"] + rows[1]["diff"]) / 2)
    # the same for the other measure, and the reverse pair has the opposite sign
    rev = significance.significance_table(files, [("poor", "good")], measure="R@100", n_permutations=1000)
    assert all(r["diff"] <= 0 for r in rev)
    # TSV output
    lines = list(csv.DictReader(out.read_text(encoding="utf-8").splitlines(), delimiter="\t"))
    assert list(lines[0]) == list(significance.COLUMNS)
    assert [ln["partition"] for ln in lines] == ["p1", "p2", "mean"]
    assert float(lines[0]["p_value"]) == pytest.approx(rows[0]["p_value"])
    assert float(lines[0]["p_value"]) == pytest.approx(1 / 10_001)  # every permutation is less extreme


def test_real_miracl_qrels_shuffled_run(miracl_dev: Path, tmp_path: Path) -> None:
    qrels: dict[str, dict[str, int]] = {}
    for _, qid, docid, rel in iter_qrels(miracl_dev / "qrels" / "qrels.miracl-v1.0-yo-dev.tsv"):
        qrels.setdefault(qid, {})[docid] = rel
    good, poor = good_and_shuffled_runs(qrels, seed=3)
    a = per_query_file(good, qrels, tmp_path / "a.parquet")
    b = per_query_file(poor, qrels, tmp_path / "b.parquet")
    (row,) = significance.significance_table({("good", "yo"): a, ("poor", "yo"): b}, [("good", "poor")])
    assert row["n_queries"] == len(qrels)
    assert row["p_value"] < 0.01 and row["ci_low"] > 0


def test_p_value_matches_exact_enumeration() -> None:
    rng = np.random.default_rng(5)
    a = rng.random(12)
    b = np.clip(a - 0.08 + 0.15 * rng.standard_normal(12), 0, 1)
    d = a - b
    signs = np.array(list(itertools.product([-1.0, 1.0], repeat=d.size)))
    exact = np.mean(np.abs(signs @ d) >= abs(d.sum()) - 1e-12)
    r = significance.compare(a, b, n_permutations=40_000, n_bootstrap=100)
    assert r.p_value == pytest.approx(exact, abs=0.01)


def test_null_p_values_are_calibrated() -> None:
    rng = np.random.default_rng(11)
    ps = []
    for i in range(300):
        a = rng.random(40)
        b = a + rng.normal(0, 0.1, 40)  # symmetric differences: H0 true
        ps.append(significance.compare(a, b, f"s{i}", n_permutations=500, n_bootstrap=50).p_value)
    ps = np.array(ps)
    assert 0.02 <= np.mean(ps < 0.05) <= 0.09
    assert 0.4 <= np.mean(ps < 0.5) <= 0.6


def test_bootstrap_ci_covers_true_difference() -> None:
    """Coverage of the 95% CI for the population mean difference, per language and stratified."""
    rng = np.random.default_rng(3)
    true_diffs = {"x": 0.05, "y": -0.02, "z": 0.10}
    sizes = {"x": 150, "y": 60, "z": 300}
    hits = {k: 0 for k in (*true_diffs, "mean")}
    hits_a = 0
    sims = 150
    for s in range(sims):
        results = []
        for part, delta in true_diffs.items():
            n = sizes[part]
            b = rng.beta(2, 3, n)  # mean 0.4
            a = b + delta + rng.normal(0, 0.2, n)
            r = significance.compare(a, b, part, n_permutations=20, n_bootstrap=1000, seed=s)
            hits[part] += r.ci_low <= delta <= r.ci_high
            if part == "x":
                hits_a += r.ci_a[0] <= 0.4 + delta <= r.ci_a[1]
            results.append(r)
        m = significance.combine_mean(results)
        hits["mean"] += m.ci_low <= np.mean(list(true_diffs.values())) <= m.ci_high
    for key, count in hits.items():
        assert 0.88 <= count / sims <= 0.99, (key, count / sims)
    assert 0.88 <= hits_a / sims <= 0.99


def test_deterministic_and_independent_of_other_partitions() -> None:
    rng = np.random.default_rng(0)
    data = {p: {f"q{i}": float(v) for i, v in enumerate(rng.random(50))} for p in ("x", "y")}
    other = {p: {q: v * 0.9 for q, v in d.items()} for p, d in data.items()}
    files = {("a", p): d for p, d in data.items()} | {("b", p): d for p, d in other.items()}
    one = significance.significance_rows(files, [("a", "b")], n_permutations=500, n_bootstrap=500)
    two = significance.significance_rows(files, [("a", "b")], n_permutations=500, n_bootstrap=500)
    assert one == two
    only_y = significance.significance_rows(files, [("a", "b")], partitions=["y"], n_permutations=500, n_bootstrap=500)
    family = ("p_holm", "p_bh")  # corrected over the table's comparisons: they depend on the others
    assert {k: v for k, v in only_y[0].items() if k not in family} == {
        k: v for k, v in one[1].items() if k not in family
    }
    reseeded = significance.significance_rows(files, [("a", "b")], n_permutations=500, n_bootstrap=500, seed=1)
    assert reseeded[0]["p_value"] != one[0]["p_value"] or reseeded[0]["ci_low"] != one[0]["ci_low"]


def test_mismatched_queries_are_an_error(tmp_path: Path) -> None:
    a = {"q1": 0.5, "q2": 0.4}
    b = {"q1": 0.5, "q3": 0.4}
    with pytest.raises(InputError, match="different queries"):
        significance.significance_rows({("a", "x"): a, ("b", "x"): b}, [("a", "b")])
    table = pa.table({"qid": ["q1"], "measure": ["R@100"], "value": [1.0]}, schema=schemas.PER_QUERY)
    schemas.write_table(table, tmp_path / "pq.parquet", schemas.PER_QUERY)
    with pytest.raises(InputError, match="no values of nDCG@10"):
        significance.per_query_values(tmp_path / "pq.parquet", "nDCG@10")


def test_top_differences() -> None:
    a = {"q1": 1.0, "q2": 0.2, "q3": 0.5, "q4": 0.9, "q5": 0.3, "q6": 0.6}
    b = {"q1": 0.1, "q2": 0.8, "q3": 0.5, "q4": 0.4, "q5": 0.3, "q6": 0.1}
    rows = significance.top_differences(a, b, n=2)
    assert [(r["qid"], r["direction"]) for r in rows] == [("q1", "win"), ("q4", "win"), ("q2", "loss")]
    assert rows[0]["diff"] == pytest.approx(0.9) and rows[2]["diff"] == pytest.approx(-0.6)
    assert rows[0]["value_a"] == 1.0 and rows[0]["value_b"] == 0.1


@pytest.mark.parametrize(
    "p_values",
    [
        [0.01, 0.04, 0.03, 0.005, 0.5, 0.04, 1.0],  # ties, a 1
        list(np.random.default_rng(3).uniform(0, 0.2, 40)),
        [0.2],
        [1 / 10_001] * 5 + [0.9, 0.049],
    ],
)
def test_corrections_equal_statsmodels_multipletests(p_values: list[float]) -> None:
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    for ours, method in ((significance.holm, "holm"), (significance.benjamini_hochberg, "fdr_bh")):
        _, theirs, _, _ = multitest.multipletests(p_values, alpha=0.05, method=method)
        np.testing.assert_allclose(ours(p_values), theirs, rtol=1e-12, atol=0, err_msg=method)
    assert significance.holm([]).shape == (0,)


def test_significance_table_corrects_over_its_comparisons(tmp_path: Path) -> None:
    """``p_holm`` and ``p_bh`` of a table: its raw p-values corrected as one family (every pair,
    partition and mean row), written beside them in the TSV."""
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    rng = np.random.default_rng(7)
    files = {}
    for part in ("p1", "p2", "p3"):
        qids = [f"{part}-{i}" for i in range(40)]
        base = rng.uniform(0, 1, len(qids))
        for method, shift in (("a", 0.0), ("b", 0.03), ("c", 0.2)):
            values = np.clip(base + shift + rng.normal(0, 0.1, len(qids)), 0, 1)
            files[(method, part)] = pa.table(
                {"qid": qids, "measure": ["nDCG@10"] * len(qids), "value": values}, schema=schemas.PER_QUERY
            )
    out = tmp_path / "sig.tsv"
    rows = significance.significance_table(
        files, [("c", "a"), ("b", "a")], output=out, n_permutations=2000, n_bootstrap=50
    )
    assert len(rows) == 8
    raw = [r["p_value"] for r in rows]
    for column, method in (("p_holm", "holm"), ("p_bh", "fdr_bh")):
        want = multitest.multipletests(raw, method=method)[1]
        np.testing.assert_allclose([r[column] for r in rows], want, rtol=1e-12)  # type: ignore[literal-required]
        written = [float(line[column]) for line in csv.DictReader(out.read_text().splitlines(), delimiter="\t")]
        np.testing.assert_allclose(written, want, rtol=1e-5)
    assert any(r["p_holm"] > r["p_value"] for r in rows) and all(r["p_holm"] >= r["p_bh"] for r in rows)
