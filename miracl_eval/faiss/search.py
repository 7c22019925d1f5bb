"""Dense search with Faiss (rule ``dense_search``): top-``hits`` by inner product, in query batches.

Search runs on the GPUs when the job holds one, Faiss has GPU support (and ``use_gpu``), else on the CPU. Hits are ranked by
score, ties by docid, exactly as :func:`miracl_eval.runs.rank_table` does; a docid equal to the qid
is never dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from miracl_eval import schemas
from miracl_eval.encoders.outputs import iter_vector_batches, vector_dim
from miracl_eval.errors import InputError
from miracl_eval.faiss.index import DOCIDS, load_faiss, set_threads, usable_gpus
from miracl_eval.runs import RunWriter, rank_table
from miracl_eval.schemas import DENSE_SEARCH_BATCH
from miracl_eval.types import PathLike

log = logging.getLogger(__name__)

#: what a preload server imports for this stage (:mod:`miracl_eval.jobs.preload`)
PRELOAD = ("faiss",)


# Faiss GPU k-selection handles at most this many neighbours per query.
GPU_MAX_K = 2048


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
    faiss = load_faiss()
    co = faiss.GpuMultipleClonerOptions()
    co.shard = gpus > 1  # split the vectors over the GPUs: more memory, same results
    return faiss.index_cpu_to_all_gpus(index, co=co)


def _prepare_searcher(index, k: int, use_gpu: bool, nprobe: int, ef_search: int):
    faiss = load_faiss()
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        ivf.nprobe = min(nprobe, ivf.nlist)
    if isinstance(index, faiss.IndexHNSW):
        index.hnsw.efSearch = max(ef_search, k)
    gpus = usable_gpus(use_gpu)
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
    faiss = load_faiss()
    set_threads(threads)
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
