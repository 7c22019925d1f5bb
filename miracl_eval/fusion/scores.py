"""Component scores of candidate pairs, every one exact, from the stored representations.

For each ``(qid, docid)`` candidate every component score is computed exactly, never taken from
a run (where a candidate found by one retriever has no score from the other):

* dense: the inner product of the stored query and passage vectors (float64);
* sparse: the float dot product of the lexical weights (BGE-M3's lexical matching score);
* multivec: from a callable ``(pairs) -> scores`` (the ColBERT scorer).

Passage shards are read batch by batch (:class:`VectorShards`, :class:`WeightShards`), so a query
chunk never holds the vectors of every passage its candidates name. A component score that cannot
be computed (no vector for a passage, say) is an error, never 0. Query ids and passage ids live in
separate lookups, so a qid equal to a docid is never dropped.
"""

from __future__ import annotations

import abc
import functools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from miracl_eval import schemas
from miracl_eval.encoders.outputs import SparseBatch, iter_sparse_batches, iter_vector_batches
from miracl_eval.errors import InputError, MiraclEvalError
from miracl_eval.fusion.candidates import PAIRS
from miracl_eval.fusion.weighted import COMPONENT_NAMES, COMPONENTS, MissingComponentError
from miracl_eval.inputs.passages import CorpusRows, read_bytes
from miracl_eval.types import PathLike

SCORE_CHUNK = 16_384


def _rows(values: pa.Array | pa.ChunkedArray, index: pa.Array) -> np.ndarray:
    """Row of each value in ``index`` (unique ids); -1 where absent."""
    rows = pc.index_in(values, value_set=index)
    return pc.fill_null(rows, -1).to_numpy(zero_copy_only=False).astype(np.int64)


def _check_unique(ids: pa.Array, source: object) -> None:
    if len(pc.unique(ids)) != len(ids):
        counts = pc.value_counts(ids)
        dup = counts.filter(pc.greater(counts.field("counts"), 1))[0]["values"]
        raise InputError(str(source), f"id {dup} occurs more than once")


def _needed(needed: Iterable[str] | pa.Array | pa.ChunkedArray | None) -> pa.Array | None:
    if needed is None:
        return None
    if isinstance(needed, pa.ChunkedArray):
        needed = needed.combine_chunks()
    if not isinstance(needed, pa.Array):
        needed = pa.array(list(needed), pa.string())
    return pc.unique(needed)


