"""Evaluation with trec_eval semantics (through ir_measures' pytrec_eval provider).

Measures are declared once (:data:`MEASURES`). A query's value is trec_eval's; the aggregate is
the mean over every query of the qrels, a query without hits counting 0 (``trec_eval -c``, as
pyserini's MIRACL evaluation). Runs are evaluated in chunks of queries, so a run of 156k queries
by 1000 hits is never held in memory whole.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import ir_measures
import pyarrow as pa

from miracl_eval import schemas
from miracl_eval.atomic import write_text_atomic
from miracl_eval.errors import InputError
from miracl_eval.schemas import EVAL_CHUNK

T = TypeVar("T")


#: the column of the unweighted mean over the partitions in results tables (and their readers)
#: what a preload server imports for the evaluation stage (:mod:`miracl_eval.jobs.preload`)
PRELOAD = ("pytrec_eval",)

MEAN = "mean"


@dataclass(frozen=True)
class Measure:
    key: str  #: short name used in file names (``results/{dataset}_{key}.tsv``)
    name: str  #: ir_measures name, e.g. ``nDCG@10``
    trec_eval: str  #: trec_eval's name, e.g. ``ndcg_cut_10``

    @property
    def measure(self) -> ir_measures.Measure:
        return ir_measures.parse_measure(self.name)


NDCG10 = Measure("ndcg", "nDCG@10", "ndcg_cut_10")


RECALL100 = Measure("recall100", "R@100", "recall_100")


MEASURES: tuple[Measure, ...] = (NDCG10, RECALL100)


PRIMARY = NDCG10


def load_qrels(path: str | os.PathLike[str]) -> dict[str, dict[str, int]]:
    table = schemas.read_table(path, schemas.QRELS)
    qrels: dict[str, dict[str, int]] = {}
    for qid, docid, rel in zip(*(table.column(c).to_pylist() for c in ("qid", "docid", "relevance")), strict=True):
        qrels.setdefault(qid, {})[docid] = rel
    return qrels


def iter_run_queries(path: str | os.PathLike[str]) -> Iterator[tuple[str, dict[str, float]]]:
    """Yield ``(qid, {docid: score})`` from a run Parquet, whose rows are grouped by query."""
    current: str | None = None
    hits: dict[str, float] = {}
    done: set[str] = set()
    for batch in schemas.iter_batches(path, schemas.RUN, columns=["qid", "docid", "score"]):
        for qid, docid, score in zip(
            batch.column("qid").to_pylist(),
            batch.column("docid").to_pylist(),
            batch.column("score").to_pylist(),
            strict=True,
        ):
            if qid != current:
                if current is not None:
                    yield current, hits
                    done.add(current)
                if qid in done:
                    raise InputError(path, f"the rows of query {qid} are not contiguous")
                current, hits = qid, {}
            if docid in hits:
                raise InputError(path, f"query {qid} lists document {docid} twice")
            if score is None or math.isnan(score):
                raise InputError(path, f"query {qid}, document {docid}: the score is not a number")
            hits[docid] = score
    if current is not None:
        yield current, hits


def _evaluate_chunk(
    run: dict[str, dict[str, float]], qrels: Mapping[str, dict[str, int]], measures: Sequence[Measure]
) -> Iterator[tuple[str, str, float]]:
    by_name = {str(m.measure): m.name for m in measures}
    sub_qrels = {q: qrels[q] for q in run}
    provider = ir_measures.pytrec_eval
    for metric in provider.iter_calc([m.measure for m in measures], sub_qrels, run):
        if metric.query_id in run:
            yield metric.query_id, by_name[str(metric.measure)], float(metric.value)


def iter_query_values(
    queries: Iterable[tuple[str, dict[str, float]]],
    qrels: Mapping[str, dict[str, int]],
    measures: Sequence[Measure] = MEASURES,
    chunk: int = EVAL_CHUNK,
) -> Iterator[tuple[str, str, float]]:
    """``(qid, measure name, value)`` of a run given as ``(qid, {docid: score})`` per query.

    Queries without judgements are ignored (as trec_eval does); they are evaluated ``chunk`` at
    a time, then every query of ``qrels`` absent from the run gets 0 for every measure
    (``trec_eval -c``).
    """
    seen: set[str] = set()
    pending: dict[str, dict[str, float]] = {}
    for qid, hits in queries:
        if qid not in qrels:
            continue
        seen.add(qid)
        pending[qid] = hits
        if len(pending) >= chunk:
            yield from _evaluate_chunk(pending, qrels, measures)
            pending.clear()
    yield from _evaluate_chunk(pending, qrels, measures)
    for qid in qrels:
        if qid not in seen:
            for m in measures:
                yield qid, m.name, 0.0


def evaluate_run(
    run: str | os.PathLike[str],
    qrels: Mapping[str, dict[str, int]],
    measures: Sequence[Measure] = MEASURES,
    chunk: int = EVAL_CHUNK,
) -> pa.Table:
    """Per-query values (qid, measure, value) of every query of ``qrels`` (see :func:`iter_query_values`)."""
    rows: dict[str, list] = {"qid": [], "measure": [], "value": []}
    for qid, name, value in iter_query_values(iter_run_queries(run), qrels, measures, chunk):
        rows["qid"].append(qid)
        rows["measure"].append(name)
        rows["value"].append(value)
    return pa.table(rows, schema=schemas.PER_QUERY)


def mean_by_measure(per_query: pa.Table) -> dict[str, float]:
    """Mean of each measure over the queries of a per-query table."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for name, value in zip(per_query.column("measure").to_pylist(), per_query.column("value").to_pylist(), strict=True):
        sums[name] = sums.get(name, 0.0) + value
        counts[name] = counts.get(name, 0) + 1
    return {name: sums[name] / counts[name] for name in sums}


