"""The reranker stages: a chunk's scores (against FlagEmbedding's FlagReranker on the same pairs), the
reranked run (against a plain sort), and the depth stored scores can serve."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from miracl_eval import schemas
from miracl_eval.errors import InputError
from miracl_eval.rerankers.registry import FAMILIES, scoring_settings
from miracl_eval.rerankers.stage import (
    rerank,
    reranked_run_stage,
    reranker_scores_stage,
    scored_depth,
    scored_with,
)
from miracl_eval.runs import rank_table, read_run, write_run
from tests.helpers import BATCH_TOL, sample_passages, sample_queries

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _first_stage(qids: list[str], docids: list[str], hits: int, seed: int = 0) -> pa.Table:
    """A run of ``hits`` random passages per query, with tied scores."""
    rng = random.Random(seed)
    q, d, s = [], [], []
    for i in range(len(qids)):
        for docid in rng.sample(docids, hits):
            q.append(i)
            d.append(docid)
            s.append(float(rng.randint(0, 5)))  # ties: ranked by docid
    return rank_table(qids, np.array(q), pa.array(d), np.array(s))


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    """A corpus (some passages without a title), queries and a first-stage run."""
    passages = sample_passages(["en", "zh", "ar", "sw"], 4)
    docids = [f"d{i}#{i % 3}" for i in range(len(passages))]
    titles = ["" if i % 4 == 0 else f"Title {i}" for i in range(len(passages))]
    corpus = pa.table({"docid": docids, "title": titles, "text": passages, "contents": passages}, schema=schemas.CORPUS)
    pq.write_table(corpus, tmp_path / "corpus.parquet", row_group_size=5)  # several row groups
    texts = sample_queries(["en", "zh", "ar", "sw"])[:5]
    queries = pa.table({"qid": [f"q{i}" for i in range(len(texts))], "query": texts}, schema=schemas.QUERIES)
    pq.write_table(queries, tmp_path / "queries.parquet")
    first = _first_stage(queries["qid"].to_pylist(), docids, 9)
    write_run(first, tmp_path / "first.parquet", tmp_path / "first.trec", "first")
    return {
        "corpus": tmp_path / "corpus.parquet",
        "queries": tmp_path / "queries.parquet",
        "first": tmp_path / "first.parquet",
    }


def _spec(classifier: Path, max_length: int = 64) -> dict:
    spec = FAMILIES["cross-encoder"].resolve({"checkpoint": str(classifier), "max_length": max_length}, "rerankers.t")
    return scoring_settings(spec)


def test_rerank_keeps_exactly_the_top_depth_reordered_by_score_ties_by_docid() -> None:
    qids = ["q2", "q10", "q1"]
    docids = [f"p{i:02d}" for i in range(30)]
    first = _first_stage(qids, docids, 20, seed=3)
    rng = random.Random(7)
    scores = pa.table(
        {
            "qid": first["qid"],
            "docid": first["docid"],
            "score": [float(rng.randint(0, 3)) for _ in range(first.num_rows)],  # many ties
        }
    )
    got = rerank(first, scores, depth=8)
    score_of = {(q, d): s for q, d, s in zip(*(scores[c].to_pylist() for c in ("qid", "docid", "score")), strict=True)}
    expected = []
    for qid in qids:  # the first stage's query order
        top = [d for q, d, r in zip(*(first[c].to_pylist() for c in ("qid", "docid", "rank")), strict=True)
               if q == qid and r <= 8]  # fmt: skip
        ordered = sorted(top, key=lambda d: (-score_of[(qid, d)], d))
        expected += [(qid, d, rank + 1, score_of[(qid, d)]) for rank, d in enumerate(ordered)]
    assert list(zip(*(got[c].to_pylist() for c in ("qid", "docid", "rank", "score")), strict=True)) == expected
    with pytest.raises(ValueError, match="have no score"):
        rerank(first, scores.slice(1), depth=8)


def test_chunk_scores_equal_flag_reranker_and_the_run_reranks_them(
    tiny_checkpoints, inputs: dict[str, Path], tmp_path: Path
) -> None:
    flag_embedding = pytest.importorskip("FlagEmbedding")
    classifier = tiny_checkpoints("cross-encoder")
    spec = _spec(classifier)
    outputs = [tmp_path / f"scores{i}.parquet" for i in range(3)]
    counts = [
        reranker_scores_stage(inputs["first"], inputs["queries"], 2, i, 6, inputs["corpus"], spec, out, batch_size=4)
        for i, out in enumerate(outputs)
    ]
    assert counts == [12, 12, 6]  # chunks of 2 queries (5 in all), their top 6 hits
    scores = pa.concat_tables([pq.read_table(p) for p in outputs])
    assert scored_with(outputs[0]) == {"depth": 6, "settings": spec}
    # FlagEmbedding scores the same (query, "{title} {text}") pairs, as its MIRACL evaluation joins them
    corpus = pq.read_table(inputs["corpus"]).to_pylist()
    passages = {r["docid"]: f"{r['title']} {r['text']}".strip() for r in corpus}
    queries = dict(zip(*(pq.read_table(inputs["queries"])[c].to_pylist() for c in ("qid", "query")), strict=True))
    pairs = [
        [queries[q], passages[d]] for q, d in zip(scores["qid"].to_pylist(), scores["docid"].to_pylist(), strict=True)
    ]
    flag = flag_embedding.FlagReranker(str(classifier), use_fp16=False, devices="cpu", max_length=64)
    theirs = np.asarray(flag.compute_score(pairs, batch_size=5))
    tol = BATCH_TOL["cross-encoder"]
    np.testing.assert_allclose(scores["score"].to_numpy(), theirs, atol=tol, rtol=tol)
    first = read_run(inputs["first"])
    top = {(q, d) for q, d, r in zip(*(first[c].to_pylist() for c in ("qid", "docid", "rank")), strict=True) if r <= 6}
    assert set(zip(scores["qid"].to_pylist(), scores["docid"].to_pylist(), strict=True)) == top
    # the run of a lower depth from the same scores: the top 4 of each query, by score
    run_out, trec_out = tmp_path / "run.parquet", tmp_path / "run.trec"
    assert reranked_run_stage(inputs["first"], outputs, 4, run_out, trec_out, "first>>t") == 20
    run = read_run(run_out)
    assert run.equals(rerank(first, scores, 4))
    assert {line.split()[5] for line in trec_out.read_text().splitlines()} == {"first>>t"}
    # scores of a lower depth than asked are refused, naming the file
    with pytest.raises(InputError, match=r"scores0\.parquet.*top 6 hits, not of the top 8"):
        reranked_run_stage(inputs["first"], outputs, 8, tmp_path / "r.parquet", tmp_path / "r.trec", "t")
    assert not (tmp_path / "r.parquet").exists() and not (tmp_path / "r.trec").exists()


def test_a_chunk_without_hits_loads_no_model(inputs: dict[str, Path], tmp_path: Path) -> None:
    spec = {"family": "cross-encoder", "checkpoint": str(tmp_path / "absent"), "max_length": 64,
            "query_max_length": None, "title_join": "{title} {text}", "sigmoid": False}  # fmt: skip
    out = tmp_path / "empty.parquet"
    assert reranker_scores_stage(inputs["first"], inputs["queries"], 2, 7, 6, inputs["corpus"], spec, out) == 0
    assert pq.read_table(out).num_rows == 0 and scored_with(out) == {"depth": 6, "settings": spec}


def test_scored_depth_serves_a_lower_depth_only_from_up_to_date_scores_of_the_same_settings(
    inputs: dict[str, Path], tmp_path: Path
) -> None:
    spec = {"family": "cross-encoder", "checkpoint": "x", "max_length": 64, "query_max_length": None,
            "title_join": "{title} {text}", "sigmoid": False}  # fmt: skip
    out = tmp_path / "s.parquet"
    assert scored_depth(out, spec, 50) == 50  # nothing stored
    reranker_scores_stage(inputs["first"], inputs["queries"], 2, 9, 100, inputs["corpus"], spec, out)
    assert scored_depth(out, spec, 50, [inputs["first"]]) == 100  # stored at 100: no model run
    assert scored_depth(out, spec, 200, [inputs["first"]]) == 200  # deeper: scored again
    assert scored_depth(out, {**spec, "max_length": 32}, 50) == 50  # other settings: other scores
    later = os.path.getmtime(out) + 10
    os.utime(inputs["first"], (later, later))  # a new first stage: its top hits may differ
    assert scored_depth(out, spec, 50, [inputs["first"]]) == 50
    out.write_bytes(b"not parquet")
    assert scored_depth(out, spec, 50) == 50