def _flat_positions(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Positions in CSR value arrays of the entries of rows starting at ``starts`` with ``lens``
    entries, row after row."""
    return np.repeat(starts - np.r_[0, np.cumsum(lens)[:-1]], lens) + np.arange(lens.sum())


class _IdLookup:
    """Rows addressed by string id (``self.ids``)."""

    ids: pa.Array

    def __len__(self) -> int:
        return len(self.ids)

    def rows(self, ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Row positions of ``ids`` (each must be present)."""
        return _rows(ids, self.ids)


class VectorLookup(_IdLookup):
    """Dense vectors by id, in their stored precision (float16 or float32)."""

    def __init__(self, ids: pa.Array | Sequence[str], vectors: np.ndarray, source: object = "vectors") -> None:
        self.ids = ids if isinstance(ids, pa.Array) else pa.array(list(ids), pa.string())
        if len(self.ids) != len(vectors):
            raise ValueError(f"{len(self.ids)} ids for {len(vectors)} vectors")
        _check_unique(self.ids, source)
        self.vectors = vectors

    @classmethod
    def from_parquet(
        cls,
        paths: PathLike | Sequence[PathLike],
        needed: Iterable[str] | pa.Array | None = None,
        key: str | None = None,
    ) -> VectorLookup:
        """Stream the vector shards, keeping only the ids in ``needed`` (all when ``None``)."""
        wanted = _needed(needed)
        ids: list[pa.Array] = []
        mats: list[np.ndarray] = []
        dim = None
        for batch_ids, vecs in iter_vector_batches(paths, key=key, dtype=None):
            dim = vecs.shape[1]
            if wanted is not None:
                keep = pc.is_in(batch_ids, value_set=wanted).to_numpy(zero_copy_only=False)
                batch_ids, vecs = batch_ids.filter(pa.array(keep)), vecs[keep]
            if len(batch_ids):
                ids.append(batch_ids)
                mats.append(vecs)
        all_ids = pa.concat_arrays(ids) if ids else pa.array([], pa.string())
        mat = np.concatenate(mats) if mats else np.zeros((0, dim or 0), dtype=np.float32)
        return cls(all_ids, mat, source=paths)


class SparseLookup(_IdLookup):
    """Lexical weights by id in CSR form: row ``i`` is ``tokens[indptr[i]:indptr[i+1]]``."""

    def __init__(
        self, ids: pa.Array, indptr: np.ndarray, tokens: np.ndarray, weights: np.ndarray, source: object = "weights"
    ) -> None:
        _check_unique(ids, source)
        self.ids = ids
        self.indptr = np.asarray(indptr, dtype=np.int64)
        self.tokens = np.asarray(tokens, dtype=np.int32)
        self.weights = np.asarray(weights, dtype=np.float32)
        if (
            len(self.indptr) != len(ids) + 1
            or self.indptr[-1] != len(self.tokens)
            or len(self.tokens) != len(self.weights)
        ):
            raise ValueError("inconsistent CSR arrays")
        if len(self.tokens) and self.tokens.min() < 0:
            raise ValueError("token ids must be non-negative")
        self.vocab = int(self.tokens.max()) + 1 if len(self.tokens) else 0

    @classmethod
    def from_parquet(
        cls,
        paths: PathLike | Sequence[PathLike],
        needed: Iterable[str] | pa.Array | None = None,
        key: str | None = None,
    ) -> SparseLookup:
        """Stream the lexical weight shards, keeping only the ids in ``needed`` (all when ``None``)."""
        wanted = _needed(needed)
        ids: list[pa.Array] = []
        lengths: list[np.ndarray] = []
        tokens: list[np.ndarray] = []
        weights: list[np.ndarray] = []
        for batch in iter_sparse_batches(paths, key=key):
            lens = np.diff(batch.indptr)
            if wanted is None:
                keep = np.arange(len(batch))
            else:
                keep = np.flatnonzero(pc.is_in(batch.ids, value_set=wanted).to_numpy(zero_copy_only=False))
            if not len(keep):
                continue
            klens = lens[keep]
            flat = _flat_positions(batch.indptr[keep], klens)
            ids.append(batch.ids.take(pa.array(keep)))
            lengths.append(klens)
            tokens.append(batch.tokens[flat])
            weights.append(batch.weights[flat])
        if not ids:
            return cls(pa.array([], pa.string()), np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))
        indptr = np.r_[0, np.cumsum(np.concatenate(lengths))]
        return cls(pa.concat_arrays(ids), indptr, np.concatenate(tokens), np.concatenate(weights), source=paths)

    def row(self, i: int) -> dict[int, float]:
        lo, hi = self.indptr[i], self.indptr[i + 1]
        return dict(zip(self.tokens[lo:hi].tolist(), self.weights[lo:hi].tolist(), strict=True))


