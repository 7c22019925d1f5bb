"""Rules ``reranker_scores`` and ``reranked_run``: a reranker's scores of a first stage's top hits, and the reranked run.

``reranker_scores`` (a GPU job per query chunk) scores the first stage's top ``depth`` hits of the
chunk's queries, reading only the candidates' texts from the corpus, and keeps the scores with the
depth and settings they were computed with in the file's metadata. ``reranked_run`` (a CPU job per
partition) takes the first stage's top ``depth`` hits of every query, orders them by their scores
(ties by docid, as every ranking of this project: :func:`miracl_eval.runs.rank_table`) and drops
the rest.

What the scores were computed with makes a lower depth free: :func:`scored_depth` is the depth a
chunk's scores are computed at, the configured one or, when the chunk's stored scores are up to
date with the same settings and a greater depth, theirs, so that the workflow sees no change and
runs no model.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from miracl_eval import schemas
from miracl_eval.atomic import atomic_output
from miracl_eval.errors import InputError
from miracl_eval.inputs.chunks import query_chunk
from miracl_eval.inputs.passages import CorpusRows
from miracl_eval.jobs.progress import Progress
from miracl_eval.rerankers.registry import FAMILIES
from miracl_eval.runs import rank_table, run_rows, write_run
from miracl_eval.types import PathLike

log = logging.getLogger(__name__)
MB = 1 << 20
#: the key of a scores file's metadata: ``{"depth": ..., "settings": ...}``
SCORED = b"miracl_eval.reranker"
#: imported once by a preload server before it forks the scoring jobs (:mod:`miracl_eval.jobs.preload`)
PRELOAD = ("torch", "transformers", *(f.module for f in FAMILIES.values()))


def scored_with(path: PathLike) -> dict[str, Any] | None:
    """The depth and settings a scores file was computed with (None when it has none or cannot be read)."""
    try:
        metadata = pq.read_schema(path).metadata or {}
        record = json.loads(metadata[SCORED])
    except (OSError, KeyError, ValueError, pa.ArrowException):
        return None
    return record if isinstance(record, dict) else None


def scored_depth(path: PathLike, settings: Mapping[str, Any], depth: int, inputs: Sequence[PathLike] = ()) -> int:
    """The depth to score a chunk at: ``depth``, or the greater depth of the chunk's stored scores when
    they exist, are newer than every existing one of ``inputs`` and were computed with ``settings``
    (their hits then hold the new depth's: no model needs to run)."""
    if not os.path.exists(path):
        return depth
    stored = scored_with(path)
    if stored is None or stored.get("settings") != json.loads(json.dumps(dict(settings))):
        return depth
    mtime = os.path.getmtime(path)
    if any(os.path.exists(p) and os.path.getmtime(p) > mtime for p in inputs):
        return depth
    return max(depth, int(stored.get("depth", 0)))


def score_pairs(
    pairs: pa.Table,
    queries: Mapping[str, str],
    corpus: PathLike,
    spec: Mapping[str, Any],
    batch_size: int,
    device: str = "auto",
    dtype: str = "auto",
) -> np.ndarray:
    """The reranker's score of each ``(qid, docid)`` pair: the passages' texts read from the corpus's
    row groups that hold them, the model loaded only when there is a pair."""
    if not len(pairs):
        return np.zeros(0, dtype=np.float64)
    rows = CorpusRows(corpus)
    passages = rows.texts(pairs.column("docid"), spec["title_join"])
    log.info("read %.1f MB of the corpus for %d candidate passages", rows.bytes_read / MB, len(passages))
    reranker = FAMILIES[spec["family"]].load(spec, device=device, dtype=dtype)
    texts = [
        (queries[q], passages[d]) for q, d in zip(pairs["qid"].to_pylist(), pairs["docid"].to_pylist(), strict=True)
    ]
    with Progress(len(texts), f"reranker {spec['checkpoint']}", "pairs", log) as progress:
        return reranker.score(texts, batch_size, progress.update)


def reranker_scores_stage(
    first_run: PathLike,
    queries: PathLike,
    chunk: int,
    chunk_index: int,
    depth: int,
    corpus: PathLike,
    spec: Mapping[str, Any],
    output: PathLike,
    batch_size: int = 64,
    device: str = "auto",
    dtype: str = "auto",
) -> int:
    """Stage: the reranker's scores of the first stage's top ``depth`` hits of query chunk ``chunk_index``;
    returns the number of pairs. ``spec``: the reranker's scoring settings (what the scores depend on),
    kept in the file's metadata with the depth."""
    table = query_chunk(queries, chunk, chunk_index)
    texts = dict(zip(table.column("qid").to_pylist(), table.column("query").to_pylist(), strict=True))
    pairs = run_rows(first_run, table.column("qid").combine_chunks(), depth).select(["qid", "docid"])
    scores = score_pairs(pairs, texts, corpus, spec, batch_size, device, dtype)
    out = pa.table({"qid": pairs["qid"], "docid": pairs["docid"], "score": scores}, schema=schemas.PAIR_SCORES)
    metadata = {SCORED: json.dumps({"depth": depth, "settings": dict(spec)}, sort_keys=True).encode()}
    with atomic_output(output) as tmp:
        pq.write_table(out.replace_schema_metadata(metadata), tmp, compression="zstd")
    return len(out)


def rerank(first: pa.Table, scores: pa.Table, depth: int) -> pa.Table:
    """The first stage's top ``depth`` hits of each query, ordered by their ``scores`` (ties by docid), the
    rest dropped; queries in the first stage's order. A hit without a score is a :class:`ValueError`."""
    top = first.filter(pc.less_equal(first.column("rank"), depth)).select(["qid", "docid"])
    joined = top.join(scores.select(["qid", "docid", "score"]), keys=["qid", "docid"], join_type="left outer")
    if joined.column("score").null_count:
        missing = joined.filter(pc.is_null(joined.column("score")))
        raise ValueError(
            f"{missing.num_rows} of the first stage's top {depth} hits have no score, e.g. query "
            f"{missing['qid'][0].as_py()!r}, passage {missing['docid'][0].as_py()!r}"
        )
    qids = pc.unique(first.column("qid"))
    qpos = pc.index_in(joined.column("qid"), value_set=qids).to_numpy(zero_copy_only=False)
    return rank_table(qids, qpos, joined.column("docid").combine_chunks(), joined.column("score").to_numpy())


def reranked_run_stage(
    first_run: PathLike, score_files: Sequence[PathLike], depth: int, run_out: PathLike, trec_out: PathLike, tag: str
) -> int:
    """Stage: the reranked run of a partition (Parquet and TREC, tagged ``tag``) from the first stage's run and
    its chunks' scores; returns its number of rows."""
    for path in score_files:  # from the footers, before any table is read
        stored = scored_with(path)
        if stored is not None and int(stored.get("depth", 0)) < depth:
            raise InputError(path, f"holds the scores of the top {stored['depth']} hits, not of the top {depth}")
    first = run_rows(first_run, None, depth)
    scores = [schemas.read_table(p, schemas.PAIR_SCORES) for p in score_files]
    table = pa.concat_tables(scores) if scores else schemas.PAIR_SCORES.empty_table()
    try:
        run = rerank(first, table, depth)
    except ValueError as err:
        raise InputError(first_run, f"{err}: its scores ({len(score_files)} file(s)) are not of this run") from None
    write_run(run, run_out, trec_out, tag)
    return run.num_rows