def format_table(
    values: Mapping[str, Mapping[str, float]],
    methods: Sequence[str],
    partitions: Sequence[str],
    mean_column: bool = True,
    digits: int = 4,
) -> str:
    """A results table as TSV: ``method``, one column per partition, then ``mean`` (over partitions)."""
    header = ["method", *partitions] + ([MEAN] if mean_column else [])
    lines = ["\t".join(header)]
    for method in methods:
        row = [values[method][p] for p in partitions]
        cells = [f"{v:.{digits}f}" for v in row]
        if mean_column:
            cells.append(f"{sum(row) / len(row):.{digits}f}")
        lines.append("\t".join([method, *cells]))
    return "\n".join(lines) + "\n"


def write_tables(
    per_query: Mapping[tuple[str, str], str | os.PathLike[str]],
    methods: Sequence[str],
    partitions: Sequence[str],
    outputs: Mapping[str, str | os.PathLike[str]],
    mean_column: bool = True,
) -> dict[str, dict[str, dict[str, float]]]:
    """Aggregate per-query Parquet files into one TSV table per measure.

    ``per_query`` maps ``(method, partition)`` to a per-query file; ``outputs`` maps a
    measure key (``ndcg``, ``recall100``) to its TSV path. Returns the aggregated values.
    """
    by_key = {m.key: m for m in MEASURES}
    values: dict[str, dict[str, dict[str, float]]] = {k: {} for k in outputs}
    for (method, part), path in per_query.items():
        means = mean_by_measure(schemas.read_table(path, schemas.PER_QUERY))
        for key in outputs:
            name = by_key[key].name
            if name not in means:
                raise InputError(path, f"has no values of {name}")
            values[key].setdefault(method, {})[part] = means[name]
    for key, path in outputs.items():
        write_text_atomic(path, format_table(values[key], methods, partitions, mean_column))
    return values


def evaluate_stage(
    runs: Sequence[str | os.PathLike[str]],
    qrels: Sequence[str | os.PathLike[str]],
    outputs: Sequence[str | os.PathLike[str]],
) -> dict[str, dict[str, float]]:
    """Stage entry point: the per-query values of one row's runs (one per partition, each with the
    partition's qrels), each written as Parquet; returns the means, by output file.

    One job evaluates a row on every partition: an evaluation is a second of work, and a job each
    (row x partition) would spend more on starting than on evaluating."""
    if not len(runs) == len(qrels) == len(outputs):
        raise ValueError(f"{len(runs)} runs, {len(qrels)} qrels files and {len(outputs)} outputs")
    means = {}
    for run, judged, output in zip(runs, qrels, outputs, strict=True):
        table = evaluate_run(run, load_qrels(judged))
        schemas.write_table(table, output, schemas.PER_QUERY)
        means[str(output)] = mean_by_measure(table)
    return means


def keyed_inputs[T](
    files: Sequence[T], methods: Sequence[str], partitions: Sequence[str], what: str = "per-query files"
) -> dict[tuple[str, str], T]:
    """``{(method, partition): file}`` from files ordered partition-major, method-minor (as
    ``expand(..., part=..., method=...)`` lists them)."""
    keys = [(m, p) for p in partitions for m in methods]
    if len(keys) != len(files):
        raise ValueError(f"{len(files)} {what} for {len(keys)} (method, partition) pairs")
    return dict(zip(keys, files, strict=True))