class _Shards(abc.ABC):
    """Passage representations left in their shards and read batch by batch while scoring, so that a
    query chunk whose candidates name most of the corpus never holds the corpus's vectors (MessIRve:
    14M passages, 57 GB of float32 vectors).

    With the corpus's rows (``corpus``: shards tile the corpus's rows in order), a candidate's shard
    and row group follow from its row, and only the row groups that hold candidates are read (each
    checked to hold the docids the corpus puts there); without them, every shard's ids are read
    whole (tens of bytes a passage) and every batch is scanned.
    """

    def __init__(self, paths: PathLike | Sequence[PathLike], corpus: CorpusRows | None = None) -> None:
        self.paths = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
        self.corpus = corpus
        #: stored bytes of the row groups read while scoring (with ``corpus``)
        self.bytes_read = 0

    @functools.cached_property
    def _groups(self) -> list[tuple[PathLike, pq.FileMetaData, int, int, int]]:
        """``(path, its metadata, row group, first row in the shards' concatenation, rows)`` of every
        row group (each shard's footer read once)."""
        out = []
        start = 0
        for path in self.paths:
            try:
                meta = pq.read_metadata(path)
            except (pa.ArrowInvalid, OSError) as err:
                raise InputError(path, f"cannot read Parquet file ({err})") from err
            for g in range(meta.num_row_groups):
                n = meta.row_group(g).num_rows
                out.append((path, meta, g, start, n))
                start += n
        return out

    def rows(self, component: str, docids: pa.ChunkedArray) -> np.ndarray:
        """Row of each docid in the shards' concatenation; a docid stored nowhere is an error."""
        if self.corpus is not None:
            rows = self.corpus.find(docids)
            total = sum(n for *_, n in self._groups)
            return _found(component, "passage", docids, np.where(rows < total, rows, -1))
        batches = [b.column("docid") for p in self.paths for b in schemas.iter_batches(p, columns=["docid"])]
        ids = pa.concat_arrays(batches) if batches else pa.array([], pa.string())
        if ids.null_count:
            raise InputError(self.paths[0], f"{ids.null_count} null docid(s) in the shards")
        _check_unique(ids, ", ".join(map(str, self.paths[:3])) + (", ..." if len(self.paths) > 3 else ""))
        return _found(component, "passage", docids, _rows(docids, ids))

    @abc.abstractmethod
    def _read(self, path: PathLike, group: int | None) -> Iterator[tuple[pa.Array, Any]]:
        """``(docids, batch)`` of every batch of one shard (``group``: of that row group only), in order."""

    def _batches(self, needed: np.ndarray) -> Iterator[tuple[int, Any]]:
        """``(row of the batch's first passage, batch)`` of the batches that hold ``needed`` rows (sorted)."""
        if self.corpus is None:
            start = 0
            for path in self.paths:
                for _, batch in self._read(path, None):
                    yield start, batch
                    start += len(batch)
            return
        for path, meta, group, start, n in self._groups:
            lo, hi = np.searchsorted(needed, [start, start + n])
            if hi == lo:
                continue
            self.bytes_read += read_bytes(meta, [group])
            at = start
            for ids, batch in self._read(path, group):
                a, b = np.searchsorted(needed, [at, at + len(ids)])
                here = needed[a:b]
                expected = self.corpus.docids.take(pa.array(here))
                stored = ids.take(pa.array(here - at))
                if not pc.all(pc.equal(expected, stored)).as_py():
                    bad = int(np.flatnonzero(~pc.equal(expected, stored).to_numpy(zero_copy_only=False))[0])
                    raise InputError(
                        path,
                        f"row {int(here[bad] - start) + 1} of row group {group} holds docid {stored[bad].as_py()!r}, "
                        f"the corpus has {expected[bad].as_py()!r} there: the shards do not follow the corpus's rows",
                    )
                yield at, batch
                at += len(ids)

    def scatter(self, rows: np.ndarray, score: Callable[[np.ndarray, np.ndarray, Any], np.ndarray]) -> np.ndarray:
        """``out[i] = score(pair indices, their rows in the batch, batch)`` over the batches of the
        shards that hold ``rows`` (from :meth:`rows`), each batch read once."""
        out = np.empty(len(rows), dtype=np.float64)
        order = np.argsort(rows, kind="stable")
        ordered = rows[order]
        for start, batch in self._batches(np.unique(ordered)):
            lo, hi = np.searchsorted(ordered, [start, start + len(batch)])
            if hi > lo:
                idx = order[lo:hi]
                out[idx] = score(idx, ordered[lo:hi] - start, batch)
        return out


class VectorShards(_Shards):
    """Passage vectors in their shards (``(docid, vector)`` Parquet), for :func:`dense_scores`."""

    def _read(self, path: PathLike, group: int | None) -> Iterator[tuple[pa.Array, np.ndarray]]:
        groups = None if group is None else [group]
        yield from iter_vector_batches([path], key="docid", dtype=None, row_groups=groups)


class WeightShards(_Shards):
    """Passage lexical weights in their shards (``schemas.SPARSE`` Parquet), for :func:`sparse_scores`."""

    def _read(self, path: PathLike, group: int | None) -> Iterator[tuple[pa.Array, SparseBatch]]:
        for batch in iter_sparse_batches([path], key="docid", row_group=group):
            yield batch.ids, batch


