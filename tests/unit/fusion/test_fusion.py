"""Weighted fusion: candidates, exact component scores, the weighted sum, missing scores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from miracl_eval.errors import InputError
from miracl_eval.fusion.candidates import PAIRS, candidate_union, dense_candidates
from miracl_eval.fusion.scores import (
    SparseLookup,
    VectorLookup,
    VectorShards,
    WeightShards,
    components_table,
    dense_scores,
    score_components,
    sparse_scores,
)
from miracl_eval.fusion.weighted import COMPONENTS, MissingComponentError, fuse, fuse_stage
from miracl_eval.inputs.passages import CorpusRows
from miracl_eval.runs import read_run
from tests.helpers import rank_hits, read_trec, sparse_dot, write_vectors, write_weights


def run_table(hits: dict[str, list[tuple[str, float]]]) -> pa.Table:
    return rank_hits(hits)


def pairs_of(table: pa.Table) -> list[tuple[str, str]]:
    return list(zip(table.column("qid").to_pylist(), table.column("docid").to_pylist(), strict=True))


# --------------------------------------------------------------------------- candidates


def test_candidate_union_semantics() -> None:
    a = run_table({"q2": [("d1", 3.0), ("d2", 2.0)], "q1": [("d5", 1.0)]})
    b = run_table({"q1": [("d6", 9.0), ("d5", 8.0)], "q3": [("d1", 1.0)], "q2": [("d3", 5.0), ("d2", 4.0)]})
    union = candidate_union(a, b)
    assert union.schema == PAIRS
    assert pairs_of(union) == [
        ("q2", "d1"),
        ("q2", "d2"),
        ("q2", "d3"),  # b's new passages after a's
        ("q1", "d5"),
        ("q1", "d6"),
        ("q3", "d1"),  # a query only in b keeps b's passages
    ]


def test_candidate_union_reads_run_files_and_keeps_qid_equal_docid(tmp_path: Path) -> None:
    a = run_table({"10020#0": [("10020#0", 1.0), ("x", 0.5)]})
    b = run_table({"10020#0": [("y", 2.0), ("10020#0", 1.0)]})
    pq.write_table(a, tmp_path / "a.parquet")
    pq.write_table(b, tmp_path / "b.parquet")
    assert pairs_of(candidate_union(tmp_path / "a.parquet", tmp_path / "b.parquet")) == [
        ("10020#0", "10020#0"),
        ("10020#0", "x"),
        ("10020#0", "y"),
    ]


def test_dense_candidates_top_depth() -> None:
    run = run_table({"q2": [(f"d{i}", float(-i)) for i in range(10)], "q1": [("z", 1.0), ("q1", 2.0)]})
    assert pairs_of(dense_candidates(run, 3)) == [("q2", "d0"), ("q2", "d1"), ("q2", "d2"), ("q1", "q1"), ("q1", "z")]


# --------------------------------------------------------------------------- component scores


@pytest.fixture
def stored(tmp_path: Path):
    """Stored query/passage vectors and lexical weights; one qid equals a docid."""
    rng = np.random.default_rng(4)
    docids = [f"d{i}" for i in range(50)] + ["q0"]
    qids = ["q0", "q1", "q2"]
    pvec = rng.standard_normal((len(docids), 8)).astype(np.float32)
    qvec = rng.standard_normal((3, 8)).astype(np.float32)
    pshards = [
        write_vectors(tmp_path / "p0.parquet", docids[:20], pvec[:20], "float16"),
        write_vectors(tmp_path / "p1.parquet", docids[20:], pvec[20:], "float16"),
    ]
    qpath = write_vectors(tmp_path / "q.parquet", qids, qvec, "float16", key="qid")
    pweights = {
        d: {
            int(t): float(np.float32(rng.uniform(0, 0.5)))
            for t in rng.choice(30, size=rng.integers(0, 8), replace=False)
        }
        for d in docids
    }
    qweights = {
        q: {int(t): float(np.float32(rng.uniform(0, 0.5))) for t in rng.choice(30, size=5, replace=False)} for q in qids
    }
    sshards = [
        write_weights(tmp_path / "s0.parquet", {d: pweights[d] for d in docids[:25]}),
        write_weights(tmp_path / "s1.parquet", {d: pweights[d] for d in docids[25:]}),
    ]
    sq = write_weights(tmp_path / "sq.parquet", qweights, key="qid")
    pairs = pa.table(
        {"qid": ["q0", "q0", "q1", "q2", "q2", "q1"], "docid": ["q0", "d3", "d40", "d7", "d49", "d3"]}, schema=PAIRS
    )
    return {
        "docids": docids,
        "qids": qids,
        "pvec": pvec.astype(np.float16).astype(np.float64),
        "qvec": qvec.astype(np.float16).astype(np.float64),
        "pshards": pshards,
        "qpath": qpath,
        "pweights": pweights,
        "qweights": qweights,
        "sshards": sshards,
        "sq": sq,
        "pairs": pairs,
    }


def test_dense_scores_exact_and_lookup_keeps_only_needed(stored) -> None:
    pairs = stored["pairs"]
    passages = VectorLookup.from_parquet(stored["pshards"], needed=pairs.column("docid"))
    assert sorted(passages.ids.to_pylist()) == sorted(set(pairs.column("docid").to_pylist()))
    assert passages.vectors.dtype == np.float16  # stored precision kept
    queries = VectorLookup.from_parquet(stored["qpath"])
    got = dense_scores(pairs, queries, passages)
    for (q, d), s in zip(pairs_of(pairs), got, strict=True):
        want = float(stored["qvec"][stored["qids"].index(q)] @ stored["pvec"][stored["docids"].index(d)])
        assert s == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_sparse_scores_exact(stored) -> None:
    pairs = stored["pairs"]
    passages = SparseLookup.from_parquet(stored["sshards"], needed=pairs.column("docid"))
    assert len(passages) == len(set(pairs.column("docid").to_pylist()))
    queries = SparseLookup.from_parquet(stored["sq"])
    got = sparse_scores(pairs, queries, passages)
    for (q, d), s in zip(pairs_of(pairs), got, strict=True):
        assert s == pytest.approx(sparse_dot(stored["qweights"][q], stored["pweights"][d]), rel=1e-12, abs=0)
    # Against the dict oracle on every (query, passage) pair, including passages without weights.
    everything = pa.table(
        {"qid": [q for q in stored["qids"] for _ in stored["docids"]], "docid": stored["docids"] * 3}, schema=PAIRS
    )
    all_passages = SparseLookup.from_parquet(stored["sshards"])
    got = sparse_scores(everything, queries, all_passages)
    want = [sparse_dot(stored["qweights"][q], stored["pweights"][d]) for q, d in pairs_of(everything)]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    assert any(not stored["pweights"][d] for d in stored["docids"])  # (some passages have no weights)


def test_missing_representation_is_an_error(stored) -> None:
    pairs = pa.table({"qid": ["q0", "q1"], "docid": ["d1", "nowhere"]}, schema=PAIRS)
    passages = VectorLookup.from_parquet(stored["pshards"], needed=pairs.column("docid"))
    queries = VectorLookup.from_parquet(stored["qpath"])
    with pytest.raises(MissingComponentError, match="dense: no passage .*'nowhere'"):
        dense_scores(pairs, queries, passages)
    sq = SparseLookup.from_parquet(stored["sq"])
    sp = SparseLookup.from_parquet(stored["sshards"])
    with pytest.raises(MissingComponentError, match="sparse: no passage"):
        sparse_scores(pairs, sq, sp)
    no_query = pa.table({"qid": ["q9"], "docid": ["d1"]}, schema=PAIRS)
    with pytest.raises(MissingComponentError, match="sparse: no query .*'q9'"):
        sparse_scores(no_query, sq, sp)


def test_scores_from_shards_read_batch_by_batch_equal_those_from_memory(stored, tmp_path: Path) -> None:
    docids = stored["docids"]
    pairs = pa.table(
        {"qid": [q for q in stored["qids"] for _ in docids], "docid": docids * len(stored["qids"])}, schema=PAIRS
    ).take(pa.array(np.random.default_rng(1).permutation(len(docids) * 3)))
    qv, qw = VectorLookup.from_parquet(stored["qpath"]), SparseLookup.from_parquet(stored["sq"])
    held = dense_scores(pairs, qv, VectorLookup.from_parquet(stored["pshards"]))
    streamed = dense_scores(pairs, qv, VectorShards(stored["pshards"]))
    assert streamed.tobytes() == held.tobytes()  # bit for bit
    want = [
        float(stored["qvec"][stored["qids"].index(q)] @ stored["pvec"][docids.index(d)]) for q, d in pairs_of(pairs)
    ]
    np.testing.assert_allclose(streamed, want, rtol=1e-12)
    held = sparse_scores(pairs, qw, SparseLookup.from_parquet(stored["sshards"]))
    assert sparse_scores(pairs, qw, WeightShards(stored["sshards"])).tobytes() == held.tobytes()
    missing = pa.table({"qid": ["q0", "q1"], "docid": ["d1", "nowhere"]}, schema=PAIRS)
    with pytest.raises(MissingComponentError, match="dense: no passage for 1 passage-id.*'nowhere'"):
        dense_scores(missing, qv, VectorShards(stored["pshards"]))
    with pytest.raises(MissingComponentError, match="sparse: no passage .*'nowhere'"):
        sparse_scores(missing, qw, WeightShards(stored["sshards"]))
    again = write_vectors(tmp_path / "again.parquet", ["d3"], np.ones((1, 8), np.float32), "float16")
    with pytest.raises(InputError, match="id d3 occurs more than once"):
        dense_scores(pairs, qv, VectorShards([*stored["pshards"], again]))


def _regroup(path: Path, rows: int) -> Path:
    """Rewrite a Parquet file in row groups of ``rows`` rows."""
    pq.write_table(pq.read_table(path), path, row_group_size=rows)
    return path


def _corpus(path: Path, docids: list[str]) -> Path:
    table = pa.table({"docid": docids, "contents": [f"text of {d}" for d in docids]})
    pq.write_table(table, path, row_group_size=6)
    return path


def test_shards_located_through_the_corpus_read_only_the_candidates_row_groups(stored, tmp_path: Path) -> None:
    """With the corpus's rows, a candidate's shard and row group follow from its row: the scores equal
    the full scan's bit for bit, and only the row groups that hold candidates are read."""
    for shard in [*stored["pshards"], *stored["sshards"]]:
        _regroup(shard, 5)
    rows = CorpusRows(_corpus(tmp_path / "corpus.parquet", stored["docids"]))
    qv, qw = VectorLookup.from_parquet(stored["qpath"]), SparseLookup.from_parquet(stored["sq"])
    pairs = stored["pairs"]  # 5 distinct passages: rows 0-40 of 51
    dense, sparse = VectorShards(stored["pshards"], rows), WeightShards(stored["sshards"], rows)
    assert (
        dense_scores(pairs, qv, dense).tobytes() == dense_scores(pairs, qv, VectorShards(stored["pshards"])).tobytes()
    )
    assert (
        sparse_scores(pairs, qw, sparse).tobytes()
        == sparse_scores(pairs, qw, WeightShards(stored["sshards"])).tobytes()
    )
    assert 0 < dense.bytes_read < 0.6 * sum(p.stat().st_size for p in stored["pshards"])  # 4 of 11 row groups
    everything = pa.table(
        {"qid": [q for q in stored["qids"] for _ in stored["docids"]], "docid": stored["docids"] * 3}, schema=PAIRS
    )
    assert (
        dense_scores(everything, qv, VectorShards(stored["pshards"], rows)).tobytes()
        == dense_scores(everything, qv, VectorShards(stored["pshards"])).tobytes()
    )
    missing = pa.table({"qid": ["q0", "q1"], "docid": ["d1", "nowhere"]}, schema=PAIRS)
    with pytest.raises(MissingComponentError, match="dense: no passage for 1 passage-id.*'nowhere'"):
        dense_scores(missing, qv, VectorShards(stored["pshards"], rows))
    swapped = [*stored["docids"]]
    swapped[3], swapped[4] = swapped[4], swapped[3]
    other = CorpusRows(_corpus(tmp_path / "other.parquet", swapped))
    with pytest.raises(
        InputError, match=r"p0.parquet: row 5 of row group 0 holds docid 'd4', the corpus has 'd3' there"
    ):
        dense_scores(pairs, qv, VectorShards(stored["pshards"], other))
    longer = CorpusRows(_corpus(tmp_path / "longer.parquet", [*stored["docids"], "d99"]))
    with pytest.raises(MissingComponentError, match="sparse: no passage .*'d99'"):
        sparse_scores(
            pa.table({"qid": ["q0"], "docid": ["d99"]}, schema=PAIRS), qw, WeightShards(stored["sshards"], longer)
        )


