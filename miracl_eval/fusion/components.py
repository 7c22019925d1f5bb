"""Rules ``union_components`` and ``rerank_components``: the component scores of a query chunk's candidates.

Two candidate lists per query, as FlagEmbedding's MIRACL scripts use them:

* ``union``: the union of the dense and sparse top-``hits`` lists (for ``dense+sparse``);
* ``rerank``: the dense top-``rerank_depth`` (for ``multivec`` and ``all``).

Every candidate gets every component computed exactly. The union's (a CPU job): dense from the
stored vectors, sparse from the stored lexical weights (unquantized), read from the row groups its
candidates live in. The rerank's: all three from one encoding of each candidate passage with the
queries' stored outputs (:mod:`miracl_eval.fusion.rerank`; token-level states are never stored).
Query chunks make the rerank of 156k MessIRve queries a set of independent jobs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any, TypedDict

import pyarrow as pa
import pyarrow.compute as pc

from miracl_eval import schemas
from miracl_eval.encoders import PRELOAD_MODULES
from miracl_eval.fusion.candidates import PAIRS, candidate_union, dense_candidates
from miracl_eval.fusion.rerank import one_pass_scores
from miracl_eval.fusion.scores import (
    SparseLookup,
    VectorLookup,
    VectorShards,
    WeightShards,
    components_table,
    score_components,
)
from miracl_eval.fusion.weighted import COMPONENTS
from miracl_eval.inputs.chunks import query_chunk_ids
from miracl_eval.inputs.passages import CorpusRows
from miracl_eval.jobs.progress import Progress
from miracl_eval.runs import run_rows
from miracl_eval.types import PathLike

log = logging.getLogger(__name__)
MB = 1 << 20

#: imported once by a preload server before it forks the multi-vector rerank jobs (:mod:`.preload`)
PRELOAD = ("miracl_eval.encoders.encode", "miracl_eval.encoders.bge_m3", *PRELOAD_MODULES)


def score_candidates(
    pairs: pa.Table,
    query_dense: PathLike,
    query_sparse: PathLike,
    passage_dense: Sequence[PathLike],
    passage_sparse: Sequence[PathLike],
    corpus: PathLike | None = None,
) -> pa.Table:
    """Exact dense and sparse scores of ``pairs`` from the stored query and passage outputs.

    With the ``corpus`` (the shards' rows follow its rows), only the shards' row groups that hold
    candidates are read; without it, every shard is scanned.
    """
    qids = pc.unique(pairs.column("qid"))
    rows = CorpusRows(corpus) if corpus is not None else None
    dense, sparse = VectorShards(passage_dense, rows), WeightShards(passage_sparse, rows)
    table = score_components(
        pairs,
        query_vectors=VectorLookup.from_parquet(query_dense, needed=qids, key="qid"),
        passage_vectors=dense,
        query_weights=SparseLookup.from_parquet(query_sparse, needed=qids, key="qid"),
        passage_weights=sparse,
    )
    if rows is not None:
        log.info(
            "read %.1f MB of %.1f MB of passage shards (row groups that hold the %d candidates), %.1f MB of docids",
            (dense.bytes_read + sparse.bytes_read) / MB,
            sum(os.path.getsize(p) for p in [*dense.paths, *sparse.paths]) / MB,
            len(pairs),
            rows.bytes_read / MB,
        )
    return table


def rerank_candidates(
    pairs: pa.Table,
    queries: PathLike,
    query_dense: PathLike,
    query_sparse: PathLike,
    corpus: PathLike,
    spec: dict,
    batch_size: int,
    device: str,
    dtype: str,
    query_tokens: int | None = None,
    token_budget: int | None = None,
) -> pa.Table:
    """Dense, sparse and multi-vector scores of ``pairs`` from one encoding of each candidate passage
    (:func:`miracl_eval.fusion.rerank.one_pass_scores`); ``spec``: a resolved BGE-M3 spec; ``batch_size``
    and ``token_budget``: the encoder's (texts and padded tokens per batch at most)."""
    from miracl_eval.encoders import bge_m3

    qids = pc.unique(pairs.column("qid"))
    table = schemas.read_table(queries, schemas.QUERIES)
    table = table.filter(pc.is_in(table.column("qid"), value_set=qids))
    query_texts = dict(zip(table.column("qid").to_pylist(), table.column("query").to_pylist(), strict=True))
    rows = CorpusRows(corpus)
    passages = rows.texts(pairs.column("docid"), spec["title_join"])
    log.info("read %.1f MB of the corpus for %d candidate passages", rows.bytes_read / MB, len(passages))
    model = bge_m3.load(spec, device=device, dtype=dtype, multivec=True)
    with Progress(len(pairs), "rerank (dense, sparse and multi-vector scores)", "pairs", log) as progress:
        scores = one_pass_scores(
            model,
            pairs,
            query_texts,
            VectorLookup.from_parquet(query_dense, needed=qids, key="qid"),
            SparseLookup.from_parquet(query_sparse, needed=qids, key="qid"),
            passages,
            batch_size,
            query_tokens=query_tokens,
            token_budget=token_budget,
            progress=progress.update,
        )
    return components_table(pairs.select(PAIRS.names).cast(PAIRS), **scores)


class RerankInputs(TypedDict):
    """The queries' stored outputs a query chunk's candidates are scored with, and where the scores go."""

    query_dense: PathLike
    query_sparse: PathLike
    output: PathLike


class ScoredInputs(RerankInputs):
    """:class:`RerankInputs`, and the passages' stored outputs (the union's)."""

    passage_dense: Sequence[PathLike]  # shards
    passage_sparse: Sequence[PathLike]  # shards


def _chunk_pairs(
    candidates: Callable[[Callable[[PathLike], pa.Table]], pa.Table], queries: PathLike, chunk: int, chunk_index: int
) -> pa.Table:
    """The candidate pairs of one query chunk.

    ``candidates`` builds the pairs from runs cut down to the chunk's queries by the function it
    is given: candidates are only ever built for the chunk's queries (they do not depend on
    other queries' rows).
    """
    qids = pa.array(query_chunk_ids(queries, chunk, chunk_index), pa.string())
    return candidates(lambda run: run_rows(run, qids))


def union_components_stage(
    dense_run: PathLike,
    sparse_run: PathLike,
    queries: PathLike,
    chunk: int,
    chunk_index: int,
    scored: ScoredInputs,
    corpus: PathLike | None = None,
) -> int:
    """Stage: component scores of one query chunk's union of the dense and sparse lists; returns #pairs.

    A CPU job: the stored vectors and weights of the candidates, read from the row groups of the
    shards they live in (found from the ``corpus``'s rows).
    """
    pairs = _chunk_pairs(lambda rows: candidate_union(rows(dense_run), rows(sparse_run)), queries, chunk, chunk_index)
    table = score_candidates(
        pairs, scored["query_dense"], scored["query_sparse"], scored["passage_dense"], scored["passage_sparse"], corpus
    )
    schemas.write_table(table, scored["output"], COMPONENTS)
    return len(table)


def rerank_components_stage(
    dense_run: PathLike,
    depth: int,
    queries: PathLike,
    chunk: int,
    chunk_index: int,
    scored: RerankInputs,
    **encoder: Any,
) -> int:
    """Stage: dense, sparse and multi-vector scores of one query chunk's dense top-``depth``; returns #pairs.

    ``encoder``: ``spec``, ``corpus``, ``batch_size``, ``token_budget``, ``device`` and ``dtype`` (see
    :func:`rerank_candidates`).
    """
    pairs = _chunk_pairs(lambda rows: dense_candidates(rows(dense_run), depth), queries, chunk, chunk_index)
    table = rerank_candidates(pairs, queries, scored["query_dense"], scored["query_sparse"], **encoder)
    schemas.write_table(table, scored["output"], COMPONENTS)
    return len(table)
