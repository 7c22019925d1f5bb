"""The rerank's three scores from one forward pass over each candidate passage.

For the dense top-``rerank_depth`` (methods ``multivec`` and ``all``), each candidate passage is
encoded once by BGE-M3 with all three heads, as FlagEmbedding's ``compute_score`` does: its dense
vector and lexical weights meet the query's stored ones (the outputs the dense and sparse searches
used), its token vectors the query's (encoded in the job, a group of queries at a time). The
candidates' texts are read by docid (:class:`miracl_eval.inputs.passages.CorpusRows`), and no stored
passage vector is read: the job reads the corpus's docids and the candidates' row groups, not the
corpus's vectors.

The dense score is the float64 inner product of the stored query vector and the passage's fresh
float32 vector, the sparse score the float64 dot product of the weights: equal to the stored-vector
scores of :mod:`miracl_eval.fusion.scores` (to float32 rounding) when passages are stored in float32.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from miracl_eval.encoders.kinds import DENSE, SPARSE
from miracl_eval.encoders.pipeline import Batch
from miracl_eval.fusion.candidates import PAIRS
from miracl_eval.fusion.scores import SparseLookup, VectorLookup, checked_scores, dense_dots, lookup_rows, sparse_dots


def one_pass_scores(
    model: Any,
    pairs: pa.Table,
    query_texts: dict[str, str],
    query_vectors: VectorLookup,
    query_weights: SparseLookup,
    passages: dict[str, str],
    batch_size: int,
    query_tokens: int | None = None,
    token_budget: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, np.ndarray]:
    """``{"dense", "sparse", "multivec"}`` scores (float64, aligned with ``pairs``) of a BGE-M3 model.

    ``query_texts`` and ``passages``: texts by qid and docid; ``query_vectors`` and
    ``query_weights``: the queries' stored dense and sparse outputs; ``batch_size`` and ``token_budget``:
    texts and padded tokens per encoding batch at most (the encoder settings); ``progress``: told of each
    passage batch's pairs once scored.
    """
    from miracl_eval.encoders import bge_m3

    pairs = pairs.select(PAIRS.names).cast(PAIRS)
    qids = pairs.column("qid")
    dense_q = lookup_rows("dense", "query", qids, query_vectors)
    sparse_q = lookup_rows("sparse", "query", qids, query_weights)
    order = list(dict.fromkeys(qids.to_pylist()))
    slot = {q: i for i, q in enumerate(order)}
    missing = [q for q in order if q not in query_texts]
    if missing:
        raise KeyError(f"no text for query {missing[0]!r}")
    wanted = [(slot[q], d) for q, d in zip(qids.to_pylist(), pairs.column("docid").to_pylist(), strict=True)]
    dense = np.full(len(pairs), np.nan)  # a pair no batch scored stays NaN: an error, never 0
    sparse = np.full(len(pairs), np.nan)

    def on_batch(ks: np.ndarray, rows: np.ndarray, batch: Batch) -> None:
        if progress is not None:
            progress(len(ks))
        if not len(ks):
            return
        vectors = batch.tensors[DENSE].cpu().numpy()
        dense[ks] = dense_dots(query_vectors.vectors, dense_q[ks], vectors, rows)
        weights = model.rows(SPARSE, batch)
        indptr = np.zeros(len(weights) + 1, dtype=np.int64)
        np.cumsum([len(t) for t, _ in weights], out=indptr[1:])
        tokens = np.concatenate([t for t, _ in weights]).astype(np.int64) if weights else np.zeros(0, np.int64)
        values = np.concatenate([w for _, w in weights]) if weights else np.zeros(0, np.float32)
        sparse[ks] = sparse_dots(query_weights, sparse_q[ks], indptr, tokens, values, rows)

    extra = {} if query_tokens is None else {"query_tokens": query_tokens}
    multivec = bge_m3.multivec_scores(
        model,
        [query_texts[q] for q in order],
        passages,
        wanted,
        batch_size,
        passage_kinds=(DENSE, SPARSE),
        on_batch=on_batch,
        token_budget=token_budget,
        **extra,
    )
    n = len(pairs)
    scores = {"dense": dense, "sparse": sparse, "multivec": multivec.astype(np.float64)}
    return {name: checked_scores(name, values, n) for name, values in scores.items()}