def test_corpus_rows_read_texts_of_the_needed_row_groups_only(tmp_path: Path) -> None:
    docids = [f"d{i}" for i in range(30)]
    rows = CorpusRows(_corpus(tmp_path / "corpus.parquet", docids))
    first = rows.bytes_read
    texts = rows.texts(pa.array(["d2", "d25", "d2"]), None)
    assert texts == {"d2": "text of d2", "d25": "text of d25"}
    two_groups = rows.bytes_read - first
    rows.texts(pa.array(docids), None)
    assert 0 < two_groups < (rows.bytes_read - first - two_groups) / 2  # 2 of 5 row groups
    with pytest.raises(InputError, match=r"corpus.parquet: 1 docid\(s\) are not in the corpus, e.g. 'zz'"):
        rows.texts(pa.array(["d1", "zz"]), None)


def test_score_components_and_multivec_callable(stored) -> None:
    pairs = stored["pairs"]
    calls = []

    def multivec(p: pa.Table) -> np.ndarray:
        calls.append(p)
        return np.arange(len(p), dtype=np.float64) / 10

    table = score_components(
        pairs,
        query_vectors=VectorLookup.from_parquet(stored["qpath"]),
        passage_vectors=VectorLookup.from_parquet(stored["pshards"], needed=pairs.column("docid")),
        query_weights=SparseLookup.from_parquet(stored["sq"]),
        passage_weights=SparseLookup.from_parquet(stored["sshards"], needed=pairs.column("docid")),
        multivec=multivec,
    )
    assert table.schema == COMPONENTS
    assert pairs_of(table) == pairs_of(pairs) and calls[0].equals(pairs)
    assert table.column("multivec").to_pylist() == [i / 10 for i in range(len(pairs))]
    no_multivec = score_components(
        pairs,
        query_weights=SparseLookup.from_parquet(stored["sq"]),
        passage_weights=SparseLookup.from_parquet(stored["sshards"]),
    )
    assert no_multivec.column("multivec").null_count == len(pairs)
    assert no_multivec.column("dense").null_count == len(pairs)
    with pytest.raises(MissingComponentError, match="multivec: .*NaN"):
        score_components(pairs, multivec=lambda p: np.full(len(p), np.nan))
    with pytest.raises(MissingComponentError, match="multivec: .*scores for 6"):
        score_components(pairs, multivec=lambda p: np.zeros(2))


