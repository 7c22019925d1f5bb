"""Exact dense search in blocks (rules ``dense_block_search`` and ``dense_merge``): the ranking of one
flat inner-product index, without any job holding more than one block's vectors.

A *search block* is a run of a corpus's encoding shards (``00000-00039``, :mod:`miracl_eval.shards`).
:func:`block_search` scores every query of the corpus's partitions against the block's passages
(float32 products, as Faiss's ``IndexFlatIP`` computes them) and keeps, per query, its top ``hits``
passages *and every passage tied with the last of them*, so that no block drops a passage that the
whole corpus's top ``hits`` could hold. Its file holds one row group per query chunk
(:data:`MERGE_CHUNK` queries of one partition, in the queries' file order), the same chunks in every
block. :func:`merge_blocks` then ranks, chunk by chunk, the union of the blocks' rows for one
partition as :func:`miracl_eval.runs.rank_table` ranks any run (score descending, ties by docid) and
keeps the top ``hits``: exactly the run of a single flat index of all passages.

A block is held only in its view's storage (:mod:`miracl_eval.faiss.storage`: float32, float16, int8
or binary codes), read a Parquet row group at a time. Scoring runs on the job's GPU
when it holds one (torch, every storage), else on the CPU (float32 by numpy's BLAS, binary by Faiss's
Hamming kernels, float16 and int8 by torch's CPU kernels); the scores of a query batch are bounded by
``memory_mb``. A view that rescores keeps, per query chunk, its pairs and its queries until a round of
chunks fills ``memory_mb``, then reads the block's vectors again for their float32 scores.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from miracl_eval import schemas
from miracl_eval.atomic import atomic_output
from miracl_eval.encoders.outputs import iter_vector_batches, vector_dim
from miracl_eval.errors import InputError, MiraclEvalError
from miracl_eval.faiss.index import set_threads
from miracl_eval.faiss.storage import HAMMING_SPARE, Stored, TorchScores, View, hamming_top, int8_ranges
from miracl_eval.jobs.progress import Progress
from miracl_eval.runs import RunWriter, rank_table
from miracl_eval.types import PathLike

log = logging.getLogger(__name__)

#: what a preload server imports for this stage (:mod:`miracl_eval.jobs.preload`)
PRELOAD = ("numpy", "pyarrow.parquet", "faiss", "torch")

#: queries per row group of a block's candidates, and per merge step
MERGE_CHUNK = schemas.DENSE_MERGE_CHUNK
#: a block file's candidates (scores as float32, as computed)
CANDIDATES = pa.schema([("qid", pa.string()), ("docid", pa.string()), ("score", pa.float32())])
#: ... of a view that rescores: ``score`` the stored vectors' (which choose), ``rescored`` the float32 one (which ranks)
RESCORED = CANDIDATES.append(pa.field("rescored", pa.float32()))
#: a corpus's int8 ranges (rule ``int8_ranges``): per dimension the calibration sample's minimum and maximum
RANGES = pa.schema([("min", pa.float32()), ("max", pa.float32())])
#: the key-value metadata of a block file: its chunks, ``[[partition, queries], ...]`` in row group order
CHUNKS_KEY = b"miracl_eval.chunks"
#: vectors read at most at a time (of a row group) into a block's storage (64 MB of float32 at 1,024
#: dimensions), and again to rescore
READ_ROWS = 16_384
#: pairs whose float32 scores are computed at once when rescoring (two 64 MB arrays at 1,024 dimensions)
RESCORE_SLICE = 16_384
#: bytes a rescoring round holds per pair (query row, passage row, both scores, and their order)
RESCORE_PAIR_BYTES = schemas.RESCORE_PAIR_BYTES


def _row_groups(shards: Sequence[PathLike], dim: int) -> Iterator[tuple[pa.Array, np.ndarray]]:
    """The block's ``(docids, float32 vectors)``, one Parquet row group at a time (at most :data:`READ_ROWS`
    rows a batch): Arrow's reader of a whole file buffers several row groups ahead (about 570 MB for
    shards of 100k vectors of 1,024 dimensions), one row group at a time a window's (16 MB)."""
    for path in shards:
        try:
            groups = pq.read_metadata(path).num_row_groups
        except (OSError, pa.ArrowInvalid) as err:
            raise InputError(path, f"cannot read Parquet file ({err})") from err
        for group in range(groups):
            yield from iter_vector_batches(path, key="docid", dim=dim, batch_rows=READ_ROWS, row_groups=[group])


