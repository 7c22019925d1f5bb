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

Scoring runs on the job's GPU when it holds one (torch matrix products in float32), else on the CPU
(numpy's BLAS); the scores of a query batch are bounded by ``memory_mb``.
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
from miracl_eval.faiss.storage import Stored, View, int8_ranges
from miracl_eval.jobs.progress import Progress
from miracl_eval.runs import RunWriter, rank_table
from miracl_eval.types import PathLike

log = logging.getLogger(__name__)

#: what a preload server imports for this stage (:mod:`miracl_eval.jobs.preload`)
PRELOAD = ("numpy", "pyarrow.parquet")

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


def _block_vectors(shards: Sequence[PathLike]) -> tuple[pa.Array, np.ndarray]:
    """The block's docids and float32 vectors, read into one array sized from the shards' metadata
    (the block's vectors are held once, never twice)."""
    n = sum(schemas.count_rows(p) for p in shards)
    if n == 0:
        raise InputError(shards[0], "the block's shards hold no vectors")
    _, dim, _ = vector_dim(shards[0], "docid")
    vectors = np.empty((n, dim), dtype=np.float32)
    ids: list[pa.Array] = []
    at = 0
    for batch_ids, vecs in iter_vector_batches(shards, key="docid", dim=dim):
        if at + len(vecs) > n:
            raise MiraclEvalError(f"the shards hold more than the {n} vectors their metadata says")
        vectors[at : at + len(vecs)] = vecs
        ids.append(batch_ids)
        at += len(vecs)
    return pa.concat_arrays(ids), vectors


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
    """Top ``hits`` per query with every tie of the last one, on the CPU (numpy) or a GPU (torch)."""

    def __init__(self, vectors: np.ndarray, hits: int, device: str, memory_mb: int) -> None:
        self.n = len(vectors)
        self.hits = hits
        self.rows = _query_rows(memory_mb, self.n)
        self.torch: Any = None
        self.vectors: Any  # numpy on the CPU, a torch tensor on the GPU
        if device.startswith("cuda"):
            import torch

            self.torch = torch
            self.vectors = torch.from_numpy(vectors).to(device)
        else:
            self.vectors = vectors

    def top(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(query row, passage index, score)`` of each kept pair, query rows ascending."""
        out: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for start in range(0, len(queries), self.rows):
            q = queries[start : start + self.rows]
            rows, cols, scores = self._top_gpu(q) if self.torch is not None else self._top_cpu(q)
            out.append((rows + start, cols, scores))
        if not out:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
        return tuple(np.concatenate(x) for x in zip(*out, strict=True))  # type: ignore[return-value]

    def _top_cpu(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return _keep_top(q @ self.vectors.T, self.hits)  # float32 [b, n]

    def _top_gpu(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        torch = self.torch
        scores = torch.from_numpy(q).to(self.vectors.device) @ self.vectors.T
        if self.n > self.hits:
            last = torch.topk(scores, self.hits, dim=1, sorted=True).values[:, -1:]
            keep = scores >= last
        else:
            keep = torch.ones_like(scores, dtype=torch.bool)
        rows, cols = torch.nonzero(keep, as_tuple=True)
        kept = scores[rows, cols]
        return rows.cpu().numpy(), cols.cpu().numpy(), kept.cpu().numpy()


def _keep_top(scores: np.ndarray, hits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(row, column, score)`` of each row's top ``hits`` scores and every tie of the last."""
    n = scores.shape[1]
    if n > hits:
        last = np.partition(scores, n - hits, axis=1)[:, n - hits]  # each row's hits-th best
        rows, cols = np.nonzero(scores >= last[:, None])
    else:
        rows, cols = np.nonzero(np.ones(scores.shape, dtype=bool))
    return rows.astype(np.int64), cols.astype(np.int64), scores[rows, cols]


class _StoredScorer(_Scorer):
    """The top hits of a view's stored vectors (truncated, float16, int8 or binary: :mod:`.storage`),
    scored on the CPU."""

    def __init__(self, stored: Stored, hits: int, memory_mb: int) -> None:
        self.stored, self.n, self.hits, self.torch = stored, stored.n, hits, None
        self.rows = _query_rows(memory_mb, self.n)

    def _top_cpu(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return _keep_top(self.stored.scores(q), self.hits)


def read_ranges(path: PathLike) -> np.ndarray:
    """The int8 ranges of a corpus (:func:`calibrate`'s file), 2 x d float32."""
    table = schemas.read_table(path, RANGES)
    return np.vstack([table.column("min").to_numpy(), table.column("max").to_numpy()]).astype(np.float32)


def calibrate(shards: Sequence[PathLike], output: PathLike, view: Mapping[str, Any], sample: int = 100_000) -> int:
    """Stage entry point (rule ``int8_ranges``): the per-dimension ranges of about ``sample`` passage
    vectors of a corpus, taken evenly over its shards (every k-th vector) and seen through the view's
    truncation, written as Parquet (``min``, ``max``). Returns the vectors used."""
    shards = list(shards)
    total = sum(schemas.count_rows(p) for p in shards)
    if total == 0:
        raise InputError(shards[0], "the corpus's shards hold no vectors")
    step = max(1, total // sample)
    v = View.of(dict(view))
    picked: list[np.ndarray] = []
    at = used = 0
    _, dim, _ = vector_dim(shards[0], "docid")
    for _, vecs in iter_vector_batches(shards, key="docid", dim=dim):
        first = (-at) % step
        chosen = vecs[first::step]
        picked.append(v.truncate(chosen))
        used += len(chosen)
        at += len(vecs)
    ranges = int8_ranges(picked)
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


def block_search(
    shards: Sequence[PathLike],
    queries: Mapping[str, PathLike],
    output: PathLike,
    hits: int = 1000,
    device: str = "cpu",
    memory_mb: int = 1024,
    threads: int | None = None,
    view: Mapping[str, Any] | None = None,
    ranges: PathLike | None = None,
    rescore: int = 0,
) -> dict[str, Any]:
    """Score the queries of every partition in ``queries`` (partition -> query vector file) against
    the passages of one block's vector ``shards``; write each query's top ``hits`` and the passages
    tied with the last of them to ``output`` (atomically). ``device``: ``cpu``, ``cuda`` or ``auto``
    (the GPU when torch can use one). ``view``: the model's ``dimensions``, ``storage`` and
    ``normalize`` (:mod:`miracl_eval.faiss.storage`; int8 needs the corpus's ``ranges`` file); a view
    stored otherwise than in float32 is scored on the CPU. ``rescore``: such a view keeps each query's top
    ``rescore`` by the stored vectors' scores (and ties) with their float32 scores beside them, for
    :func:`merge_blocks` to rank."""
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
    docids, vectors = _block_vectors(shards)
    dim = vectors.shape[1]  # as encoded (the queries' too)
    look = View.of(dict(view) if view else None)
    if look.dimensions is not None and look.dimensions > dim:
        raise InputError(shards[0], f"the model's dimensions setting ({look.dimensions}) exceeds its vectors' {dim}")
    vectors = look.truncate(vectors)  # passages and queries are seen through the view's dimensions once
    scorer: _Scorer
    floats: np.ndarray | None = None  # the float32 vectors that rescore (a view with rescore)
    if look.storage == "float32":  # on the job's device
        scorer = _Scorer(vectors, hits, device, memory_mb)
    else:
        if rescore:
            floats = vectors
            hits = rescore  # the stored scores choose the top `rescore`; the float32 ones rank them
        scorer = _StoredScorer(Stored(vectors, look.storage, read_ranges(ranges) if ranges else None), hits, memory_mb)
        del vectors  # the block is held in its storage (and, to rescore, in float32)
        device = "cpu"
    chunks: list[list[Any]] = []
    rows = 0
    total = sum(schemas.count_rows(path) for path in queries.values())
    with (
        atomic_output(output) as tmp,
        Progress(total, f"block search of {len(docids):,} passages", "queries", log) as done,
    ):
        schema = RESCORED if floats is not None else CANDIDATES
        writer = pq.ParquetWriter(tmp, schema, compression="zstd")
        try:
            for part, qids, qvecs in _query_chunks(queries, dim):
                qvecs = np.ascontiguousarray(look.truncate(qvecs))
                qrow, col, score = scorer.top(qvecs)
                columns = {
                    "qid": qids.take(pa.array(qrow)),
                    "docid": docids.take(pa.array(col)),
                    "score": pa.array(score, pa.float32()),
                }
                if floats is not None:
                    columns["rescored"] = pa.array(np.einsum("ij,ij->i", qvecs[qrow], floats[col]), pa.float32())
                table = pa.table(columns, schema=schema)
                writer.write_table(table, row_group_size=max(1, len(table)))
                chunks.append([part, len(qids)])
                rows += len(table)
                done.update(len(qids))
        finally:
            writer.add_key_value_metadata({CHUNKS_KEY: json.dumps(chunks).encode()})
            writer.close()
    seconds = time.perf_counter() - started
    log.info(
        "block search on %s: %d passages x %d queries, %d candidates (ties included) in %.1f s -> %s",
        device, len(docids), sum(n for _, n in chunks), rows, seconds, output,
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