# --------------------------------------------------------------------------- fusion


def components_example() -> pa.Table:
    pairs = pa.table(
        {"qid": ["q2", "q2", "q2", "d1", "d1"], "docid": ["d1", "d2", "q2", "d1", "d9"]},
        schema=PAIRS,
    )
    return components_table(
        pairs,
        dense=[0.5, 0.7, 0.1, 0.9, 0.2],
        sparse=[0.3, 0.0, 0.9, 0.05, 0.4],
        multivec=[0.6, 0.4, 0.2, 0.8, 0.3],
    )


def test_fuse_equals_weighted_sum_by_hand() -> None:
    comp = components_example()
    weights = {"dense": 0.4, "sparse": 0.2, "multivec": 0.4}
    run = fuse(comp, weights)
    by_hand = {
        (q, d): 0.4 * de + 0.2 * sp + 0.4 * mv
        for q, d, de, sp, mv in zip(*(comp.column(c).to_pylist() for c in COMPONENTS.names), strict=True)
    }
    got = {(r["qid"], r["docid"]): r["score"] for r in run.to_pylist()}
    assert got == pytest.approx(by_hand, rel=1e-15, abs=1e-15)
    # Ranked by fused score, ties by docid; queries in their order; qid == docid kept.
    assert [(r["qid"], r["docid"], r["rank"]) for r in run.to_pylist()] == [
        ("q2", "d1", 1),  # 0.2 + 0.06 + 0.24 = 0.50
        ("q2", "d2", 2),  # 0.28 + 0 + 0.16 = 0.44
        ("q2", "q2", 3),  # 0.04 + 0.18 + 0.08 = 0.30
        ("d1", "d1", 1),
        ("d1", "d9", 2),
    ]


