"""Paired significance tests between two methods evaluated on the same queries.

Per partition (language), with ``d_q = a_q − b_q`` the per-query differences of the two
methods:

* **Randomisation test** (paired permutation, sign-flip): under H0 the labels of each query's
  pair are exchangeable, so each ``d_q`` is multiplied by an independent random sign. The
  two-sided p-value is ``(#{|mean(s·d)| ≥ |mean(d)|} + 1) / (R + 1)`` over ``R`` random sign
  vectors (the ``+1`` counts the observed assignment, so p is never 0 and the test is exact
  in the Monte-Carlo sense).
* **Paired bootstrap** percentile confidence intervals: queries are resampled with
  replacement, the same resample for both methods, giving CIs for ``mean(a)``, ``mean(b)``
  and ``mean(a) − mean(b)``.

For the **mean over languages** (the statistic the result tables report: the unweighted mean of
the per-language means, so ``diff = mean_l(mean_a,l − mean_b,l)``) both procedures are
stratified: signs are flipped and queries are resampled *within* each language, each
language's mean is recomputed, and the language means are averaged. Replicate ``r`` of the
mean row combines replicate ``r`` of every language, which is valid because the languages'
randomisations are independent. Every language keeps its weight ``1/L`` whatever its number
of queries, exactly as in the reported mean.

Random streams are derived from ``seed`` and the (method pair, partition) names, so a
partition's result does not depend on which other partitions or pairs are in the table.
No correction for multiple comparisons is applied; with 18 languages, consider Holm's method.

Everything is vectorised with numpy and processed in blocks of replicates, so 10,000
permutations and 10,000 bootstrap samples over a few thousand queries take well under a second.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np
import pyarrow as pa

from miracl_eval import schemas
from miracl_eval.atomic import write_text_atomic
from miracl_eval.errors import InputError
from miracl_eval.evaluation import metrics

N_PERMUTATIONS = 10_000
N_BOOTSTRAP = 10_000
SEED = 20240601
BLOCK_ELEMENTS = 4_000_000  #: replicates × queries processed at once (memory bound)
MEAN = metrics.MEAN

COLUMNS: tuple[str, ...] = (
    "measure", "partition", "method_a", "method_b", "mean_a", "mean_b", "diff",
    "ci_low", "ci_high", "p_value", "p_holm", "p_bh", "n_queries",
)  # fmt: skip
#: the p-value columns (raw, then corrected over the table's family of comparisons)
P_COLUMNS = ("p_value", "p_holm", "p_bh")


# --------------------------------------------------------------------------- inputs


class SignificanceRow(TypedDict):
    """One row of the significance table (:data:`COLUMNS`)."""

    measure: str
    partition: str
    method_a: str
    method_b: str
    mean_a: float
    mean_b: float
    diff: float
    ci_low: float
    ci_high: float
    p_value: float
    p_holm: float  #: Holm-Bonferroni over the table's comparisons (:func:`holm`)
    p_bh: float  #: Benjamini-Hochberg over the table's comparisons (:func:`benjamini_hochberg`)
    n_queries: int


class DifferenceRow(TypedDict):
    """One query of :func:`top_differences`."""

    qid: str
    value_a: float
    value_b: float
    diff: float
    direction: str


type PerQuery = str | os.PathLike[str] | pa.Table | Mapping[str, float]


def per_query_values(source: PerQuery, measure: str) -> dict[str, float]:
    """``{qid: value}`` of one measure from a per-query Parquet file, table or mapping."""
    if isinstance(source, Mapping):
        return {str(k): float(v) for k, v in source.items()}
    where = "per-query table" if isinstance(source, pa.Table) else source
    table = source if isinstance(source, pa.Table) else schemas.read_table(source, schemas.PER_QUERY)
    values: dict[str, float] = {}
    for qid, name, value in zip(
        table.column("qid").to_pylist(),
        table.column("measure").to_pylist(),
        table.column("value").to_pylist(),
        strict=True,
    ):
        if name != measure:
            continue
        if qid in values:
            raise InputError(where, f"query {qid} has two values of {measure}")
        values[qid] = float(value)
    if not values:
        raise InputError(where, f"has no values of {measure}")
    return values


def _label(source: PerQuery) -> str:
    return str(source) if isinstance(source, str | os.PathLike) else f"<{type(source).__name__}>"


def paired_arrays(
    a: Mapping[str, float], b: Mapping[str, float], where: str = "per-query values"
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Align two ``{qid: value}`` mappings; both must cover the same queries."""
    if a.keys() != b.keys():
        only_a = sorted(a.keys() - b.keys())
        only_b = sorted(b.keys() - a.keys())
        raise InputError(
            where,
            f"the two methods were evaluated on different queries ({len(only_a)} only in A, e.g. "
            f"{only_a[:3]}; {len(only_b)} only in B, e.g. {only_b[:3]})",
        )
    qids = sorted(a)
    return (
        qids,
        np.fromiter((a[q] for q in qids), float, len(qids)),
        np.fromiter((b[q] for q in qids), float, len(qids)),
    )