def _pairs(pairs: pa.Table) -> pa.Table:
    missing = [c for c in PAIRS.names if c not in pairs.column_names]
    if missing:
        raise ValueError(f"candidate pairs need columns qid and docid (missing {', '.join(missing)})")
    return pairs


def lookup_rows(component: str, what: str, ids: pa.ChunkedArray, lookup: VectorLookup | SparseLookup) -> np.ndarray:
    return _found(component, what, ids, lookup.rows(ids))


def _found(component: str, what: str, ids: pa.ChunkedArray, rows: np.ndarray) -> np.ndarray:
    """``rows``, when every id has one (row >= 0); else the error naming how many have none."""
    absent = np.flatnonzero(rows < 0)
    if len(absent):
        example = ids[int(absent[0])].as_py()
        n = len(pc.unique(ids.take(pa.array(absent))))
        raise MissingComponentError(f"{component}: no {what} for {n} {what}-id(s), e.g. {example!r}")
    return rows


def dense_dots(queries: np.ndarray, qrows: np.ndarray, passages: np.ndarray, prows: np.ndarray) -> np.ndarray:
    """``queries[qrows[i]] . passages[prows[i]]`` in float64, :data:`SCORE_CHUNK` pairs at a time."""
    if queries.shape[1] != passages.shape[1] and len(qrows):
        raise MiraclEvalError(
            f"dense: query vectors have dimension {queries.shape[1]}, passage vectors {passages.shape[1]}"
        )
    out = np.empty(len(qrows), dtype=np.float64)
    for lo in range(0, len(qrows), SCORE_CHUNK):
        q = queries[qrows[lo : lo + SCORE_CHUNK]].astype(np.float64)
        p = passages[prows[lo : lo + SCORE_CHUNK]].astype(np.float64)
        out[lo : lo + SCORE_CHUNK] = np.einsum("ij,ij->i", q, p)
    return out


def dense_scores(
    pairs: pa.Table, query_vectors: VectorLookup, passage_vectors: VectorLookup | VectorShards
) -> np.ndarray:
    """Exact inner products (float64) of the stored query and passage vectors of each pair.

    ``passage_vectors`` held in memory (:class:`VectorLookup`) or read from their shards batch by
    batch (:class:`VectorShards`): the same scores, bit for bit.
    """
    pairs = _pairs(pairs)
    qrows = lookup_rows("dense", "query", pairs.column("qid"), query_vectors)
    q = query_vectors.vectors
    if isinstance(passage_vectors, VectorShards):
        prows = passage_vectors.rows("dense", pairs.column("docid"))
        return passage_vectors.scatter(prows, lambda idx, rows, batch: dense_dots(q, qrows[idx], batch, rows))
    prows = lookup_rows("dense", "passage", pairs.column("docid"), passage_vectors)
    return dense_dots(q, qrows, passage_vectors.vectors, prows)


def sparse_scores(
    pairs: pa.Table, query_weights: SparseLookup, passage_weights: SparseLookup | WeightShards
) -> np.ndarray:
    """Exact float dot products (float64) of the query and passage lexical weights of each pair.

    A passage stored with no weights scores 0; a passage (or query) that is not stored at
    all is a :class:`MissingComponentError`. ``passage_weights`` held in memory
    (:class:`SparseLookup`) or read from their shards batch by batch (:class:`WeightShards`).
    """
    pairs = _pairs(pairs)
    qrows = lookup_rows("sparse", "query", pairs.column("qid"), query_weights)
    if isinstance(passage_weights, WeightShards):
        prows = passage_weights.rows("sparse", pairs.column("docid"))
        return passage_weights.scatter(
            prows, lambda idx, rows, b: sparse_dots(query_weights, qrows[idx], b.indptr, b.tokens, b.weights, rows)
        )
    prows = lookup_rows("sparse", "passage", pairs.column("docid"), passage_weights)
    p = passage_weights
    return sparse_dots(query_weights, qrows, p.indptr, p.tokens, p.weights, prows)