def test_fuse_zero_weight_ties_and_subset() -> None:
    comp = components_example()
    run = fuse(comp, {"dense": 0.0, "sparse": 1.0})
    assert run.filter(pa.compute.equal(run.column("qid"), "q2")).column("docid").to_pylist() == ["q2", "d1", "d2"]
    # Equal fused scores: docid order.
    tied = components_table(pa.table({"qid": ["q", "q"], "docid": ["b", "a"]}, schema=PAIRS), dense=[1.0, 1.0])
    assert fuse(tied, {"dense": 1.0}).column("docid").to_pylist() == ["a", "b"]
    # Only the weighted components are needed: multivec null is fine without a multivec weight.
    partial = components_table(comp.select(["qid", "docid"]), dense=[1, 2, 3, 4, 5], sparse=[0, 0, 0, 0, 0])
    assert fuse(partial, {"dense": 1.0, "sparse": 0.5}).num_rows == 5
    assert fuse(partial, {"dense": 1.0}, depth=1).column("docid").to_pylist() == ["q2", "d9"]


def test_missing_component_raises() -> None:
    comp = components_example()
    partial = components_table(comp.select(["qid", "docid"]), dense=[1, 2, 3, 4, 5])
    with pytest.raises(MissingComponentError, match="sparse: 5 of 5 candidate"):
        fuse(partial, {"dense": 1.0, "sparse": 0.0})  # even with weight 0: never taken as 0
    one_null = components_table(comp.select(["qid", "docid"]), dense=pa.array([1.0, None, 3.0, 4.0, 5.0]))
    with pytest.raises(MissingComponentError, match="dense: 1 of 5"):
        fuse(one_null, {"dense": 1.0})
    with pytest.raises(MissingComponentError, match="no such column"):
        fuse(comp.drop_columns(["multivec"]), {"multivec": 1.0})
    with pytest.raises(ValueError, match="unknown component"):
        fuse(comp, {"colbert": 1.0})
    dup = pa.concat_tables([comp, comp.slice(0, 1)])
    with pytest.raises(Exception, match="duplicate candidate"):
        fuse(dup, {"dense": 1.0})