# --------------------------------------------------------------------------- replicates


def _rng(seed: int, *names: str) -> np.random.Generator:
    key = [zlib.crc32(n.encode("utf-8")) for n in names]
    return np.random.default_rng(np.random.SeedSequence(entropy=seed, spawn_key=key))


def _blocks(total: int, n: int) -> list[int]:
    size = max(1, BLOCK_ELEMENTS // max(n, 1))
    return [min(size, total - start) for start in range(0, total, size)]


def sign_flip_means(d: np.ndarray, n_permutations: int, rng: np.random.Generator) -> np.ndarray:
    """Means of ``d`` under ``n_permutations`` independent random sign vectors."""
    n = d.size
    out = np.empty(n_permutations)
    if n == 0:
        out[:] = 0.0
        return out
    total = d.sum()
    nbytes = (n + 7) // 8
    pos = 0
    for size in _blocks(n_permutations, n):
        # independent fair bits: 1 = sign +1, 0 = sign −1
        raw = rng.integers(0, 256, size=(size, nbytes), dtype=np.uint8)
        keep = np.unpackbits(raw, axis=1, count=n)
        # sum(s·d) = 2·sum(d[s=+1]) − sum(d)
        out[pos : pos + size] = (2.0 * (keep @ d) - total) / n
        pos += size
    return out


def bootstrap_means(
    a: np.ndarray, b: np.ndarray, n_bootstrap: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Means of ``a`` and ``b`` over ``n_bootstrap`` paired resamples of the queries."""
    n = a.size
    mean_a = np.empty(n_bootstrap)
    mean_b = np.empty(n_bootstrap)
    pos = 0
    dtype = np.int32 if n < 2**31 else np.int64
    for size in _blocks(n_bootstrap, n):
        idx = rng.integers(0, n, size=(size, n), dtype=dtype)
        mean_a[pos : pos + size] = np.take(a, idx).sum(axis=1) / n
        mean_b[pos : pos + size] = np.take(b, idx).sum(axis=1) / n
        pos += size
    return mean_a, mean_b


def p_value(observed: float, null: np.ndarray) -> float:
    """Two-sided Monte-Carlo p-value with the +1 correction: (count + 1) / (R + 1)."""
    tol = 1e-12 * max(1.0, abs(observed))
    count = int(np.count_nonzero(np.abs(null) >= abs(observed) - tol))
    return (count + 1) / (null.size + 1)


@dataclass(frozen=True)
class PairResult:
    partition: str
    mean_a: float
    mean_b: float
    diff: float
    ci_low: float  #: CI of the mean difference
    ci_high: float
    ci_a: tuple[float, float]
    ci_b: tuple[float, float]
    p_value: float
    n_queries: int
    # replicates, kept so that language results can be combined into the mean row
    null_means: np.ndarray
    boot_a: np.ndarray
    boot_b: np.ndarray


def _interval(values: np.ndarray, confidence: float) -> tuple[float, float]:
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(values, [alpha, 1.0 - alpha])
    return float(low), float(high)


def _result(
    partition: str,
    mean_a: float,
    mean_b: float,
    null_means: np.ndarray,
    boot_a: np.ndarray,
    boot_b: np.ndarray,
    n_queries: int,
    confidence: float,
) -> PairResult:
    diff = mean_a - mean_b
    ci_low, ci_high = _interval(boot_a - boot_b, confidence)
    return PairResult(
        partition=partition,
        mean_a=mean_a,
        mean_b=mean_b,
        diff=diff,
        ci_low=ci_low,
        ci_high=ci_high,
        ci_a=_interval(boot_a, confidence),
        ci_b=_interval(boot_b, confidence),
        p_value=p_value(diff, null_means),
        n_queries=n_queries,
        null_means=null_means,
        boot_a=boot_a,
        boot_b=boot_b,
    )


def compare(
    a: np.ndarray,
    b: np.ndarray,
    partition: str = "",
    n_permutations: int = N_PERMUTATIONS,
    n_bootstrap: int = N_BOOTSTRAP,
    seed: int = SEED,
    confidence: float = 0.95,
    stream: Sequence[str] = (),
) -> PairResult:
    """Randomisation test and paired bootstrap CIs for one partition's aligned arrays."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError("a and b must be 1-d arrays of the same length")
    if a.size == 0:
        raise ValueError(f"partition {partition!r}: no queries")
    if n_permutations < 1 or n_bootstrap < 1:
        raise ValueError("n_permutations and n_bootstrap must be positive")
    d = a - b
    null = sign_flip_means(d, n_permutations, _rng(seed, "perm", *stream, partition))
    boot_a, boot_b = bootstrap_means(a, b, n_bootstrap, _rng(seed, "boot", *stream, partition))
    return _result(partition, float(a.mean()), float(b.mean()), null, boot_a, boot_b, a.size, confidence)


def combine_mean(results: Sequence[PairResult], confidence: float = 0.95) -> PairResult:
    """The mean-over-partitions row: stratified test and CI from the partitions' replicates."""
    if not results:
        raise ValueError("no partitions to average")
    null = np.mean([r.null_means for r in results], axis=0)
    boot_a = np.mean([r.boot_a for r in results], axis=0)
    boot_b = np.mean([r.boot_b for r in results], axis=0)
    mean_a = float(np.mean([r.mean_a for r in results]))
    mean_b = float(np.mean([r.mean_b for r in results]))
    return _result(MEAN, mean_a, mean_b, null, boot_a, boot_b, sum(r.n_queries for r in results), confidence)


# --------------------------------------------------------------------------- multiple comparisons


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (step-down): the ``i``-th smallest of ``m`` is multiplied
    by ``m - i + 1``, kept from decreasing, capped at 1. Rejecting where the adjusted value is below
    alpha controls the family-wise error rate at alpha."""
    p = np.asarray(p_values, dtype=np.float64)
    m = len(p)
    if not m:
        return p.copy()
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.minimum(stepped, 1.0)
    return out


def benjamini_hochberg(p_values: Sequence[float]) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (step-up): the ``i``-th smallest of ``m`` is multiplied by
    ``m / i``, kept from increasing from the largest down, capped at 1. Controls the false discovery
    rate (for independent or positively dependent tests)."""
    p = np.asarray(p_values, dtype=np.float64)
    m = len(p)
    if not m:
        return p.copy()
    order = np.argsort(p, kind="stable")
    scaled = p[order] * m / np.arange(1, m + 1)
    stepped = np.minimum.accumulate(scaled[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(stepped, 1.0)
    return out


def correct(rows: list[SignificanceRow]) -> list[SignificanceRow]:
    """Set ``p_holm`` and ``p_bh`` of ``rows`` over them as one family of comparisons (in place)."""
    raw = [r["p_value"] for r in rows]
    for row, h, b in zip(rows, holm(raw), benjamini_hochberg(raw), strict=True):
        row["p_holm"], row["p_bh"] = float(h), float(b)
    return rows


# --------------------------------------------------------------------------- tables


def significance_rows(
    per_query: Mapping[tuple[str, str], PerQuery],
    pairs: Sequence[tuple[str, str]],
    measure: str = "nDCG@10",
    partitions: Sequence[str] | None = None,
    n_permutations: int = N_PERMUTATIONS,
    n_bootstrap: int = N_BOOTSTRAP,
    seed: int = SEED,
    confidence: float = 0.95,
    mean_row: bool = True,
) -> list[SignificanceRow]:
    """Rows of the significance table (see :data:`COLUMNS`), pair-major, partitions then mean.

    The rows are one family of comparisons: ``p_holm`` and ``p_bh`` correct ``p_value`` over all of
    them (every pair, every partition, the mean rows).
    """
    if partitions is None:
        partitions = list(dict.fromkeys(p for _, p in per_query))
    cache: dict[tuple[str, str], dict[str, float]] = {}

    def values(method: str, part: str) -> dict[str, float]:
        key = (method, part)
        if key not in per_query:
            raise KeyError(f"no per-query file for method {method!r}, partition {part!r}")
        if key not in cache:
            cache[key] = per_query_values(per_query[key], measure)
        return cache[key]

    rows: list[SignificanceRow] = []
    for method_a, method_b in pairs:
        results = []
        for part in partitions:
            va, vb = values(method_a, part), values(method_b, part)
            where = f"{_label(per_query[(method_a, part)])} vs {_label(per_query[(method_b, part)])}"
            _, a, b = paired_arrays(va, vb, where)
            results.append(
                compare(a, b, part, n_permutations, n_bootstrap, seed, confidence, stream=(measure, method_a, method_b))
            )
        if mean_row and len(results) > 1:
            results.append(combine_mean(results, confidence))
        for r in results:
            rows.append(
                {
                    "measure": measure,
                    "partition": r.partition,
                    "method_a": method_a,
                    "method_b": method_b,
                    "mean_a": r.mean_a,
                    "mean_b": r.mean_b,
                    "diff": r.diff,
                    "ci_low": r.ci_low,
                    "ci_high": r.ci_high,
                    "p_value": r.p_value,
                    "p_holm": r.p_value,
                    "p_bh": r.p_value,
                    "n_queries": r.n_queries,
                }
            )
    return correct(rows)


def format_rows(rows: Sequence[Mapping[str, object]], digits: int = 6) -> str:
    lines = ["\t".join(COLUMNS)]
    for row in rows:
        cells = []
        for col in COLUMNS:
            v = row[col]
            if col in P_COLUMNS:
                cells.append(f"{v:.6g}")
            elif isinstance(v, float):
                cells.append(f"{v:.{digits}f}")
            else:
                cells.append(str(v))
        lines.append("\t".join(cells))
    return "\n".join(lines) + "\n"


def significance_table(
    per_query_files: Mapping[tuple[str, str], PerQuery],
    pairs: Sequence[tuple[str, str]],
    measure: str = "nDCG@10",
    output: str | os.PathLike[str] | None = None,
    partitions: Sequence[str] | None = None,
    n_permutations: int = N_PERMUTATIONS,
    n_bootstrap: int = N_BOOTSTRAP,
    seed: int = SEED,
    confidence: float = 0.95,
    mean_row: bool = True,
) -> list[SignificanceRow]:
    """Significance of each ``(method_a, method_b)`` pair per partition and over partitions.

    ``per_query_files`` maps ``(method, partition)`` to a per-query Parquet file (schema
    ``PER_QUERY``, as written by the evaluate stage). ``diff`` is ``mean_a − mean_b``;
    ``ci_low``/``ci_high`` bound it (paired bootstrap, percentile); ``p_value`` is the two-sided
    randomisation-test p-value. With ``output`` the table is also written as TSV, atomically.
    ``mean_row=False`` leaves out the mean over partitions (e.g. MessIRve, whose partitions
    overlap).
    """
    rows = significance_rows(
        per_query_files, pairs, measure, partitions, n_permutations, n_bootstrap, seed, confidence, mean_row
    )
    if output is not None:
        write_text_atomic(output, format_rows(rows))
    return rows


def top_differences(
    per_query_a: PerQuery, per_query_b: PerQuery, n: int = 10, measure: str = "nDCG@10"
) -> list[DifferenceRow]:
    """The queries where A and B differ most: up to ``n`` wins of A, then up to ``n`` losses.

    Each row: ``qid``, ``value_a``, ``value_b``, ``diff`` (= a − b), ``direction`` (``win`` or
    ``loss``, from A's side). Wins are ordered by decreasing diff, losses by increasing diff,
    ties by qid; queries with equal values are neither.
    """
    qids, a, b = paired_arrays(per_query_values(per_query_a, measure), per_query_values(per_query_b, measure))
    d = a - b
    order = sorted(range(len(qids)), key=lambda i: (-d[i], qids[i]))
    wins = [i for i in order if d[i] > 0][:n]
    losses = [i for i in sorted(range(len(qids)), key=lambda i: (d[i], qids[i])) if d[i] < 0][:n]
    return [
        {"qid": qids[i], "value_a": float(a[i]), "value_b": float(b[i]), "diff": float(d[i]), "direction": kind}
        for kind, idxs in (("win", wins), ("loss", losses))
        for i in idxs
    ]