def sparse_dots(
    query_weights: SparseLookup,
    qrows: np.ndarray,
    indptr: np.ndarray,
    tokens: np.ndarray,
    weights: np.ndarray,
    prows: np.ndarray,
) -> np.ndarray:
    """Dot products of query rows and passage rows (CSR ``indptr``, ``tokens``, ``weights``), query by
    query: the query's weights are scattered into a dense vocabulary-sized vector, and the
    candidates' tokens gather from it."""
    out = np.zeros(len(qrows), dtype=np.float64)
    if not len(qrows):
        return out
    vocab = int(tokens.max()) + 1 if len(tokens) else 0
    qdense = np.zeros(max(query_weights.vocab, vocab), dtype=np.float64)
    plens = np.diff(indptr)
    order = np.argsort(qrows, kind="stable")
    sorted_q = qrows[order]
    bounds = np.r_[0, np.flatnonzero(np.diff(sorted_q)) + 1, len(order)]
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        qr = sorted_q[s]
        lo, hi = query_weights.indptr[qr], query_weights.indptr[qr + 1]
        if lo == hi:
            continue  # a query without weights scores 0 everywhere
        qtok = query_weights.tokens[lo:hi]
        qdense[qtok] = query_weights.weights[lo:hi]
        idx = order[s:e]
        pr = prows[idx]
        lens = plens[pr]
        flat = _flat_positions(indptr[pr], lens)
        prod = qdense[tokens[flat]] * weights[flat].astype(np.float64)
        out[idx] = np.bincount(np.repeat(np.arange(len(idx)), lens), weights=prod, minlength=len(idx))
        qdense[qtok] = 0.0
    return out


def checked_scores(name: str, scores: np.ndarray | Sequence[float], n: int) -> np.ndarray:
    arr = np.asarray(scores, dtype=np.float64)
    if arr.shape != (n,):
        raise MissingComponentError(f"{name}: {arr.shape} scores for {n} candidate pairs")
    if not np.isfinite(arr).all():
        raise MissingComponentError(f"{name}: {int((~np.isfinite(arr)).sum())} score(s) are NaN or infinite")
    return arr


def score_components(
    pairs: pa.Table,
    *,
    query_vectors: VectorLookup | None = None,
    passage_vectors: VectorLookup | VectorShards | None = None,
    query_weights: SparseLookup | None = None,
    passage_weights: SparseLookup | WeightShards | None = None,
    multivec: Callable[[pa.Table], np.ndarray] | None = None,
) -> pa.Table:
    """The ``COMPONENTS`` table of ``pairs``: each component whose inputs are given, else null."""
    pairs = _pairs(pairs).select(PAIRS.names).cast(PAIRS)
    n = len(pairs)
    cols: dict[str, pa.Array] = {}
    if (query_vectors is None) != (passage_vectors is None):
        raise ValueError("dense scores need both query_vectors and passage_vectors")
    if (query_weights is None) != (passage_weights is None):
        raise ValueError("sparse scores need both query_weights and passage_weights")
    if query_vectors is not None and passage_vectors is not None:
        cols["dense"] = pa.array(checked_scores("dense", dense_scores(pairs, query_vectors, passage_vectors), n))
    if query_weights is not None and passage_weights is not None:
        cols["sparse"] = pa.array(checked_scores("sparse", sparse_scores(pairs, query_weights, passage_weights), n))
    if multivec is not None:
        cols["multivec"] = pa.array(checked_scores("multivec", multivec(pairs), n))
    return components_table(pairs, **cols)


def components_table(pairs: pa.Table, **scores: np.ndarray | pa.Array | Sequence[float]) -> pa.Table:
    """Assemble a ``COMPONENTS`` table from pairs and per-component score arrays (others null)."""
    unknown = set(scores) - set(COMPONENT_NAMES)
    if unknown:
        raise ValueError(f"unknown component(s) {', '.join(sorted(unknown))}; known: {', '.join(COMPONENT_NAMES)}")
    n = len(pairs)
    data = {"qid": pairs.column("qid"), "docid": pairs.column("docid")}
    for name in COMPONENT_NAMES:
        data[name] = pa.array(scores[name], pa.float64()) if name in scores else pa.nulls(n, pa.float64())
        if len(data[name]) != n:
            raise ValueError(f"{name}: {len(data[name])} scores for {n} pairs")
    return pa.table(data, schema=COMPONENTS)