def _block_store(
    shards: Sequence[PathLike], look: View, ranges: np.ndarray | None, model: str = ""
) -> tuple[pa.Array, Stored, int]:
    """The block's docids, its passages in the view's storage (read a row group at a time: :func:`_row_groups`,
    seen through the view and encoded into place: the block is never held as float32 unless that is its
    storage) and the dimension the vectors were encoded at. ``model``: the model's name, for errors."""
    n = sum(schemas.count_rows(p) for p in shards)
    if n == 0:
        raise InputError(shards[0], "the block's shards hold no vectors")
    _, dim, _ = vector_dim(shards[0], "docid")
    look.check(dim, shards[0], model)
    stored = Stored.allocate(n, look.dimensions or dim, look.storage, ranges)
    ids: list[pa.Array] = []
    at = 0
    for batch_ids, vecs in _row_groups(shards, dim):
        if at + len(vecs) > n:
            raise MiraclEvalError(f"the shards hold more than the {n} vectors their metadata says")
        stored.put(at, look.truncate(vecs))
        ids.append(batch_ids)
        at += len(vecs)
    if at != n:
        raise MiraclEvalError(f"the shards hold {at} vectors, their metadata says {n}")
    return pa.concat_arrays(ids), stored, dim


def _query_chunks(queries: Mapping[str, PathLike], dim: int) -> Iterator[tuple[str, pa.Array, np.ndarray]]:
    """``(partition, qids, vectors)`` of :data:`MERGE_CHUNK` queries at a time, partitions sorted."""
    for part in sorted(queries):
        _, qdim, _ = vector_dim(queries[part], "qid")
        if qdim != dim:
            raise InputError(queries[part], f"query vectors have dimension {qdim}, the passages {dim}")
        yield from ((part, q, v) for q, v in iter_vector_batches(queries[part], key="qid", batch_rows=MERGE_CHUNK))


