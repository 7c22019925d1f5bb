"""Retrieval: BM25 and impact search over Lucene indexes (pyserini), streamed in query chunks.

Queries are read and searched in chunks, and each chunk's hits are appended to the run, so a
run over 156k queries never holds more than one chunk in memory.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from . import schemas
from .dense import rank_table
from .indexing import index_analysis
from .java import ensure_jvm
from .lucene import BM25Searcher, Hits, ImpactSearcher
from .runs import RunWriter

QUERY_CHUNK = 2_000
#: Java heap of a search: Anserini holds a chunk's hits (each with its stored document) until the chunk is
#: done. 1,000 queries x 1,000 hits search in 512 MB and fail in 256 MB (each search thread's
#: OutOfMemoryError comes back as "queryCount = 1000 is not equal to completedTaskCount = 974"); Java's
#: default heap, a quarter of a SLURM job's memory limit, is too small for a chunk of 2,000 queries.
HEAP_BASE_MB = 256
HEAP_PER_HIT_KB = 0.5


def search_heap(k: int, chunk: int = QUERY_CHUNK) -> str:
    """The ``-Xmx`` of a search of ``chunk`` queries at a time, ``k`` hits each."""
    return f"{HEAP_BASE_MB + math.ceil(chunk * k * HEAP_PER_HIT_KB / 1024)}m"


def iter_query_chunks(
    queries: str | os.PathLike[str], chunk: int = QUERY_CHUNK
) -> Iterator[tuple[list[str], list[str]]]:
    for batch in schemas.iter_batches(queries, schemas.QUERIES, batch_rows=chunk):
        yield batch.column("qid").to_pylist(), batch.column("query").to_pylist()


def _hits_table(qids: list[str], results: Hits, k: int, integer_scores: bool = False) -> pa.Table:
    """The run rows of a chunk: as :func:`miracl_eval.runs.rank_hits` orders them, sorted column-wise.

    batch_search returns ``{qid: [(docid, score)]}``; queries without hits are absent from the run.
    ``integer_scores`` rounds each score to the nearest integer (half to even).
    """
    per_query = [results.get(q, []) for q in qids]
    qpos = np.repeat(np.arange(len(qids)), [len(h) for h in per_query])
    docids = pa.array([d for hits in per_query for d, _ in hits], pa.string())
    scores = np.array([s for hits in per_query for _, s in hits], dtype=np.float64)
    if integer_scores:
        scores = np.rint(scores)
    return rank_table(qids, qpos, docids, scores, depth=k)


def bm25_search(
    index: str | os.PathLike[str],
    queries: str | os.PathLike[str],
    run_parquet: str | os.PathLike[str],
    run_trec: str | os.PathLike[str],
    k1: float = 0.9,
    b: float = 0.4,
    k: int = 1000,
    threads: int = 1,
    tag: str = "bm25",
) -> int:
    """Search every query of ``queries.parquet`` with BM25 and write the run. Returns #queries.

    Queries are analysed as the index's passages were (see :func:`indexing.index_analysis`).
    """
    ensure_jvm(search_heap(k))
    searcher = BM25Searcher(index, k1, b)
    analysis = index_analysis(index)
    analysis.configure_searcher(searcher)
    n = 0
    with RunWriter(run_parquet, run_trec, tag) as writer:
        for qids, texts in iter_query_chunks(queries):
            results = searcher.batch_search(analysis.prepare_queries(texts), qids, k=k, threads=threads)
            writer.write(_hits_table(qids, results, k))
            n += len(qids)
    searcher.close()
    return n


def impact_search(
    index: str | os.PathLike[str],
    queries: Iterator[tuple[list[str], list[dict[str, int]]]],
    run_parquet: str | os.PathLike[str],
    run_trec: str | os.PathLike[str],
    k: int = 1000,
    threads: int = 1,
    tag: str = "sparse",
) -> int:
    """Search queries given as ``{term: integer weight}`` in an impact index.

    Scores are exact integer dot products. Anserini lowers each tied score by 1e-6 per earlier
    tie (to order ties); rounding restores the true score, and ties are ordered by docid, as
    Anserini orders them.
    """
    ensure_jvm(search_heap(k))
    searcher = ImpactSearcher(index)
    n = 0
    with RunWriter(run_parquet, run_trec, tag) as writer:
        for qids, vectors in queries:
            results = searcher.batch_search(vectors, qids, k=k, threads=threads)
            writer.write(_hits_table(qids, results, k, integer_scores=True))
            n += len(qids)
    searcher.close()
    return n
