"""Learned sparse retrieval (rules ``sparse_index``, ``sparse_search``): any model's lexical weights
(BGE-M3, SPLADE) as a Lucene impact index (Anserini ``JsonVectorCollection``), searched exactly.

Each passage's lexical weights ``{token_id: weight}`` become integer impacts
``ceil(weight * factor)`` (factor 100, the BGE-M3 / pyserini convention) under the term
``str(token_id)``; a query is the map of its terms to their integer weights (or, for pyserini's
string interface, each term repeated its weight times). Anserini's impact searcher then scores
a passage by the exact dot product of the integer weights.

Two details of pyserini/Anserini that this module works around:

* Anserini does not index a document with an empty vector (it counts it as "empty"), so
  passages whose weights all quantize to 0 are left out of the index (they could only ever
  score 0) and the index's document count is checked against the non-empty passages.
* pyserini's ``LuceneImpactSearcher`` drops every query term whose ``log(N / df)`` is not above
  its ``min_idf`` (default 0), i.e. terms that occur in *every* passage, which breaks the dot
  product; we hand Anserini the term-weight maps directly, so every query term counts.
* Anserini's ``ScoreTiesAdjusterReranker`` lowers the scores of tied hits by 1e-6 per earlier
  tie (in float32), so a tie at 64 comes back as 63.999996. The true scores are integers (dot
  products of integer impacts, exact in float32 below 2**24), so the run's scores are the
  Lucene scores rounded to the nearest integer; ties are then ordered by docid, as Anserini
  orders them.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from miracl_eval import schemas
from miracl_eval.encoders.outputs import SparseBatch, iter_sparse_batches
from miracl_eval.errors import InputError
from miracl_eval.lucene.anserini import (
    ImpactSearcher,
    IndexResult,
    build_index,
    hits_table,
    index_documents,
    json_strings,
    log_long_queries,
    search_heap,
    write_collection,
)
from miracl_eval.lucene.jvm import ensure_jvm, job_options
from miracl_eval.runs import RunWriter
from miracl_eval.types import PathLike

log = logging.getLogger(__name__)


FACTOR = 100


ROUNDINGS = ("ceil", "round")


def quantize(weight: float, factor: float = FACTOR, rounding: str = "ceil") -> int:
    """Integer impact of a lexical weight: ``ceil(weight * factor)`` (BGE-M3's, the default) or
    ``round(weight * factor)`` (half to even, as Python's ``round``; pyserini's SPLADE impacts are
    ``round(w / 5 * 256)``, i.e. factor 51.2). 0 means: drop the term."""
    scaled = float(weight) * factor
    if rounding == "ceil":
        return math.ceil(scaled)
    if rounding == "round":
        return round(scaled)
    raise ValueError(f"rounding must be one of {ROUNDINGS}, not {rounding!r}")


def quantize_array(weights: np.ndarray, factor: float = FACTOR, rounding: str = "ceil") -> np.ndarray:
    """Vectorised :func:`quantize` (computed in float64, so identical to it)."""
    scaled = np.asarray(weights, dtype=np.float64) * factor
    if rounding == "ceil":
        return np.ceil(scaled).astype(np.int64)
    if rounding == "round":
        return np.rint(scaled).astype(np.int64)
    raise ValueError(f"rounding must be one of {ROUNDINGS}, not {rounding!r}")


def term(token_id: int) -> str:
    """The index term of a token id."""
    return str(int(token_id))


def _impact_vectors(batch: SparseBatch, factor: float, rounding: str) -> Iterator[tuple[str, dict[str, int]]]:
    """``(id, {term: impact})`` per row, terms whose impact is 0 dropped (may leave it empty)."""
    impacts = quantize_array(batch.weights, factor, rounding)
    for i, ident in enumerate(batch.ids.to_pylist()):
        lo, hi = batch.indptr[i], batch.indptr[i + 1]
        yield (
            ident,
            {term(t): q for t, q in zip(batch.tokens[lo:hi].tolist(), impacts[lo:hi].tolist(), strict=True) if q > 0},
        )


def _impact_lines(batch: SparseBatch, factor: float, rounding: str) -> pa.Array:
    """``JsonVectorCollection`` lines of the batch's passages that keep a term after quantization:
    ``{"id": "...", "vector": {"17": 30, ...}}`` (terms whose impact is 0 dropped, in stored order), as
    :func:`json.dumps` writes them, built column-wise."""
    impacts = quantize_array(batch.weights, factor, rounding)
    rows = np.repeat(np.arange(len(batch)), np.diff(batch.indptr))
    kept = impacts > 0
    counts = np.bincount(rows[kept], minlength=len(batch))
    entries = pc.binary_join_element_wise(
        '"', pa.array(batch.tokens[kept]).cast(pa.string()), '": ', pa.array(impacts[kept]).cast(pa.string()), ""
    )
    offsets = pa.array(np.r_[0, np.cumsum(counts[counts > 0])], pa.int32())
    vectors = pc.binary_join(pa.ListArray.from_arrays(offsets, entries), ", ")
    ids = json_strings(batch.ids.filter(pa.array(counts > 0)))
    return pc.binary_join_element_wise('{"id": ', ids, ', "vector": {', vectors, "}}\n", "")


def build_sparse_index(
    shards: Sequence[PathLike],
    index_out: PathLike,
    factor: float = FACTOR,
    rounding: str = "ceil",
    threads: int = 1,
    log_path: PathLike | None = None,
    heap: str = "4g",
) -> IndexResult:
    """Index the passages' lexical weights (``schemas.SPARSE`` shards) as a Lucene impact index.

    Passages left without any term after quantization are not indexed (Anserini skips empty
    vectors); the index must hold exactly the other passages.
    """
    shards = list(shards)
    if not shards:
        raise ValueError("no lexical weight shards given")

    def chunks() -> Iterator[pa.Array]:
        """The non-empty passages' lines; checked once all are read, before Anserini starts."""
        kept = total = 0
        for batch in iter_sparse_batches(shards, key="docid"):
            total += len(batch)
            lines = _impact_lines(batch, factor, rounding)
            kept += len(lines)
            yield lines
        if kept == 0:
            raise InputError(shards[0], "no passage has a lexical weight that survives quantization")
        if kept < total:
            log.warning("%d of %d passages have no lexical weight after quantization; not indexed", total - kept, total)

    total = sum(schemas.count_rows(shard) for shard in shards)
    result = build_impact_index(chunks, index_out, threads=threads, log_path=log_path, heap=heap, total=total)
    log.info("impact index of %d passages -> %s", result.documents, index_out)
    return result


def iter_query_vectors(
    query_sparse_parquet: PathLike,
    factor: float = FACTOR,
    rounding: str = "ceil",
    chunk: int = schemas.QUERY_CHUNK,
) -> Iterator[tuple[list[str], list[dict[str, int]]]]:
    """``(qids, [{term: impact}])`` in chunks; queries without any term are left out (no hits)."""
    for batch in iter_sparse_batches(query_sparse_parquet, key="qid", batch_rows=chunk):
        qids, vectors = [], []
        for qid, vector in _impact_vectors(batch, factor, rounding):
            if vector:
                qids.append(qid)
                vectors.append(vector)
        if qids:
            yield qids, vectors


def sparse_search(
    index: PathLike,
    query_sparse_parquet: PathLike,
    run_parquet: PathLike,
    run_trec: PathLike,
    factor: float = FACTOR,
    rounding: str = "ceil",
    k: int = 1000,
    threads: int = 1,
    tag: str = "sparse",
) -> int:
    """Search every query's lexical weights in the impact index and write the run; returns #queries.

    Scores are the exact dot products of the integer impacts of query and passage: queries go to
    Anserini as ``{term: weight}`` maps (no term is dropped, unlike pyserini's string queries, which
    filter terms by idf), and :func:`impact_search` rounds Anserini's tie offsets away.
    """
    vectors = iter_query_vectors(query_sparse_parquet, factor, rounding)
    n = impact_search(index, vectors, run_parquet, run_trec, k, threads, tag, source=query_sparse_parquet)
    log.info("sparse search: %d queries -> %s", n, run_parquet)
    return n


def build_impact_index(
    chunks: Callable[[], Iterator[pa.Array]],
    output: str | os.PathLike[str],
    threads: int = 1,
    log_path: str | os.PathLike[str] | None = None,
    heap: str = "4g",
    total: int | None = None,
) -> IndexResult:
    """Index integer term weights as a Lucene impact index, from chunks of ``JsonVectorCollection``
    lines (``{"id": ..., "vector": {term: weight}}`` and a newline each, as string arrays); ``total``:
    the passages expected (for the progress lines).

    The index must hold as many documents as ``chunks`` yields lines.
    """

    def args(inp: Path, index: Path) -> list[str]:
        return [
            "-collection", "JsonVectorCollection", "-input", str(inp), "-index", str(index),
            "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads),
            "-impact", "-pretokenized",
        ]  # fmt: skip

    return build_index(output, lambda d: write_collection(chunks(), d, threads, total), args, log_path, heap)


def impact_search(
    index: str | os.PathLike[str],
    queries: Iterator[tuple[list[str], list[dict[str, int]]]],
    run_parquet: str | os.PathLike[str],
    run_trec: str | os.PathLike[str],
    k: int = 1000,
    threads: int = 1,
    tag: str = "sparse",
    source: str | os.PathLike[str] = "queries",
) -> int:
    """Search queries given as ``{term: integer weight}`` in an impact index (``source``: where they
    come from, for the log).

    Scores are exact integer dot products. Anserini lowers each tied score by 1e-6 per earlier
    tie (to order ties); rounding restores the true score, and ties are ordered by docid, as
    Anserini orders them.
    """
    ensure_jvm(search_heap(k), job_options(index_documents(index)))
    searcher = ImpactSearcher(index)
    n = 0
    with RunWriter(run_parquet, run_trec, tag) as writer:
        for qids, vectors in queries:
            log_long_queries(source, qids, vectors)
            results = searcher.batch_search(vectors, qids, k=k, threads=threads)
            writer.write(hits_table(qids, results, k, integer_scores=True))
            n += len(qids)
    searcher.close()
    return n