def write_fusion(
    components: pa.Table,
    weights: dict[str, float],
    run_parquet: Path,
    run_trec: Path,
    components_parquet: Path,
    tag: str = "fusion",
    depth: int | None = None,
) -> pa.Table:
    """fuse_stage on one chunk file holding ``components``; the run it wrote."""
    chunk = run_parquet.with_name(run_parquet.name + ".chunk.parquet")
    pq.write_table(components, chunk)
    try:
        fuse_stage([chunk], weights, run_parquet, run_trec, components_parquet, tag, depth)
    finally:
        chunk.unlink()
    return read_run(run_parquet)


def test_write_fusion_run_and_components(tmp_path: Path) -> None:
    comp = components_example()
    weights = {"dense": 1.0, "sparse": 0.3, "multivec": 1.0}
    run = write_fusion(comp, weights, tmp_path / "f.parquet", tmp_path / "f.trec", tmp_path / "f.components.parquet")
    assert read_run(tmp_path / "f.parquet").equals(run)
    trec = read_trec(tmp_path / "f.trec")
    assert trec.column("score").to_pylist() == run.column("score").to_pylist()
    assert {line.split()[5] for line in (tmp_path / "f.trec").read_text().splitlines()} == {"fusion"}
    saved = pq.read_table(tmp_path / "f.components.parquet")
    assert saved.select(COMPONENTS.names).equals(comp)
    assert b"miracl_eval.weights" in saved.schema.metadata
    # A failed fusion writes nothing.
    with pytest.raises(MissingComponentError):
        write_fusion(
            components_table(comp.select(["qid", "docid"]), dense=[1, 2, 3, 4, 5]),
            {"sparse": 1.0},
            tmp_path / "g.parquet",
            tmp_path / "g.trec",
            tmp_path / "g.c.parquet",
        )
    assert not list(tmp_path.glob("g*")) and not list(tmp_path.glob(".g*"))


