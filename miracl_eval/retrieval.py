"""Retrieval: BM25 and impact search over Lucene indexes (pyserini), streamed in query chunks.

Queries are read and searched in chunks, and each chunk's hits are appended to the run, so a
run over 156k queries never holds more than one chunk in memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pyarrow as pa

from . import schemas
from .indexing import index_analysis
from .lucene import BM25Searcher, Hits, ImpactSearcher
from .runs import RunWriter, rank_hits

QUERY_CHUNK = 2_000


def iter_query_chunks(
    queries: str | os.PathLike[str], chunk: int = QUERY_CHUNK
) -> Iterator[tuple[list[str], list[str]]]:
    for batch in schemas.iter_batches(queries, schemas.QUERIES, batch_rows=chunk):
        yield batch.column("qid").to_pylist(), batch.column("query").to_pylist()


def _hits_table(qids: list[str], results: Hits, k: int) -> pa.Table:
    # batch_search returns {qid: [(docid, score)]}; queries without hits are absent from the run.
    return rank_hits({q: results.get(q, []) for q in qids}, depth=k)


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
    tie (to order ties); rounding restores the true score, and :func:`rank_hits` orders ties by
    docid, as Anserini does.
    """
    searcher = ImpactSearcher(index)
    n = 0
    with RunWriter(run_parquet, run_trec, tag) as writer:
        for qids, vectors in queries:
            results = searcher.batch_search(vectors, qids, k=k, threads=threads)
            rounded = {q: [(d, float(round(s))) for d, s in hits] for q, hits in results.items()}
            writer.write(_hits_table(qids, rounded, k))
            n += len(qids)
    searcher.close()
    return n
