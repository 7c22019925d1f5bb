"""Runs: rankings kept as Parquet (qid, docid, rank, score) and as standard 6-column TREC files.

A run never drops a hit because its docid equals its qid (MIRACL qids can look like docids), and
never writes an id that would break the 6 columns of a TREC line (:mod:`miracl_eval.ids`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import BinaryIO, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from miracl_eval import schemas
from miracl_eval.atomic import atomic_output
from miracl_eval.ids import first_bad_id, id_problem


def trec_lines(table: pa.Table, tag: str) -> pa.Array:
    """TREC run lines ``qid Q0 docid rank score tag`` (each with its newline) as a string array,
    joined column-wise. Scores are written exactly: the shortest digits that read back as the same
    float64 (Arrow's formatting, so an integral score is ``64``, not ``64.0``)."""
    if any(c.isspace() for c in tag) or not tag:
        raise ValueError(f"run tag {tag!r} must be a non-empty word")
    for column, what in (("qid", "query id"), ("docid", "docid")):
        bad = first_bad_id(table.column(column))
        if bad is not None:
            raise ValueError(f"{what} {bad!r} {id_problem(bad)} (a TREC line cannot hold it)")
    scores = pc.cast(table.column("score"), pa.string())
    ranks = pc.cast(table.column("rank"), pa.string())
    parts = [table.column("qid"), " Q0 ", table.column("docid"), " ", ranks, " ", scores, f" {tag}\n"]
    return pc.binary_join_element_wise(
        *[p.combine_chunks() if isinstance(p, pa.ChunkedArray) else p for p in parts], ""
    )


class RunWriter:
    """Stream a run, chunk by chunk, to its Parquet and its TREC file; both appear atomically."""

    def __init__(
        self,
        parquet: str | os.PathLike[str],
        trec: str | os.PathLike[str],
        tag: str,
        schema: pa.Schema = schemas.RUN,
    ) -> None:
        self.tag = tag
        self._parquet = schemas.StreamWriter(parquet, schema)
        self._trec_ctx = atomic_output(trec)
        self._fh: BinaryIO | None = None

    def __enter__(self) -> RunWriter:
        self._parquet.__enter__()
        try:
            self._fh = open(self._trec_ctx.__enter__(), "wb")  # noqa: SIM115
        except BaseException:
            self._parquet.__exit__(*sys.exc_info())
            raise
        return self

    def write(self, table: pa.Table) -> None:
        assert self._fh is not None
        self._parquet.write(table)
        schemas.write_strings(self._fh, trec_lines(table, self.tag))

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        assert self._fh is not None
        self._fh.close()
        try:
            self._trec_ctx.__exit__(exc_type, exc, tb)
        finally:
            self._parquet.__exit__(exc_type, exc, tb)
        return False


def write_run(table: pa.Table, parquet: str | os.PathLike[str], trec: str | os.PathLike[str], tag: str) -> None:
    """Write a run as Parquet and as a TREC file, both atomically."""
    with RunWriter(parquet, trec, tag, schema=table.schema) as writer:
        writer.write(table)


def read_run(path: str | os.PathLike[str]) -> pa.Table:
    return schemas.read_table(path, schemas.RUN)


def run_rows(run: str | os.PathLike[str], qids: pa.Array | None, depth: int | None = None) -> pa.Table:
    """The rows of a run whose query is in ``qids`` (None: every query) and, with ``depth``, whose rank
    is at most ``depth``, streamed: the whole run is never held."""
    batches = []
    for batch in schemas.iter_batches(run, schemas.RUN):
        keep = pa.array(np.ones(batch.num_rows, dtype=bool)) if qids is None else pc.is_in(batch["qid"], value_set=qids)
        if depth is not None:
            keep = pc.and_(keep, pc.less_equal(batch.column("rank"), depth))
        batches.append(batch.filter(keep))
    if not batches:
        return schemas.RUN.empty_table()
    return pa.Table.from_batches(batches).select(schemas.RUN.names).cast(schemas.RUN)


def rank_table(
    qids: Sequence[str] | pa.Array,
    qpos: np.ndarray,
    docids: pa.Array,
    scores: np.ndarray,
    depth: int | None = None,
) -> pa.Table:
    """Vectorised :func:`miracl_eval.runs.rank_hits`: a run table from flat hit arrays.

    Hit ``i`` is ``(qids[qpos[i]], docids[i], scores[i])``. Queries come out in the order of
    ``qids``; each query's hits by score descending, ties by docid ascending (code point order,
    which is UTF-8 byte order, as Python sorts strings); ``depth`` keeps the top hits.
    """
    qpos = np.asarray(qpos, dtype=np.int64)
    hits = pa.table(
        {
            "qpos": pa.array(qpos, pa.int64()),
            "docid": pa.array(docids, pa.string()) if not isinstance(docids, pa.Array) else docids.cast(pa.string()),
            "score": pa.array(np.asarray(scores, dtype=np.float64), pa.float64()),
        }
    )
    order = pc.sort_indices(hits, sort_keys=[("qpos", "ascending"), ("score", "descending"), ("docid", "ascending")])
    hits = hits.take(order)
    sorted_q = hits.column("qpos").to_numpy()
    if len(sorted_q):
        starts = np.r_[0, np.flatnonzero(np.diff(sorted_q)) + 1]
        lengths = np.diff(np.r_[starts, len(sorted_q)])
        ranks = np.arange(len(sorted_q)) - np.repeat(starts, lengths) + 1
    else:
        ranks = np.zeros(0, dtype=np.int64)
    qid_arr = qids.cast(pa.string()) if isinstance(qids, pa.Array) else pa.array(list(qids), pa.string())
    table = pa.table(
        {
            "qid": qid_arr.take(pa.array(sorted_q, pa.int64())),
            "docid": hits.column("docid"),
            "rank": pa.array(ranks, pa.int32()),
            "score": hits.column("score"),
        },
        schema=schemas.RUN,
    )
    if depth is not None:
        table = table.filter(pc.less_equal(table.column("rank"), depth))
    return table
