"""Sensitivity of the fused methods to the sparse weight, from stored component scores.

Input: *components* Parquet files (``miracl_eval.fusion.weighted.COMPONENTS``: one row per (query,
candidate passage) with BGE-M3's exact ``dense``, ``sparse`` and ``multivec`` scores; a component
that was not computed is null). Nothing is re-encoded: for each sparse weight ``w`` of a grid
the fused score of every candidate is recomputed with the workflow's arithmetic
(``miracl_eval.fusion.weighted.fused_scores``: ``0 + w_dense·dense + w_sparse·sparse [+ w_multivec·multivec]``
in that order, float64)

* ``dense+sparse``: ``1·dense + w·sparse``,
* ``all``: ``1·dense + w·sparse + 1·multivec``,

and the fused ranking is evaluated with the project's trec_eval semantics
(:mod:`miracl_eval.evaluation.metrics`: pytrec_eval through ir_measures; queries of the qrels without any
candidate count 0).

The candidates are those of the components file given for the method: the workflow scores
``dense+sparse`` on the union of the dense and sparse runs and ``all`` on the dense top
``rerank_depth``, so pass one file per method (``{"dense+sparse": ..., "all": ...}``) to
reproduce both exactly. A single file serves every method whose components it holds (a method
whose component column is entirely null is skipped). As in the workflow's fusion, a *partly*
missing component score is an error, never 0.

Only the top of each ranking can change nDCG@10, so each query passes its ``depth`` best
candidates *plus every candidate tied with the last of them* to the evaluator; the result is
identical to evaluating the full fused run.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TypedDict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from miracl_eval import schemas
from miracl_eval.atomic import write_text_atomic
from miracl_eval.errors import InputError
from miracl_eval.evaluation import metrics
from miracl_eval.fusion.weighted import FUSED_COMPONENTS, MissingComponentError, fused_scores

DEFAULT_WEIGHTS: tuple[float, ...] = tuple(i / 10 for i in range(11))  # 0, 0.1, …, 1.0
METHODS: tuple[str, ...] = ("dense+sparse", "all")
COLUMNS: tuple[str, ...] = ("partition", "method", "sparse_weight", "ndcg10")


class Components:
    """Component scores of one partition, grouped by query, as numpy arrays."""

    def __init__(self, table: pa.Table, where: str = "components") -> None:
        missing = [c for c in ("qid", "docid", "dense", "sparse") if c not in table.column_names]
        if missing:
            raise InputError(where, f"missing column(s) {', '.join(missing)}")
        self.where = where
        qid = table.column("qid").cast(pa.string())
        order = pc.sort_indices(
            pa.table({"qid": qid, "i": pa.array(np.arange(table.num_rows))}), [("qid", "ascending"), ("i", "ascending")]
        )
        self.table = table = table.take(order)
        self.qids_per_row = np.asarray(table.column("qid").cast(pa.string()).to_pylist(), dtype=object)
        self.docids = np.asarray(table.column("docid").cast(pa.string()).to_pylist(), dtype=object)
        if table.num_rows:
            change = np.flatnonzero(self.qids_per_row[1:] != self.qids_per_row[:-1]) + 1
            self.starts = np.concatenate([[0], change])
            self.ends = np.concatenate([change, [table.num_rows]])
        else:
            self.starts = self.ends = np.zeros(0, dtype=int)
        self.qids = [str(self.qids_per_row[s]) for s in self.starts]
        for s, e, q in zip(self.starts, self.ends, self.qids, strict=True):
            docs = self.docids[s:e]
            if len(set(docs)) != len(docs):
                raise InputError(where, f"query {q} lists a document twice")

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Components:
        table = schemas.read_table(path)
        return cls(table, str(path))

    def has(self, name: str) -> bool:
        """Whether component ``name`` was computed (some score is not null)."""
        if name not in self.table.column_names:
            return False
        values = self.table.column(name).cast(pa.float64()).to_numpy(zero_copy_only=False)
        return bool(np.any(~np.isnan(values)))

    def fused(self, weights: Mapping[str, float]) -> np.ndarray:
        """``sum(w_i · s_i)`` per row, in the order of ``weights``: :func:`miracl_eval.fusion.weighted.fused_scores`."""
        try:
            return fused_scores(self.table, weights)
        except MissingComponentError as err:
            raise InputError(self.where, str(err)) from err

    def run(self, scores: np.ndarray, depth: int | None) -> Iterator[tuple[str, dict[str, float]]]:
        """``(qid, {docid: score})`` per query: the top ``depth`` candidates and their ties."""
        for s, e, qid in zip(self.starts, self.ends, self.qids, strict=True):
            sc = scores[s:e]
            docs = self.docids[s:e]
            if depth is not None and sc.size > depth:
                kth = -np.partition(-sc, depth - 1)[depth - 1]
                keep = sc >= kth
                sc, docs = sc[keep], docs[keep]
            yield qid, dict(zip(docs.tolist(), sc.tolist(), strict=True))


def method_weights(method: str, sparse_weight: float) -> dict[str, float]:
    """The fusion weights of ``method`` (a fused method, or a row ``{model}/{method}``) with the
    sparse weight varied (dense and multivec 1)."""
    fused = method.rpartition("/")[2]
    if fused not in METHODS:
        raise ValueError(f"unknown fused method {method!r}; valid: {', '.join(METHODS)}")
    return {c: float(sparse_weight) if c == "sparse" else 1.0 for c in FUSED_COMPONENTS[fused]}


def evaluate_hits(
    run: Iterator[tuple[str, dict[str, float]]] | Mapping[str, dict[str, float]],
    qrels: Mapping[str, dict[str, int]],
    measures: Sequence[metrics.Measure] = (metrics.NDCG10,),
    chunk: int = metrics.EVAL_CHUNK,
) -> dict[str, dict[str, float]]:
    """Per-query values ``{measure name: {qid: value}}`` of an in-memory run.

    The same code path and semantics as :func:`miracl_eval.evaluation.metrics.evaluate_run`: queries
    without judgements are ignored, queries of the qrels without hits get 0.
    """
    items = run.items() if isinstance(run, Mapping) else run
    values: dict[str, dict[str, float]] = {m.name: {} for m in measures}
    for qid, name, value in metrics.iter_query_values(items, qrels, measures, chunk):
        values[name][qid] = value
    for name in values:  # a query given with no hits at all
        for qid in qrels:
            values[name].setdefault(qid, 0.0)
    return values


def _mean(values: Mapping[str, float]) -> float:
    return math.fsum(values.values()) / len(values) if values else 0.0


def _qrels(qrels: Mapping[str, dict[str, int]] | str | os.PathLike[str]) -> Mapping[str, dict[str, int]]:
    return qrels if isinstance(qrels, Mapping) else metrics.load_qrels(qrels)


class SensitivityRow(TypedDict):
    """One row of the sensitivity table (:data:`COLUMNS`)."""

    partition: str
    method: str
    sparse_weight: float
    ndcg10: float


type ComponentsSource = Components | pa.Table | str | os.PathLike[str]


def _components(source: ComponentsSource) -> Components:
    if isinstance(source, Components):
        return source
    if isinstance(source, pa.Table):
        return Components(source)
    return Components.read(source)


def sensitivity(
    components: ComponentsSource | Mapping[str, ComponentsSource],
    qrels: Mapping[str, dict[str, int]] | str | os.PathLike[str],
    partition: str = "",
    weights: Sequence[float] = DEFAULT_WEIGHTS,
    methods: Sequence[str] = METHODS,
    depth: int | None = 10,
) -> list[SensitivityRow]:
    """nDCG@10 of the fused methods for each sparse weight (rows of :data:`COLUMNS`).

    ``components`` is one components file (or table) for every method, or a mapping
    method → file. ``depth`` is how many candidates per query are evaluated (ties at the cut
    are kept); 10 is exact for nDCG@10, ``None`` evaluates every candidate. A method whose
    components were not computed in the given file is skipped.
    """
    judged = _qrels(qrels)
    per_method = isinstance(components, Mapping)
    loaded: dict[int, Components] = {}
    rows: list[SensitivityRow] = []
    for method in methods:
        if per_method:
            if method not in components:  # type: ignore[operator]
                continue
            source = components[method]  # type: ignore[index]
        else:
            source = components
        if id(source) not in loaded:
            loaded[id(source)] = _components(source)
        comp = loaded[id(source)]
        needed = method_weights(method, 0.0)
        if not all(comp.has(name) for name in needed):
            if per_method:
                raise InputError(comp.where, f"{method} needs the {', '.join(needed)} scores of every candidate")
            continue
        for w in weights:
            scores = comp.fused(method_weights(method, w))
            per_query = evaluate_hits(comp.run(scores, depth), judged, (metrics.NDCG10,))
            rows.append(
                {
                    "partition": partition,
                    "method": method,
                    "sparse_weight": float(w),
                    "ndcg10": _mean(per_query[metrics.NDCG10.name]),
                }
            )
    return rows


def sensitivity_table(
    components: Mapping[str, ComponentsSource | Mapping[str, ComponentsSource]],
    qrels: Mapping[str, str | os.PathLike[str] | Mapping[str, dict[str, int]]],
    weights: Sequence[float] = DEFAULT_WEIGHTS,
    methods: Sequence[str] = METHODS,
    output: str | os.PathLike[str] | None = None,
) -> list[SensitivityRow]:
    """:func:`sensitivity` for every partition of ``components`` (partition → file, or
    partition → {method → file}); with ``output`` the tidy table is also written as TSV,
    atomically."""
    rows: list[SensitivityRow] = []
    for part, comp in components.items():
        if part not in qrels:
            raise KeyError(f"no qrels for partition {part!r}")
        rows.extend(sensitivity(comp, qrels[part], part, weights, methods))
    if output is not None:
        write_sensitivity(rows, output)
    return rows


def format_sensitivity(rows: Sequence[SensitivityRow], digits: int = 6) -> str:
    lines = ["\t".join(COLUMNS)]
    for r in rows:
        lines.append(f"{r['partition']}\t{r['method']}\t{r['sparse_weight']:g}\t{r['ndcg10']:.{digits}f}")
    return "\n".join(lines) + "\n"


def write_sensitivity(rows: Sequence[SensitivityRow], path: str | os.PathLike[str]) -> None:
    write_text_atomic(path, format_sensitivity(rows))
