"""Dense indexes with Faiss (rule ``dense_index``), built from a model's vector shards.

The index is built shard by shard (the vectors are read by :mod:`miracl_eval.encoders.outputs`),
so the corpus is never held in Python lists, and it is written atomically together with the docids
in index order. The default index is exact inner product (``IndexFlatIP``), as in the BGE-M3
paper; HNSW and IVF-PQ are approximate alternatives. A flat index's storage is sized once and
filled in place (``IndexFlat.add`` reallocates as it grows and peaks at twice the index).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from miracl_eval import schemas
from miracl_eval.atomic import atomic_output
from miracl_eval.encoders.outputs import iter_vector_batches, vector_dim
from miracl_eval.errors import InputError, MiraclEvalError
from miracl_eval.jobs.devices import held_gpus
from miracl_eval.types import PathLike

log = logging.getLogger(__name__)

#: what a preload server imports for this stage (:mod:`miracl_eval.jobs.preload`)
PRELOAD = ("faiss",)


INDEX_TYPES = ("flat", "hnsw", "ivfpq")


DOCIDS = pa.schema([("docid", pa.string())])


# Vectors per Faiss ``add`` call while building (bounded memory for large shards).
ADD_BATCH = 65_536


def load_faiss():
    # Faiss's loader tries its AVX-512 and AVX2 builds in turn and logs each one that the wheel
    # lacks as "Could not load library ... ModuleNotFoundError" at INFO: a probe, not an error.
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    import faiss

    return faiss


def usable_gpus(use_gpu: bool) -> int:
    """The GPUs that a Faiss job may use: none unless ``use_gpu`` and the job holds a GPU (leased, or
    given by SLURM: :func:`miracl_eval.jobs.devices.held_gpus`), then those Faiss sees."""
    if not use_gpu or held_gpus() is None:
        return 0
    return num_gpus()


def num_gpus() -> int:
    faiss = load_faiss()
    try:
        return int(faiss.get_num_gpus())
    except AttributeError:  # a Faiss build without the GPU API
        return 0


def set_threads(threads: int | None) -> None:
    if threads:
        load_faiss().omp_set_num_threads(int(threads))


def _new_index(index_type: str, dim: int, n: int, hnsw_m: int, ivf_lists: int, pq_m: int):
    faiss = load_faiss()
    if index_type == "flat":
        return faiss.IndexFlatIP(dim)
    if index_type == "hnsw":
        return faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
    if index_type == "ivfpq":
        if dim % pq_m:
            raise ValueError(f"pq_m={pq_m} must divide the vector dimension {dim}")
        nlist = schemas.ivf_list_count(ivf_lists, n)
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
    rows = load_faiss().rev_swig_ptr(index.codes.data(), size).view(np.float32).reshape(n, index.d)

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
    faiss = load_faiss()
    set_threads(threads)
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
        gpus = usable_gpus(use_gpu)
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
    elif usable_gpus(use_gpu):
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
