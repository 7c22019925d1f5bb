"""Weighted fusion (rule ``fuse``) of BGE-M3's dense, lexical (sparse) and multi-vector scores.

The fused score is ``sum(w_i * s_i)`` over the components that a method names
(:data:`FUSED_COMPONENTS`), from the component scores that :mod:`miracl_eval.fusion.components`
keeps; ties are ordered by docid. New weights therefore re-run only this stage and evaluation.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from miracl_eval import schemas
from miracl_eval.errors import InputError, MiraclEvalError
from miracl_eval.runs import RunWriter, rank_table
from miracl_eval.types import PathLike

log = logging.getLogger(__name__)


COMPONENT_NAMES = ("dense", "sparse", "multivec")


#: the components each fused method adds up, with the weights the config's ``fusion`` gives them
FUSED_COMPONENTS: Mapping[str, tuple[str, ...]] = {
    "multivec": ("multivec",),
    "dense+sparse": ("dense", "sparse"),
    "all": ("dense", "sparse", "multivec"),
}
#: the candidate list whose component scores each fused method reads (:mod:`miracl_eval.fusion.candidates`):
#: the union of the dense and sparse top-``hits`` lists, or the dense top ``rerank_depth``
CANDIDATE_LIST: Mapping[str, str] = {"multivec": "rerank", "dense+sparse": "union", "all": "rerank"}


def candidates_per_query(candidate_list: str, hits: int, rerank_depth: int) -> int:
    """At most how many candidates a query has in ``candidate_list``: two runs' ``hits`` (``union``),
    or ``rerank_depth`` (``rerank``)."""
    return 2 * hits if candidate_list == "union" else rerank_depth


def fused_depth(method: str, hits: int, rerank_depth: int) -> int:
    """The hits a fused run keeps per query: ``hits`` of the union, all of the dense top."""
    return hits if CANDIDATE_LIST[method] == "union" else rerank_depth


# Component scores of the candidates; a component that was not computed is null.
COMPONENTS = pa.schema(
    [
        ("qid", pa.string()),
        ("docid", pa.string()),
        ("dense", pa.float64()),
        ("sparse", pa.float64()),
        ("multivec", pa.float64()),
    ]
)


class MissingComponentError(MiraclEvalError):
    """A component score needed for fusion is missing (no representation, null or NaN)."""


def _check_weights(weights: Mapping[str, float]) -> None:
    if not weights:
        raise ValueError("fusion needs at least one component weight")
    unknown = [k for k in weights if k not in COMPONENT_NAMES]
    if unknown:
        raise ValueError(f"unknown component(s) {', '.join(unknown)}; known: {', '.join(COMPONENT_NAMES)}")
    bad = [k for k, w in weights.items() if not np.isfinite(float(w))]
    if bad:
        raise ValueError(f"weight(s) of {', '.join(bad)} must be finite numbers")


def fused_scores(components: pa.Table, weights: Mapping[str, float]) -> np.ndarray:
    """``sum(w_i * s_i)`` per row, in the order of ``weights``; a missing score is an error."""
    _check_weights(weights)
    total = np.zeros(len(components), dtype=np.float64)
    for name, w in weights.items():
        if name not in components.column_names:
            raise MissingComponentError(f"{name}: no such column in the component scores")
        col = components.column(name)
        if col.null_count:
            raise MissingComponentError(f"{name}: {col.null_count} of {len(col)} candidate(s) have no {name} score")
        values = col.to_numpy().astype(np.float64)
        if not np.isfinite(values).all():
            raise MissingComponentError(f"{name}: {int((~np.isfinite(values)).sum())} score(s) are NaN or infinite")
        total = total + float(w) * values
    return total


def fuse(components: pa.Table, weights: Mapping[str, float], depth: int | None = None) -> pa.Table:
    """A run table from component scores: score ``sum(w_i * s_i)``, ties by docid.

    Every component named in ``weights`` (even with weight 0) must have a score for every
    candidate. Queries keep the order of ``components``; ``depth`` keeps each query's top.
    """
    scores = fused_scores(components, weights)
    pairs = components.select(["qid", "docid"])
    counts = pairs.group_by(["qid", "docid"], use_threads=False).aggregate([([], "count_all")])
    if len(counts) != len(pairs):
        dup = counts.filter(pc.greater(counts.column("count_all"), 1)).slice(0, 1).to_pylist()[0]
        raise MiraclEvalError(f"duplicate candidate ({dup['qid']!r}, {dup['docid']!r}) in the component scores")
    qids = pc.unique(pairs.column("qid"))
    qpos = pc.index_in(pairs.column("qid"), value_set=qids).to_numpy(zero_copy_only=False)
    return rank_table(qids, qpos, pairs.column("docid").combine_chunks(), scores, depth=depth)


def components_schema(weights: Mapping[str, float]) -> pa.Schema:
    """:data:`COMPONENTS` with the fusion weights in its metadata (``miracl_eval.weights``)."""
    return COMPONENTS.with_metadata(
        {b"miracl_eval.weights": json.dumps({k: float(v) for k, v in weights.items()}).encode()}
    )


def fuse_stage(
    components: Sequence[PathLike],
    weights: dict[str, float],
    run_parquet: PathLike,
    run_trec: PathLike,
    components_out: PathLike,
    tag: str,
    depth: int | None,
) -> int:
    """Stage: weighted sum of component scores (one or several query-chunk files) to a run.

    The chunks are fused one at a time (a chunk holds whole queries, each query in one chunk), so the
    stage holds one chunk's candidates; the run and the components are streamed to their files.
    """
    seen: set[str] = set()
    n = 0
    with (
        RunWriter(run_parquet, run_trec, tag) as run,
        schemas.StreamWriter(components_out, components_schema(weights)) as kept,
    ):
        for path in components:
            table = schemas.read_table(path, COMPONENTS)
            qids = set(pc.unique(table.column("qid")).to_pylist())
            if qids & seen:
                raise InputError(path, f"query {min(qids & seen)!r} is also in an earlier chunk")
            seen |= qids
            run.write(fuse(table, weights, depth=depth))
            kept.write(table)
            n += len(table)
    log.info("fused %d candidates of %d chunk(s) with %s -> %s", n, len(components), dict(weights), run_parquet)
    return n