def _query_rows(memory_mb: int, passages: int) -> int:
    """Query rows per product: their float32 scores against the block within ``memory_mb``."""
    return max(1, (memory_mb << 20) // max(1, 4 * passages))


class _Scorer:
    """Top ``hits`` per query with every tie of the last one, for a block held in a view's storage: on a
    GPU every storage by torch (:class:`~miracl_eval.faiss.storage.TorchScores`); on the CPU float32 by
    numpy's BLAS, binary by Faiss's Hamming kernels, float16 and int8 by torch's CPU kernels."""

    def __init__(self, stored: Stored, hits: int, device: str, memory_mb: int, threads: int | None = None) -> None:
        self.n, self.hits, self.dim = stored.n, hits, stored.dim
        self.rows = _query_rows(memory_mb, self.n)
        self.torch: TorchScores | None = None
        self.stored: Stored | None = None
        self.kernel = "torch"
        self.gpu = device.startswith("cuda")
        if self.gpu:
            self.torch = TorchScores(stored, device)
        elif stored.storage in ("float32", "binary"):
            self.stored = stored
            self.kernel = "numpy" if stored.storage == "float32" else "faiss"
            if stored.storage == "binary":  # (distance, label) pairs of HAMMING_SPARE x hits per query
                self.rows = max(1, (memory_mb << 20) // (12 * HAMMING_SPARE * hits))
                if threads:
                    set_threads(threads)
        else:
            if threads:
                import torch

                torch.set_num_threads(threads)
            self.torch = TorchScores(stored, "cpu")

    def top(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(query row, passage index, score)`` of each kept pair, query rows ascending (passage
        indexes ascending within a query)."""
        out: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for start in range(0, len(queries), self.rows):
            q = queries[start : start + self.rows]
            rows, cols, scores = self._top(q)
            out.append((rows + start, cols, scores))
        if not out:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
        return tuple(np.concatenate(x) for x in zip(*out, strict=True))  # type: ignore[return-value]

    def _top(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.torch is not None:
            scores = self.torch.scores(q)
            return _keep_top_torch(scores, self.hits) if self.gpu else _keep_top(scores.numpy(), self.hits)
        assert self.stored is not None
        if self.stored.storage == "binary":
            return hamming_top(self.stored.data, self.stored.encode(q), self.dim, self.hits)
        return _keep_top(q @ self.stored.data.T, self.hits)  # float32 [b, n]


def _keep_top(scores: np.ndarray, hits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(row, column, score)`` of each row's top ``hits`` scores and every tie of the last."""
    n = scores.shape[1]
    if n > hits:  # each row's hits-th best, a row at a time (np.partition copies what it partitions)
        last = np.array([np.partition(row, n - hits)[n - hits] for row in scores], dtype=scores.dtype)
        rows, cols = np.nonzero(scores >= last[:, None])
    else:
        rows, cols = np.nonzero(np.ones(scores.shape, dtype=bool))
    return rows.astype(np.int64), cols.astype(np.int64), scores[rows, cols]


def _keep_top_torch(scores: Any, hits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_keep_top` of a torch tensor, on its device."""
    import torch

    if scores.shape[1] > hits:
        last = torch.topk(scores, hits, dim=1, sorted=True).values[:, -1:]
        keep = scores >= last
    else:
        keep = torch.ones_like(scores, dtype=torch.bool)
    rows, cols = torch.nonzero(keep, as_tuple=True)
    kept = scores[rows, cols]
    return rows.cpu().numpy(), cols.cpu().numpy(), kept.cpu().numpy()


def read_ranges(path: PathLike) -> np.ndarray:
    """The int8 ranges of a corpus (:func:`calibrate`'s file), 2 x d float32."""
    table = schemas.read_table(path, RANGES)
    return np.vstack([table.column("min").to_numpy(), table.column("max").to_numpy()]).astype(np.float32)


def calibrate(
    shards: Sequence[PathLike],
    output: PathLike,
    view: Mapping[str, Any],
    sample: int = 100_000,
    model: str = "",
    batch_rows: int = schemas.BATCH_ROWS,
) -> int:
    """Stage entry point (rule ``int8_ranges``): the per-dimension ranges of about ``sample`` passage
    vectors of a corpus, taken evenly over its shards (every k-th vector) and seen through the view's
    truncation, written as Parquet (``min``, ``max``); all of them when the corpus has fewer (noted in the
    log). The ranges are taken batch by batch as the shards are read: the job holds one batch of
    ``batch_rows`` vectors, whatever the sample. Returns the vectors used. ``model``: the model's name, for
    errors."""
    shards = list(shards)
    total = sum(schemas.count_rows(p) for p in shards)
    if total == 0:
        raise InputError(shards[0], "the corpus's shards hold no vectors")
    if sample > total:
        log.info(
            "calibration_passages (%d) is more than the corpus's %d passages: all of them calibrate", sample, total
        )
    step = max(1, total // sample)
    v = View.of(dict(view))
    at = used = 0
    _, dim, _ = vector_dim(shards[0], "docid")
    v.check(dim, shards[0], model)

    def picked() -> Iterator[np.ndarray]:  # reduced as they come: no batch is kept
        nonlocal at, used
        for _, vecs in iter_vector_batches(shards, key="docid", dim=dim, batch_rows=batch_rows):
            chosen = vecs[(-at) % step :: step]
            used += len(chosen)
            at += len(vecs)
            yield v.truncate(chosen)

    ranges = int8_ranges(picked())
    schemas.write_table(pa.table({"min": ranges[0], "max": ranges[1]}), output, RANGES)
    log.info("int8 ranges of %d dimensions from %d of %d passages -> %s", ranges.shape[1], used, total, output)
    return used


def _resolve(device: str) -> str:
    """``cpu``; or, for ``auto`` and ``cuda``, the GPU when torch can use one (a job that holds a GPU
    and cannot use it stops: :func:`miracl_eval.encoders.base.resolve_device`)."""
    if device == "cpu":
        return "cpu"
    from miracl_eval.encoders.base import resolve_device

    return str(resolve_device(device))


class _Chunk:
    """One query chunk's kept pairs, until written (a rescoring round holds several)."""

    def __init__(self, part: str, qids: pa.Array, queries: np.ndarray, found: tuple[np.ndarray, ...]) -> None:
        self.part, self.qids, self.queries = part, qids, queries
        self.qrow, self.col, self.score = found
        self.rescored: np.ndarray | None = None

    def table(self, docids: pa.Array) -> pa.Table:
        columns = {
            "qid": self.qids.take(pa.array(self.qrow)),
            "docid": docids.take(pa.array(self.col)),
            "score": pa.array(self.score, pa.float32()),
        }
        if self.rescored is None:
            return pa.table(columns, schema=CANDIDATES)
        return pa.table({**columns, "rescored": pa.array(self.rescored, pa.float32())}, schema=RESCORED)

    @property
    def held(self) -> int:
        """Bytes a rescoring round holds for this chunk: its queries (twice: they are gathered for the
        round) and its pairs."""
        return 2 * int(self.queries.nbytes) + len(self.col) * RESCORE_PAIR_BYTES


def _rescore(chunks: Sequence[_Chunk], shards: Sequence[PathLike], look: View, dim: int) -> None:
    """The float32 scores of the chunks' pairs (``rescored``): the block's vectors read again, a batch at a
    time and seen through the view, each pair's dot product computed in slices of :data:`RESCORE_SLICE`."""
    queries = np.concatenate([c.queries for c in chunks])
    offsets = np.cumsum([0, *(len(c.queries) for c in chunks)])
    qrow = np.concatenate([c.qrow + off for c, off in zip(chunks, offsets, strict=False)])
    col = np.concatenate([c.col for c in chunks])
    order = np.argsort(col, kind="stable")
    cols = col[order]
    rescored = np.empty(len(col), np.float32)
    at = 0
    for _, vecs in _row_groups(shards, dim):
        lo, hi = np.searchsorted(cols, [at, at + len(vecs)])
        if hi > lo:
            floats = look.truncate(vecs)
            for start in range(lo, hi, RESCORE_SLICE):
                pick = order[start : min(hi, start + RESCORE_SLICE)]
                rescored[pick] = np.einsum("ij,ij->i", queries[qrow[pick]], floats[col[pick] - at])
        at += len(vecs)
    if at <= (cols[-1] if len(cols) else -1):
        raise MiraclEvalError(f"the block's shards changed while it was searched ({at} vectors read again)")
    ends = np.cumsum([len(c.col) for c in chunks])
    for c, end in zip(chunks, ends, strict=True):
        c.rescored = rescored[end - len(c.col) : end]


def block_search(
    shards: Sequence[PathLike],
    queries: Mapping[str, PathLike],
    output: PathLike,
    hits: int = 1000,
    device: str = "cpu",
    memory_mb: int = schemas.DENSE_BLOCK_MB,
    threads: int | None = None,
    view: Mapping[str, Any] | None = None,
    ranges: PathLike | None = None,
    rescore: int = 0,
    model: str = "",
) -> dict[str, Any]:
    """Score the queries of every partition in ``queries`` (partition -> query vector file) against
    the passages of one block's vector ``shards``; write each query's top ``hits`` and the passages
    tied with the last of them to ``output`` (atomically). ``device``: ``cpu``, ``cuda`` or ``auto``
    (the GPU when torch can use one). ``view``: the model's ``dimensions``, ``storage`` and
    ``normalize`` (:mod:`miracl_eval.faiss.storage`; int8 needs the corpus's ``ranges`` file); the block
    is held in that storage only. ``rescore``: such a view keeps each query's top ``rescore`` by the
    stored vectors' scores (and ties) with their float32 scores beside them, for :func:`merge_blocks` to
    rank: computed in rounds of query chunks whose queries and pairs fit ``memory_mb``, each reading the
    block's vectors again. ``model``: the model's name, for errors."""
    if hits < 1:
        raise ValueError("hits must be positive")
    if threads:
        try:
            from threadpoolctl import threadpool_limits

            threadpool_limits(threads)
        except ImportError:  # pragma: no cover - numpy's BLAS then uses its default
            pass
    started = time.perf_counter()
    device = _resolve(device)
    look = View.of(dict(view) if view else None)
    docids, stored, dim = _block_store(shards, look, read_ranges(ranges) if ranges else None, model)
    rescores = bool(rescore) and look.storage != "float32"
    if rescores:
        hits = rescore  # the stored scores choose the top `rescore`; the float32 ones rank them
    scorer = _Scorer(stored, hits, device, memory_mb, threads)
    del stored  # the scorer holds the block (on a GPU, only there)
    chunks: list[list[Any]] = []
    rows = rounds = 0
    total = sum(schemas.count_rows(path) for path in queries.values())
    with (
        atomic_output(output) as tmp,
        Progress(total, f"block search of {len(docids):,} passages", "queries", log) as done,
    ):
        writer = pq.ParquetWriter(tmp, RESCORED if rescores else CANDIDATES, compression="zstd")
        pending: list[_Chunk] = []

        def flush() -> None:
            nonlocal rows, rounds
            if rescores and pending:
                _rescore(pending, shards, look, dim)
                rounds += 1
            for c in pending:
                table = c.table(docids)
                writer.write_table(table, row_group_size=max(1, len(table)))
                chunks.append([c.part, len(c.qids)])
                rows += len(table)
                done.update(len(c.qids))
            pending.clear()

        try:
            for part, qids, qvecs in _query_chunks(queries, dim):
                qvecs = np.ascontiguousarray(look.truncate(qvecs))
                pending.append(_Chunk(part, qids, qvecs if rescores else qvecs[:0], scorer.top(qvecs)))
                if not rescores or sum(c.held for c in pending) >= memory_mb << 20:
                    flush()
            flush()
        finally:
            writer.add_key_value_metadata({CHUNKS_KEY: json.dumps(chunks).encode()})
            writer.close()
    seconds = time.perf_counter() - started
    log.info(
        "block search on %s (%s, %s): %d passages x %d queries, %d candidates (ties included)%s in %.1f s -> %s",
        device, look.storage, scorer.kernel, len(docids), sum(n for _, n in chunks), rows,
        f", rescored in {rounds} round(s)" if rescores else "", seconds, output,
    )  # fmt: skip
    return {"passages": len(docids), "queries": sum(n for _, n in chunks), "candidates": rows, "device": device}


def _rescored(table: pa.Table, qids: pa.Array, qpos: np.ndarray, rescore: int) -> pa.Table:
    """Each query's top ``rescore`` candidates by ``score`` (ties by docid), with their ``rescored``."""
    if rescore < 1:
        raise MiraclEvalError("block files with float32 rescores need the view's rescore setting")
    chosen = rank_table(qids, qpos, table.column("docid"), table.column("score").to_numpy(), depth=rescore)
    return chosen.select(["qid", "docid"]).join(table.select(["qid", "docid", "rescored"]), ["qid", "docid"])


def _chunks_of(path: PathLike) -> list[tuple[str, int]]:
    try:
        meta = pq.read_metadata(path)
    except (OSError, pa.ArrowInvalid) as err:
        raise InputError(path, f"cannot read Parquet file ({err})") from err
    raw = (meta.metadata or {}).get(CHUNKS_KEY)
    if raw is None:
        raise InputError(path, "not a block search file (no chunk list in its metadata)")
    chunks = [(str(p), int(n)) for p, n in json.loads(raw)]
    if meta.num_row_groups != len(chunks):
        raise InputError(path, f"{meta.num_row_groups} row groups for {len(chunks)} query chunks")
    return chunks


def merge_blocks(
    blocks: Sequence[PathLike],
    part: str,
    run_parquet: PathLike,
    run_trec: PathLike,
    hits: int = 1000,
    tag: str = "dense",
    rescore: int = 0,
) -> int:
    """The run of partition ``part`` from its corpus's block search files: per query the top ``hits``
    of all blocks' candidates, ranked as :func:`miracl_eval.runs.rank_table` ranks (score descending,
    ties by docid). Blocks that rescore (:data:`RESCORED`): the top ``rescore`` of all blocks by the
    stored vectors' scores, ranked by their float32 scores. Returns the number of queries."""
    blocks = list(blocks)
    if not blocks:
        raise ValueError("no block search files given")
    chunks = _chunks_of(blocks[0])
    for path in blocks[1:]:
        if _chunks_of(path) != chunks:
            raise MiraclEvalError(f"{path} and {blocks[0]} hold other query chunks: search them again")
    files = [pq.ParquetFile(p) for p in blocks]
    queries = 0
    with RunWriter(run_parquet, run_trec, tag) as writer:
        for group, (chunk_part, _) in enumerate(chunks):
            if chunk_part != part:
                continue
            parts = [f.read_row_group(group) for f in files]
            qids = pc.unique(parts[0].column("qid"))  # every block lists the chunk's queries, in order
            table = pa.concat_tables(parts)
            qpos = pc.index_in(table.column("qid"), value_set=qids).to_numpy()
            if "rescored" in table.column_names:
                table = _rescored(table, qids, qpos, rescore)
                qpos = pc.index_in(table.column("qid"), value_set=qids).to_numpy()
                score = table.column("rescored").to_numpy()
            else:
                score = table.column("score").to_numpy()
            writer.write(rank_table(qids, qpos, table.column("docid"), score, depth=hits))
            queries += len(qids)
    log.info("merged %d block(s) for %s: %d queries -> %s", len(blocks), part, queries, run_parquet)
    return queries
