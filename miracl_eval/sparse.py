"""BGE-M3 lexical weights as a Lucene impact index (Anserini ``JsonVectorCollection``).

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
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import retrieval, schemas
from .errors import InputError
from .indexing import IndexResult, build_impact_index, json_strings
from .retrieval import impact_search

log = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]
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


def sparse_dot(q: dict[int, float], p: dict[int, float]) -> float:
    """Exact float dot product of two lexical weight vectors (BGE-M3's lexical matching score)."""
    if len(p) < len(q):
        q, p = p, q
    return float(sum(float(w) * float(p[t]) for t, w in q.items() if t in p))


# --------------------------------------------------------------------------- reading weights


class SparseBatch:
    """A batch of lexical weight vectors in CSR form: row ``i`` is ``tokens[indptr[i]:indptr[i+1]]``."""

    __slots__ = ("ids", "indptr", "tokens", "weights")

    def __init__(self, ids: pa.Array, indptr: np.ndarray, tokens: np.ndarray, weights: np.ndarray) -> None:
        self.ids = ids
        self.indptr = indptr
        self.tokens = tokens
        self.weights = weights

    def __len__(self) -> int:
        return len(self.ids)

    def row(self, i: int) -> dict[int, float]:
        lo, hi = self.indptr[i], self.indptr[i + 1]
        return dict(zip(self.tokens[lo:hi].tolist(), self.weights[lo:hi].tolist(), strict=True))


def _list_values(path: PathLike, col: pa.Array, name: str) -> tuple[np.ndarray, np.ndarray]:
    if col.null_count:
        raise InputError(path, f"null list(s) in column '{name}'")
    offsets = col.offsets.to_numpy()
    values = col.flatten()
    if values.null_count:
        raise InputError(path, f"null value(s) in column '{name}'")
    return offsets - offsets[0], values.to_numpy(zero_copy_only=False)


def iter_sparse_batches(
    paths: PathLike | Sequence[PathLike],
    key: str | None = None,
    batch_rows: int = schemas.BATCH_ROWS,
) -> Iterator[SparseBatch]:
    """Stream lexical weights from one Parquet file or a list of shards, validated.

    ``key`` is the id column (``docid`` or ``qid``; found from the schema when ``None``).
    Rows whose token and weight lists differ in length, repeat a token or hold a negative or
    non-finite weight raise :class:`InputError` naming the file and record.
    """
    shards = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    for path in shards:
        try:
            names = pq.read_schema(path).names
        except (pa.ArrowException, OSError) as err:
            raise InputError(path, f"cannot read Parquet file ({err})") from err
        k = key or next((c for c in ("docid", "qid") if c in names), None)
        if k is None or k not in names:
            raise InputError(path, f"not a lexical weights file: no '{key or 'docid/qid'}' column")
        row0 = 0
        for batch in schemas.iter_batches(path, batch_rows=batch_rows, columns=[k, "token_ids", "weights"]):
            ids = batch.column(k)
            if ids.null_count:
                raise InputError(path, f"null id(s) in column '{k}'")
            t_off, tokens = _list_values(path, batch.column("token_ids"), "token_ids")
            w_off, weights = _list_values(path, batch.column("weights"), "weights")
            bad = np.flatnonzero(np.diff(t_off) != np.diff(w_off))
            if len(bad):
                raise InputError(
                    path, f"record {row0 + bad[0] + 1} ({ids[bad[0]]}): token_ids and weights differ in length"
                )
            weights = weights.astype(np.float32, copy=False)
            _validate(path, row0, ids, t_off, tokens, weights)
            yield SparseBatch(ids, t_off, tokens.astype(np.int64, copy=False), weights)
            row0 += len(ids)


def _validate(
    path: PathLike, row0: int, ids: pa.Array, indptr: np.ndarray, tokens: np.ndarray, weights: np.ndarray
) -> None:
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    bad = ~np.isfinite(weights) | (weights < 0)
    if bad.any():
        r = int(rows[np.argmax(bad)])
        raise InputError(path, f"record {row0 + r + 1} ({ids[r]}): negative or non-finite lexical weight")
    if len(tokens) and tokens.min() < 0:
        r = int(rows[np.argmax(tokens < 0)])
        raise InputError(path, f"record {row0 + r + 1} ({ids[r]}): negative token id")
    # Rows whose tokens ascend strictly (as the encoders write them) repeat none; others are sorted.
    if len(tokens) > 1 and not (tokens[1:] > tokens[:-1])[rows[1:] == rows[:-1]].all():
        keys = np.sort((rows.astype(np.int64) << 32) | tokens.astype(np.int64))  # (row, token), one int each
        dup = np.flatnonzero(keys[1:] == keys[:-1])
        if len(dup):
            r = int(keys[dup[0]] >> 32)
            raise InputError(path, f"record {row0 + r + 1} ({ids[r]}): a token id occurs twice")


def load_sparse(paths: PathLike | Sequence[PathLike], key: str | None = None) -> dict[str, dict[int, float]]:
    """All lexical weight vectors of a (small) file as ``{id: {token_id: weight}}``."""
    out: dict[str, dict[int, float]] = {}
    for batch in iter_sparse_batches(paths, key):
        for i, ident in enumerate(batch.ids.to_pylist()):
            out[ident] = batch.row(i)
    return out


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


def query_string(weights: dict[int, float], factor: float = FACTOR, rounding: str = "ceil") -> str:
    """Pretokenized query: each term repeated its integer weight times, separated by spaces."""
    return " ".join(
        " ".join([term(t)] * q) for t, w in sorted(weights.items()) if (q := quantize(w, factor, rounding)) > 0
    )


# --------------------------------------------------------------------------- indexing


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

    result = build_impact_index(chunks, index_out, threads=threads, log_path=log_path, heap=heap)
    log.info("impact index of %d passages -> %s", result.documents, index_out)
    return result


# --------------------------------------------------------------------------- search


def iter_query_vectors(
    query_sparse_parquet: PathLike,
    factor: float = FACTOR,
    rounding: str = "ceil",
    chunk: int = retrieval.QUERY_CHUNK,
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
    filter terms by idf), and :func:`retrieval.impact_search` rounds Anserini's tie offsets away.
    """
    n = impact_search(
        index, iter_query_vectors(query_sparse_parquet, factor, rounding), run_parquet, run_trec, k, threads, tag
    )
    log.info("sparse search: %d queries -> %s", n, run_parquet)
    return n


__all__ = [
    "FACTOR",
    "SparseBatch",
    "build_sparse_index",
    "iter_query_vectors",
    "iter_sparse_batches",
    "load_sparse",
    "quantize",
    "quantize_array",
    "query_string",
    "sparse_dot",
    "sparse_search",
    "term",
]