def test_fuse_stage_fuses_chunk_by_chunk_as_the_whole(tmp_path: Path) -> None:
    comp = components_example()
    weights = {"dense": 1.0, "sparse": 0.3}
    whole = write_fusion(comp, weights, tmp_path / "w.parquet", tmp_path / "w.trec", tmp_path / "w.c.parquet", "t", 2)
    chunks = [tmp_path / "c0.parquet", tmp_path / "c1.parquet"]
    pq.write_table(comp.slice(0, 3), chunks[0])  # query q2
    pq.write_table(comp.slice(3), chunks[1])  # query d1
    assert fuse_stage(chunks, weights, tmp_path / "r.parquet", tmp_path / "r.trec", tmp_path / "c.parquet", "t", 2) == 5
    assert read_run(tmp_path / "r.parquet").equals(whole)
    assert (tmp_path / "r.trec").read_bytes() == (tmp_path / "w.trec").read_bytes()
    kept = pq.read_table(tmp_path / "c.parquet")
    assert kept.equals(pq.read_table(tmp_path / "w.c.parquet")) and kept.schema.metadata[b"miracl_eval.weights"]
    with pytest.raises(InputError, match="query 'q2' is also in an earlier chunk"):
        fuse_stage(
            [chunks[0], chunks[0]], weights, tmp_path / "x.parquet", tmp_path / "x.trec", tmp_path / "x.c", "t", 2
        )
    assert not list(tmp_path.glob("x*")) and not list(tmp_path.glob(".x*"))


def test_end_to_end_from_runs(stored, tmp_path: Path) -> None:
    """Two runs -> union -> exact components from stored representations -> fused run."""
    dense_run = run_table({"q0": [("d1", 0.9), ("q0", 0.8)], "q1": [("d2", 0.5)]})
    sparse_run = run_table({"q0": [("d3", 4.0), ("d1", 2.0)], "q1": [("d2", 1.0), ("d4", 0.5)]})
    pairs = candidate_union(dense_run, sparse_run)
    qv = VectorLookup.from_parquet(stored["qpath"])
    pv = VectorLookup.from_parquet(stored["pshards"], needed=pairs.column("docid"))
    qw = SparseLookup.from_parquet(stored["sq"])
    pw = SparseLookup.from_parquet(stored["sshards"], needed=pairs.column("docid"))
    comp = score_components(pairs, query_vectors=qv, passage_vectors=pv, query_weights=qw, passage_weights=pw)
    run = write_fusion(
        comp, {"dense": 1.0, "sparse": 0.3}, tmp_path / "r.parquet", tmp_path / "r.trec", tmp_path / "c.parquet"
    )
    hits: dict[str, list[tuple[str, float]]] = {}
    for q, d in pairs_of(pairs):
        dense = float(stored["qvec"][stored["qids"].index(q)] @ stored["pvec"][stored["docids"].index(d)])
        sparse = sparse_dot(stored["qweights"][q], stored["pweights"][d])
        hits.setdefault(q, []).append((d, 1.0 * dense + 0.3 * sparse))
    expected = rank_hits(hits)
    assert pairs_of(run) == pairs_of(expected)
    np.testing.assert_allclose(run.column("score").to_numpy(), expected.column("score").to_numpy(), rtol=1e-12)
    assert ("q0", "q0") in pairs_of(run)


def test_a_jobs_candidates_per_query_follow_its_list_hybrid_or_reranker() -> None:
    from miracl_eval.fusion.candidates import candidates_per_job

    config = {
        "hits": 1000,
        "models": {"m3": {"rerank_depth": 100}},
        "hybrids": {"h": {"systems": ["bm25", "m3/dense", "m3/sparse"], "depth": 1000}},
        "rerankers": {"ce": {"depth": 50}},
    }
    assert candidates_per_job("union_components", {"model": "m3", "part": "sw", "chunk": "0000"}, config) == 2000
    assert candidates_per_job("rerank_components", {"model": "m3", "part": "sw", "chunk": "0000"}, config) == 100
    assert candidates_per_job("fuse", {"model": "m3", "part": "sw", "method": "dense+sparse"}, config) == 2000
    assert candidates_per_job("fuse", {"model": "m3", "part": "sw", "method": "all"}, config) == 100
    assert candidates_per_job("hybrid", {"hybrid": "h", "part": "sw"}, config) == 3000
    for name in ("reranker_scores", "reranked_run"):
        assert candidates_per_job(name, {"reranker": "ce", "first": "bm25", "part": "sw"}, config) == 50
    assert candidates_per_job("bm25_search", {"part": "sw"}, config) == 0
