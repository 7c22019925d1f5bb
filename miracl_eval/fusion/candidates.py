"""The candidate lists of fusion: which ``(qid, docid)`` pairs get component scores.

Two lists per query, as FlagEmbedding's MIRACL scripts use them:

* ``union``: the union of the dense and sparse top-``hits`` lists (for ``dense+sparse``);
* ``rerank``: the dense top-``rerank_depth`` (for ``multivec`` and ``all``).

Which method reads which list is :func:`miracl_eval.fusion.weighted.candidate_list`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from miracl_eval.fusion.weighted import CANDIDATE_LIST, candidates_per_query
from miracl_eval.runs import read_run
from miracl_eval.types import PathLike

PAIRS = pa.schema([("qid", pa.string()), ("docid", pa.string())])


def _run(run: pa.Table | PathLike) -> pa.Table:
    return run if isinstance(run, pa.Table) else read_run(run)


def _first_order(table: pa.Table) -> pa.Table:
    """Unique ``(qid, docid)`` of ``table`` (with column ``pos``) in first-appearance order,
    queries in order of their first appearance."""
    pairs = table.group_by(["qid", "docid"], use_threads=False).aggregate([("pos", "min")])
    firsts = table.group_by("qid", use_threads=False).aggregate([("pos", "min")]).rename_columns(["qid", "qfirst"])
    pairs = pairs.join(firsts, "qid", use_threads=False)
    order = pc.sort_indices(pairs, sort_keys=[("qfirst", "ascending"), ("pos_min", "ascending")])
    return pairs.take(order).select(["qid", "docid"]).cast(PAIRS)


def candidate_union(run_a: pa.Table | PathLike, run_b: pa.Table | PathLike) -> pa.Table:
    """Per query, the union of the passages of two runs (a ``PAIRS`` table).

    Queries come in order of first appearance (``run_a`` first); within a query, ``run_a``'s
    passages in its order, then ``run_b``'s passages that ``run_a`` lacks. A query in only
    one run keeps that run's passages.
    """
    a, b = _run(run_a), _run(run_b)
    both = pa.concat_tables([a.select(["qid", "docid"]).cast(PAIRS), b.select(["qid", "docid"]).cast(PAIRS)])
    both = both.append_column("pos", pa.array(np.arange(len(both), dtype=np.int64)))
    return _first_order(both)


def dense_candidates(run: pa.Table | PathLike, depth: int) -> pa.Table:
    """Per query, the passages at ranks 1..``depth`` of a run (a ``PAIRS`` table)."""
    table = _run(run)
    table = table.filter(pc.less_equal(table.column("rank"), depth))
    table = table.append_column("pos", pa.array(np.arange(len(table), dtype=np.int64)))
    order = pc.sort_indices(
        table.append_column("qfirst", _first_positions(table.column("qid"))),
        sort_keys=[("qfirst", "ascending"), ("rank", "ascending"), ("pos", "ascending")],
    )
    return table.take(order).select(["qid", "docid"]).cast(PAIRS)


def _first_positions(qids: pa.ChunkedArray | pa.Array) -> pa.Array:
    """For each row, the index of its qid among the qids in order of first appearance."""
    return pc.index_in(qids, value_set=pc.unique(qids))


def candidates_per_job(name: str, wildcards: Mapping[str, str], config: Mapping[str, Any]) -> int:
    """Candidate passages per query that a job of resource estimate ``name`` (``miracl_eval.jobs.requests``)
    scores, fuses or reranks, from the validated ``config``: a candidate list's (a component scoring job's, a
    fused run's: :func:`~miracl_eval.fusion.weighted.candidates_per_query`), a hybrid's (its systems' depth
    each), a reranker's depth; none for any other job."""
    if name in ("union_components", "rerank_components", "fuse"):
        kind = CANDIDATE_LIST[wildcards["method"]] if name == "fuse" else name.split("_")[0]
        depth = config["models"][wildcards["model"]]["rerank_depth"]
        return candidates_per_query(kind, config["hits"], depth)
    if name == "hybrid":
        hybrid = config["hybrids"][wildcards["hybrid"]]
        return len(hybrid["systems"]) * hybrid["depth"]
    if name in ("reranker_scores", "reranked_run"):
        return int(config["rerankers"][wildcards["reranker"]]["depth"])
    return 0
