"""Hybrids: the runs of two or more systems fused into one, with pyserini's fusion code.

Rule ``hybrid``. Settings are checked by :mod:`miracl_eval.config.hybrids`; pyserini is imported
where it is used. A hybrid is named in the config's ``methods`` and described under ``hybrids``::

    hybrids:
      bm25+me5-large: {systems: [bm25, me5-large/dense], method: interpolation, alpha: 0.5}

The fused scores are computed by ``pyserini.fusion`` itself (its ``interpolation``,
``reciprocal_rank_fusion``, ``normalize`` and ``average`` on ``pyserini.trectools.TrecRun``
objects), so a hybrid equals ``python -m pyserini.fusion --runs A B ... --method M --alpha ...
--rrf.k ... --depth D --k K`` on the runs' TREC files:

* every input run is read to ``depth`` hits per query (its ranks 1..depth; pyserini takes the
  first ``depth`` lines of each query in file order, which is rank order in our TREC files), and
  a query missing from a run simply gets nothing from it;
* ``interpolation`` (exactly two runs): ``alpha * s1 + (1 - alpha) * s2`` of the raw scores over
  the union of the two runs, a missing score adding nothing;
* ``rrf``: the sum of ``1 / (rrf_k + rank)`` over the runs, the rank as stored in the run;
* ``normalize``: the sum of the scores min-max normalised per query (1 where a query's scores are
  all equal); pyserini normalises over *all* of a query's hits, before the depth cut;
* ``average``: the sum of ``score * (1 / n)`` over the ``n`` runs;
* ties: each query's fused hits are sorted by score (descending), then docid (ascending, as
  strings), and the first ``k`` kept; ranks are 1..k in that order (``TrecRun.merge``). This is
  also the order of :func:`miracl_eval.runs.rank_hits`. Queries come in ascending qid order.

Ids stay strings from end to end. The pyserini command line reads its TREC files with pandas,
which turns numeric-looking qids into numbers; that CLI therefore writes ``007`` back as ``7``,
drops ids spelled ``NA`` or ``nan``, and does not merge a query ``6`` of a run whose qids are all
numbers with the query ``6`` of a run that has other qids. Fusing our tables directly, as here,
has none of these effects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from miracl_eval import schemas
from miracl_eval.config.hybrids import (
    DEFAULT_ALPHA,
    DEFAULT_DEPTH,
    DEFAULT_K,
    DEFAULT_RRF_K,
    HYBRID_METHODS,
    hybrid_options,
)
from miracl_eval.errors import InputError
from miracl_eval.runs import read_run, write_run
from miracl_eval.types import PathLike

#: what a preload server imports for this stage (:mod:`miracl_eval.jobs.preload`): pyserini's fusion code,
#: which imports pandas and no JVM
PRELOAD = ("pyserini.fusion",)

if TYPE_CHECKING:
    from pyserini.trectools import TrecRun


def _trec_run(table: pa.Table) -> TrecRun:
    """A pyserini ``TrecRun`` of a run table, each query's hits in rank order (ids kept as strings)."""
    from pyserini.trectools import TrecRun

    table = table.select(schemas.RUN.names).cast(schemas.RUN)
    table = table.take(pc.sort_indices(table, sort_keys=[("rank", "ascending")]))  # stable: ties keep their order
    frame = table.rename_columns(["topic", "docid", "rank", "score"]).to_pandas()
    frame.insert(1, "q0", "Q0")
    frame["tag"] = "run"
    run = TrecRun()
    run.run_data = frame[TrecRun.columns]
    return run


def fuse_runs(
    runs: Sequence[pa.Table],
    method: str,
    *,
    alpha: float = DEFAULT_ALPHA,
    rrf_k: int = DEFAULT_RRF_K,
    depth: int = DEFAULT_DEPTH,
    k: int = DEFAULT_K,
) -> pa.Table:
    """Fuse run tables (``schemas.RUN``) with pyserini's fusion ``method``; a ``schemas.RUN`` table.

    See the module's documentation for what each method computes and how ties are ordered.
    """
    if method not in HYBRID_METHODS:
        raise ValueError(f"unknown fusion method {method!r}; known: {', '.join(HYBRID_METHODS)}")
    if len(runs) < 2 or (method == "interpolation" and len(runs) != 2):
        raise ValueError(f"{method} needs {'exactly' if method == 'interpolation' else 'at least'} two runs")
    from pyserini.fusion import average, interpolation, normalize, reciprocal_rank_fusion  # pyserini only where used

    trec_runs = [_trec_run(run) for run in runs]
    if method == "interpolation":
        fused = interpolation(trec_runs, alpha=alpha, depth=depth, k=k)
    elif method == "rrf":
        fused = reciprocal_rank_fusion(trec_runs, rrf_k=rrf_k, depth=depth, k=k)
    elif method == "normalize":
        fused = normalize(trec_runs, depth=depth, k=k)
    else:
        fused = average(trec_runs, depth=depth, k=k)
    frame = fused.run_data
    return pa.table(
        {
            "qid": pa.array(frame["topic"].tolist(), pa.string()),
            "docid": pa.array(frame["docid"].tolist(), pa.string()),
            "rank": pa.array(frame["rank"].to_numpy(), pa.int32()),
            "score": pa.array(frame["score"].to_numpy(dtype="float64"), pa.float64()),
        },
        schema=schemas.RUN,
    )


def _read_input(path: PathLike) -> pa.Table:
    """A run to fuse; a hit listed twice for one query (which pyserini would add up) is an error."""
    table = read_run(path)
    counts = table.group_by(["qid", "docid"], use_threads=False).aggregate([("rank", "count")])
    twice = counts.filter(pc.greater(counts.column("rank_count"), 1))
    if len(twice):
        qid, docid = twice.column("qid")[0].as_py(), twice.column("docid")[0].as_py()
        raise InputError(path, f"passage {docid!r} occurs more than once for query {qid!r}")
    return table


def hybrid_stage(
    run_paths: Sequence[PathLike],
    out_parquet: PathLike,
    out_trec: PathLike,
    tag: str,
    settings: Mapping[str, Any],
) -> dict[str, Any]:
    """Stage: fuse the runs of a hybrid's systems (``run_paths``, in the order of ``settings['systems']``)
    and write the fused run as Parquet and TREC, both atomically."""
    opts = hybrid_options(settings)
    if len(run_paths) != len(opts["systems"]):
        raise ValueError(f"{len(run_paths)} run files for the {len(opts['systems'])} systems {opts['systems']}")
    fused = fuse_runs(
        [_read_input(p) for p in run_paths],
        opts["method"],
        alpha=opts["alpha"],
        rrf_k=opts["rrf_k"],
        depth=opts["depth"],
        k=opts["k"],
    )
    write_run(fused, out_parquet, out_trec, tag)
    return {
        "method": opts["method"],
        "systems": list(opts["systems"]),
        "queries": len(pc.unique(fused.column("qid"))),
        "hits": len(fused),
    }
