"""Dense retrieval with Faiss over BGE-M3 passage vectors stored as Parquet shards.

Vectors are stored as ``(docid, vector fixed_size_list<float32|float16>[dim])`` shards (queries:
``(qid, vector)``). The index is built shard by shard, so the corpus never has to be held in
Python lists, and is written atomically together with the docids in index order.

The default index is exact inner product (``IndexFlatIP``), as in the BGE-M3 paper; HNSW and
IVF-PQ are approximate alternatives. Search runs in query batches on the GPUs when Faiss has
any (and ``use_gpu``), else on the CPU. Hits are ranked by score, ties by docid, exactly as
:func:`miracl_eval.runs.rank_hits` does; a docid equal to the qid is never dropped.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import schemas
from .atomic import atomic_output
from .errors import InputError, MiraclEvalError
from .runs import RunWriter

log = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]
INDEX_TYPES = ("flat", "hnsw", "ivfpq")
DOCIDS = pa.schema([("docid", pa.string())])
# Faiss GPU k-selection handles at most this many neighbours per query.
GPU_MAX_K = 2048
# Vectors per Faiss ``add`` call while building (bounded memory for large shards).
ADD_BATCH = 65_536
# Query vectors searched at once.
DENSE_SEARCH_BATCH = 4_096


# --------------------------------------------------------------------------- reading vectors


def vector_dim(path: PathLike, key: str | None = None) -> tuple[str, int, str]:
    """``(key column, dim, dtype)`` of a vector Parquet file, from its schema (no data read)."""
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as err:
        raise InputError(path, f"cannot read Parquet file ({err})") from err
    if key is None:
        key = next((k for k in ("docid", "qid") if k in schema.names), None)
        if key is None:
            raise InputError(path, "not a vector file: no 'docid' or 'qid' column")
    for name in (key, "vector"):
        if name not in schema.names:
            raise InputError(path, f"not a vector file: missing column '{name}'")
    vtype = schema.field("vector").type
    if not pa.types.is_fixed_size_list(vtype) or vtype.value_type not in (pa.float32(), pa.float16()):
        raise InputError(path, f"column 'vector' must be fixed_size_list<float32|float16>, found {vtype}")
    return key, vtype.list_size, "float16" if vtype.value_type == pa.float16() else "float32"


def _vectors(path: PathLike, column: pa.Array | pa.ChunkedArray, dim: int, dtype: type | None) -> np.ndarray:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if column.null_count:
        raise InputError(path, f"{column.null_count} null vector(s)")
    values = column.flatten()  # respects slicing, unlike .values
    if values.null_count:
        raise InputError(path, "vector(s) with null components")
    arr = values.to_numpy(zero_copy_only=False).reshape(len(column), dim)
    if dtype is not None and arr.dtype != dtype:
        arr = arr.astype(dtype)
    # a row's float64 sum is finite exactly when all its components are (no float32 sum overflows
    # it), and costs a tenth of np.isfinite over every component
    with np.errstate(invalid="ignore", over="ignore"):
        finite = np.isfinite(arr.sum(axis=1, dtype=np.float64)).all()
    if not finite:
        raise InputError(path, "vector(s) with NaN or infinite components")
    return arr


def iter_vector_batches(
    paths: PathLike | Sequence[PathLike],
    key: str | None = None,
    batch_rows: int = schemas.BATCH_ROWS,
    dtype: type | None = np.float32,
    dim: int | None = None,
) -> Iterator[tuple[pa.Array, np.ndarray]]:
    """Stream ``(ids, vectors)`` from one vector Parquet file or a list of shards, in order.

    ``ids`` is a pyarrow string array; ``vectors`` an ``(n, dim)`` array of ``dtype`` (``None``
    keeps the stored float16/float32). Every shard must have the same dimension (``dim`` if
    given); a bad or corrupt shard raises :class:`InputError` naming it.
    """
    shards = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    for path in shards:
        k, d, _ = vector_dim(path, key)
        if dim is None:
            dim = d
        elif d != dim:
            raise InputError(path, f"vectors have dimension {d}, expected {dim} (as the first shard)")
        for batch in schemas.iter_batches(path, batch_rows=batch_rows, columns=[k, "vector"]):
            ids = batch.column(k)
            if ids.null_count:
                raise InputError(path, f"{ids.null_count} null id(s) in column '{k}'")
            yield ids, _vectors(path, batch.column("vector"), d, dtype)


def load_vectors(
    paths: PathLike | Sequence[PathLike], key: str | None = None, dtype: type | None = np.float32
) -> tuple[list[str], np.ndarray]:
    """All ``(ids, vectors)`` of one vector Parquet file (or shards); for queries and tests."""
    ids: list[str] = []
    mats: list[np.ndarray] = []
    dim = None
    for batch_ids, vecs in iter_vector_batches(paths, key=key, dtype=dtype):
        ids.extend(batch_ids.to_pylist())
        mats.append(vecs)
        dim = vecs.shape[1]
    if not mats:
        shards = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
        dim = vector_dim(shards[0], key)[1] if shards else 0
        return ids, np.zeros((0, dim), dtype=dtype or np.float32)
    return ids, np.concatenate(mats)


# --------------------------------------------------------------------------- Faiss helpers


def _faiss():
    # Faiss's loader tries its AVX-512 and AVX2 builds in turn and logs each one that the wheel
    # lacks as "Could not load library ... ModuleNotFoundError" at INFO: a probe, not an error.
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    import faiss

    return faiss


def num_gpus() -> int:
    faiss = _faiss()
    try:
        return int(faiss.get_num_gpus())
    except AttributeError:  # a Faiss build without the GPU API
        return 0


def _set_threads(threads: int | None) -> None:
    if threads:
        _faiss().omp_set_num_threads(int(threads))


def _new_index(index_type: str, dim: int, n: int, hnsw_m: int, ivf_lists: int, pq_m: int):
    faiss = _faiss()
    if index_type == "flat":
        return faiss.IndexFlatIP(dim)
    if index_type == "hnsw":
        return faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
    if index_type == "ivfpq":
        if dim % pq_m:
            raise ValueError(f"pq_m={pq_m} must divide the vector dimension {dim}")
        # Faiss wants >= 39 training points per centroid; small corpora get fewer lists.
        nlist = max(1, min(ivf_lists, n // 39))
        # Likewise each PQ codebook of 2**nbits centroids: 8 bits unless the corpus is tiny.
        nbits = max(1, min(8, int(np.log2(max(n // 39, 1)))))
        if nlist != ivf_lists or nbits != 8:
            log.info("ivfpq: %d vectors -> %d lists (asked %d), %d bits per code", n, nlist, ivf_lists, nbits)
        quantizer = faiss.IndexFlatIP(dim)
        # Faiss's Python wrapper keeps ``quantizer`` alive as long as the index.
        return faiss.IndexIVFPQ(quantizer, dim, nlist, pq_m, nbits, faiss.METRIC_INNER_PRODUCT)
    raise ValueError(f"index_type must be one of {', '.join(INDEX_TYPES)}, not {index_type!r}")


def _flat_filler(index, n: int) -> Callable[[int, np.ndarray], None]:
    """Size a flat index's storage for its ``n`` vectors at once and return ``fill(row, vectors)``,
    which copies a batch into place (the caller sets ``ntotal`` when every row is filled).

    ``IndexFlat.add`` grows its storage by reallocation: it copies what it holds each time it
    doubles and holds old and new storage together meanwhile, so a flat index took up to twice its
    size at its peak (8.2 GB for 1M x 1024 float32 vectors, 4.1 GB) and several copies of it in
    time. Filled in place, the peak is the index and one batch.
    """
    size = n * index.code_size
    index.codes.resize(size)
    rows = _faiss().rev_swig_ptr(index.codes.data(), size).view(np.float32).reshape(n, index.d)

    def fill(row: int, vectors: np.ndarray) -> None:
        rows[row : row + len(vectors)] = vectors

    return fill


def _train_sample(shards: Sequence[PathLike], n: int, size: int, dim: int, seed: int = 0) -> np.ndarray:
    """A uniform sample of ``size`` vectors out of ``n``, read by streaming the shards."""
    rng = np.random.default_rng(seed)
    wanted = np.sort(rng.choice(n, size=min(size, n), replace=False))
    out = np.empty((len(wanted), dim), dtype=np.float32)
    start = filled = 0
    for _, vecs in iter_vector_batches(shards, key="docid", dim=dim):
        stop = start + len(vecs)
        lo, hi = np.searchsorted(wanted, [start, stop])
        out[filled : filled + hi - lo] = vecs[wanted[lo:hi] - start]
        filled += hi - lo
        start = stop
    if filled != len(wanted):
        raise MiraclEvalError(f"the shards changed while sampling ({filled} of {len(wanted)} vectors read)")
    return out


def build_dense_index(
    shards: Sequence[PathLike],
    index_out: PathLike,
    docids_out: PathLike,
    index_type: str = "flat",
    hnsw_m: int = 32,
    ivf_lists: int = 4096,
    pq_m: int = 64,
    use_gpu: bool = True,
    threads: int = 1,
    train_size: int | None = None,
    hnsw_ef_construction: int = 200,
) -> int:
    """Build a Faiss inner-product index over the passage vector shards; returns #vectors.

    ``index_out`` (a Faiss index file) and ``docids_out`` (Parquet, one ``docid`` column in
    index order) both appear atomically. ``ivfpq`` is trained on a uniform sample of
    ``train_size`` vectors (default ``max(64 * lists, 10_000)``); its coarse k-means runs on
    the GPUs when there are any. Flat and HNSW building is CPU work (adding vectors).
    """
    shards = list(shards)
    if not shards:
        raise ValueError("no vector shards given")
    if index_type not in INDEX_TYPES:
        raise ValueError(f"index_type must be one of {', '.join(INDEX_TYPES)}, not {index_type!r}")
    faiss = _faiss()
    _set_threads(threads)
    # Check every shard's schema and dimension before any work.
    dims = {}
    for path in shards:
        _, dim, _ = vector_dim(path, "docid")
        dims[str(path)] = dim
    dim = dims[str(shards[0])]
    for path in shards:
        if dims[str(path)] != dim:
            raise InputError(path, f"vectors have dimension {dims[str(path)]}, expected {dim} (as {shards[0]})")
    n = sum(schemas.count_rows(p) for p in shards)
    if n == 0:
        raise InputError(shards[0], "the vector shards hold no vectors")

    index = _new_index(index_type, dim, n, hnsw_m, ivf_lists, pq_m)
    if index_type == "hnsw":
        index.hnsw.efConstruction = hnsw_ef_construction
    if index_type == "ivfpq":
        size = train_size or max(64 * index.nlist, 10_000)
        sample = _train_sample(shards, n, size, dim)
        gpus = num_gpus() if use_gpu else 0
        clustering = None
        if gpus:
            log.info("ivfpq: training the coarse quantizer on %d GPU(s)", gpus)
            clustering = faiss.index_cpu_to_all_gpus(faiss.IndexFlatIP(dim))
            index.clustering_index = clustering
        else:
            log.info("ivfpq: training on the CPU")
        index.train(sample)
        index.clustering_index = None
        del sample, clustering
    elif use_gpu and num_gpus():
        log.info("%s index: built on the CPU (nothing to gain from a GPU)", index_type)

    add = _flat_filler(index, n) if index_type == "flat" else None
    added = 0
    with (
        schemas.StreamWriter(docids_out, DOCIDS) as docids,
        atomic_output(index_out) as tmp,
    ):
        for ids, vecs in iter_vector_batches(shards, key="docid", dim=dim, batch_rows=ADD_BATCH):
            if added + len(vecs) > n:
                raise MiraclEvalError(f"the shards hold more than the {n} vectors their metadata says")
            if add is not None:
                add(added, vecs)
            else:
                index.add(np.ascontiguousarray(vecs, dtype=np.float32))
            docids.write(pa.table({"docid": ids}, schema=DOCIDS))
            added += len(vecs)
            log.debug("added %d of %d vectors", added, n)
        if add is not None and added == n:
            index.ntotal = n
        if added != n or index.ntotal != n:
            raise MiraclEvalError(f"indexed {index.ntotal} vectors, the shards' metadata says {n}")
        faiss.write_index(index, str(tmp))
    log.info("%s index of %d vectors (dim %d) -> %s", index_type, n, dim, index_out)
    return n


# --------------------------------------------------------------------------- ranking


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


# --------------------------------------------------------------------------- search


def _hits_table(qids: pa.Array, scores: np.ndarray, labels: np.ndarray, docids: pa.Array, k: int) -> pa.Table:
    """The run rows of a batch of Faiss results (``(queries, k)`` scores and labels, -1 for none).

    Faiss returns each query's hits by score, descending. When every query has ``k`` hits and no two
    of them tie, that already is :func:`rank_table`'s order, and the table is assembled as it is;
    otherwise :func:`rank_table` sorts (ties by docid).
    """
    valid = labels >= 0
    if not (valid.all() and (scores[:, 1:] < scores[:, :-1]).all()):
        qpos = np.nonzero(valid)[0]
        return rank_table(qids, qpos, docids.take(pa.array(labels[valid], pa.int64())), scores[valid], depth=k)
    n, width = labels.shape
    return pa.table(
        {
            "qid": qids.take(pa.array(np.repeat(np.arange(n), width))),
            "docid": docids.take(pa.array(labels.ravel(), pa.int64())),
            "rank": pa.array(np.tile(np.arange(1, width + 1, dtype=np.int32), n)),
            "score": pa.array(scores.ravel().astype(np.float64)),
        },
        schema=schemas.RUN,
    )


def _read_docids(path: PathLike) -> pa.Array:
    table = schemas.read_table(path, DOCIDS)
    docids = table.column("docid").combine_chunks()
    if docids.null_count:
        raise InputError(path, "null docid(s)")
    return docids


def _to_gpus(index, gpus: int):
    faiss = _faiss()
    co = faiss.GpuMultipleClonerOptions()
    co.shard = gpus > 1  # split the vectors over the GPUs: more memory, same results
    return faiss.index_cpu_to_all_gpus(index, co=co)


def _prepare_searcher(index, k: int, use_gpu: bool, nprobe: int, ef_search: int):
    faiss = _faiss()
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        ivf.nprobe = min(nprobe, ivf.nlist)
    if isinstance(index, faiss.IndexHNSW):
        index.hnsw.efSearch = max(ef_search, k)
    gpus = num_gpus() if use_gpu else 0
    if gpus and isinstance(index, faiss.IndexHNSW):
        log.info("faiss: HNSW searches on the CPU (no GPU HNSW in Faiss)")
    elif gpus and k > GPU_MAX_K:
        log.info("faiss: k=%d exceeds the GPU limit %d; searching on the CPU", k, GPU_MAX_K)
    elif gpus:
        try:
            searcher = _to_gpus(index, gpus)
        except RuntimeError as err:  # e.g. an IVF-PQ layout the GPU code does not support
            log.warning("faiss: cannot move the index to the GPU (%s); searching on the CPU", err)
        else:
            if ivf is not None:
                faiss.GpuParameterSpace().set_index_parameter(searcher, "nprobe", ivf.nprobe)
            log.info("faiss: searching on %d GPU(s)", gpus)
            return searcher
    log.info("faiss: searching on the CPU (%d thread(s))", faiss.omp_get_max_threads())
    return index


def dense_search(
    index_path: PathLike,
    docids_path: PathLike,
    query_vectors_parquet: PathLike,
    run_parquet: PathLike,
    run_trec: PathLike,
    k: int = 1000,
    use_gpu: bool = True,
    batch: int = DENSE_SEARCH_BATCH,
    nprobe: int = 64,
    ef_search: int = 1024,
    qid_subset: Iterable[str] | None = None,
    threads: int | None = None,
    mmap: bool = False,
    tag: str = "dense",
) -> int:
    """Search every query vector (or those in ``qid_subset``) and write the run; returns #queries.

    Hits with the label -1 (fewer than ``k`` neighbours found) are left out. ``mmap`` maps a
    flat index's vectors instead of reading them into memory (page cache instead of RAM; the
    GPU copy is made from the mapping).
    """
    faiss = _faiss()
    _set_threads(threads)
    docids = _read_docids(docids_path)
    flags = faiss.IO_FLAG_MMAP_IFC if mmap else 0
    try:
        index = faiss.read_index(str(index_path), flags) if flags else faiss.read_index(str(index_path))
    except RuntimeError as err:
        raise InputError(index_path, f"cannot read Faiss index ({str(err).strip().splitlines()[-1]})") from err
    if index.ntotal != len(docids):
        raise InputError(docids_path, f"{len(docids)} docids for an index of {index.ntotal} vectors")
    _, qdim, _ = vector_dim(query_vectors_parquet, "qid")
    if qdim != index.d:
        raise InputError(query_vectors_parquet, f"query vectors have dimension {qdim}, the index {index.d}")
    searcher = _prepare_searcher(index, k, use_gpu, nprobe, ef_search)
    subset = pa.array(sorted(set(qid_subset)), pa.string()) if qid_subset is not None else None
    n = 0
    with RunWriter(run_parquet, run_trec, tag) as writer:
        for qids, vecs in iter_vector_batches(query_vectors_parquet, key="qid", batch_rows=batch):
            if subset is not None:
                keep = pc.is_in(qids, value_set=subset).to_numpy(zero_copy_only=False)
                qids, vecs = qids.filter(pa.array(keep)), vecs[keep]
            if len(qids) == 0:
                continue
            scores, labels = searcher.search(np.ascontiguousarray(vecs, dtype=np.float32), k)
            writer.write(_hits_table(qids, scores, labels, docids, k))
            n += len(qids)
    log.info("dense search: %d queries -> %s", n, run_parquet)
    return n


__all__ = [
    "DOCIDS",
    "INDEX_TYPES",
    "build_dense_index",
    "dense_search",
    "iter_vector_batches",
    "load_vectors",
    "num_gpus",
    "rank_table",
    "vector_dim",
]
