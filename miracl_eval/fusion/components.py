"""Rules ``union_components`` and ``rerank_components``: the component scores of a query chunk's candidates.

Two candidate lists per query, as FlagEmbedding's MIRACL scripts use them:

* ``union``: the union of the dense and sparse top-``hits`` lists (for ``dense+sparse``);
* ``rerank``: the dense top-``rerank_depth`` (for ``multivec`` and ``all``).

Every candidate gets every component computed exactly: dense from the stored vectors, sparse
from the stored lexical weights (unquantized), multi-vector by encoding the candidate passages
(token-level states are never stored). Query chunks make the rerank of 156k MessIRve queries a
set of independent jobs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypedDict, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from miracl_eval import schemas
from miracl_eval.encoders import PRELOAD_MODULES
from miracl_eval.fusion.candidates import candidate_union, dense_candidates
from miracl_eval.fusion.scores import SparseLookup, VectorLookup, VectorShards, WeightShards, score_components
from miracl_eval.fusion.weighted import COMPONENTS
from miracl_eval.types import PathLike

#: imported once by a preload server before it forks the multi-vector rerank jobs (:mod:`.preload`)
PRELOAD = ("miracl_eval.encoders.encode", "miracl_eval.encoders.bge_m3", *PRELOAD_MODULES)


def query_chunk_ids(queries: PathLike, chunk: int, index: int) -> list[str]:
    """The qids of chunk ``index`` (``chunk`` queries each, in file order)."""
    qids = schemas.read_table(queries, schemas.QUERIES).column("qid").to_pylist()
    return qids[index * chunk : (index + 1) * chunk]


def _passage_texts(corpus: PathLike, needed: pa.Array, title_join: str | None) -> dict[str, str]:
    from miracl_eval.encoders.encode import passage_texts, text_columns

    texts: dict[str, str] = {}
    for batch in schemas.iter_batches(corpus, columns=["docid", *text_columns(title_join)]):
        keep = pc.is_in(batch.column("docid"), value_set=needed)
        if pc.any(keep).as_py():
            sub = batch.filter(keep)
            texts.update(
                zip(sub.column("docid").to_pylist(), cast(list[str], passage_texts(sub, title_join)), strict=True)
            )
    return texts


def score_candidates(
    pairs: pa.Table,
    query_dense: PathLike,
    query_sparse: PathLike,
    passage_dense: Sequence[PathLike],
    passage_sparse: Sequence[PathLike],
    multivec: dict | None = None,
) -> pa.Table:
    """Exact dense and sparse scores (and multi-vector ones when ``multivec`` is given) of ``pairs``.

    ``multivec``: ``{"spec", "queries", "corpus", "batch_size", "device", "dtype"}``, ``spec``
    a resolved BGE-M3 spec (max lengths, title join); the candidate passages are read from the
    corpus Parquet and encoded, each once.
    """
    qids = pc.unique(pairs.column("qid"))
    docids = pc.unique(pairs.column("docid"))
    scorer = None
    if multivec is not None:
        from miracl_eval.encoders import bge_m3

        spec = multivec["spec"]
        model = bge_m3.load(spec, device=multivec["device"], dtype=multivec["dtype"], multivec=True)
        queries = schemas.read_table(multivec["queries"], schemas.QUERIES)
        keep = pc.is_in(queries.column("qid"), value_set=qids)
        queries = queries.filter(keep)
        position = {q: i for i, q in enumerate(queries.column("qid").to_pylist())}
        passages = _passage_texts(multivec["corpus"], docids, spec["title_join"])

        def scorer(table: pa.Table) -> np.ndarray:
            wanted = [
                (position[q], d)
                for q, d in zip(table.column("qid").to_pylist(), table.column("docid").to_pylist(), strict=True)
            ]
            return bge_m3.multivec_scores(
                model, queries.column("query").to_pylist(), passages, wanted, multivec["batch_size"]
            )

    return score_components(
        pairs,
        query_vectors=VectorLookup.from_parquet(query_dense, needed=qids, key="qid"),
        passage_vectors=VectorShards(passage_dense),
        query_weights=SparseLookup.from_parquet(query_sparse, needed=qids, key="qid"),
        passage_weights=WeightShards(passage_sparse),
        multivec=scorer,
    )


class ScoredInputs(TypedDict):
    """What a query chunk's candidates are scored from, and where the scores go."""

    query_dense: PathLike
    query_sparse: PathLike
    passage_dense: Sequence[PathLike]  # shards
    passage_sparse: Sequence[PathLike]  # shards
    output: PathLike


def _run_rows(run: PathLike, qids: pa.Array) -> pa.Table:
    """The rows of a run whose query is in ``qids``, streamed (the whole run is never held)."""
    batches = [b.filter(pc.is_in(b.column("qid"), value_set=qids)) for b in schemas.iter_batches(run, schemas.RUN)]
    return pa.Table.from_batches(batches) if batches else schemas.RUN.empty_table()


def _score_chunk(
    candidates: Callable[[Callable[[PathLike], pa.Table]], pa.Table],
    queries: PathLike,
    chunk: int,
    chunk_index: int,
    scored: ScoredInputs,
    multivec: dict | None = None,
) -> int:
    """Score one query chunk's candidate pairs and write the ``COMPONENTS`` Parquet; returns #pairs.

    ``candidates`` builds the pairs from runs cut down to the chunk's queries by the function it
    is given: candidates are only ever built for the chunk's queries (they do not depend on
    other queries' rows).
    """
    qids = pa.array(query_chunk_ids(queries, chunk, chunk_index), pa.string())
    pairs = candidates(lambda run: _run_rows(run, qids))
    table = score_candidates(
        pairs,
        scored["query_dense"],
        scored["query_sparse"],
        scored["passage_dense"],
        scored["passage_sparse"],
        multivec=multivec,
    )
    schemas.write_table(table, scored["output"], COMPONENTS)
    return len(table)


def union_components_stage(
    dense_run: PathLike,
    sparse_run: PathLike,
    queries: PathLike,
    chunk: int,
    chunk_index: int,
    scored: ScoredInputs,
) -> int:
    """Stage: component scores of one query chunk's union of the dense and sparse lists."""
    return _score_chunk(
        lambda rows: candidate_union(rows(dense_run), rows(sparse_run)), queries, chunk, chunk_index, scored
    )


def rerank_components_stage(
    dense_run: PathLike,
    depth: int,
    queries: PathLike,
    chunk: int,
    chunk_index: int,
    scored: ScoredInputs,
    **encoder: object,
) -> int:
    """Stage: dense, sparse and multi-vector scores of one query chunk's dense top-``depth``.

    ``encoder``: spec, corpus, batch size, device and dtype (see :func:`score_candidates`).
    """
    multivec = {"queries": queries, **encoder}
    return _score_chunk(
        lambda rows: dense_candidates(rows(dense_run), depth), queries, chunk, chunk_index, scored, multivec=multivec
    )
