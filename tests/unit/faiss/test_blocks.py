"""Exact search in blocks and their merge give the run of one flat index (Faiss IndexFlatIP) of all passages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from miracl_eval import schemas
from miracl_eval.errors import MiraclEvalError
from miracl_eval.faiss.blocks import block_search, merge_blocks
from miracl_eval.runs import rank_table

faiss = pytest.importorskip("faiss")
DIM = 8


def _vectors(path: Path, key: str, ids: list[str], vecs: np.ndarray) -> Path:
    table = pa.table(
        {key: pa.array(ids), "vector": pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), DIM)},
        schema=schemas.dense_schema(DIM, key=key),
    )
    pq.write_table(table, path)
    return path


@pytest.fixture
def corpus(tmp_path: Path) -> dict:
    """500 passages of small integer-valued vectors (every product exact in float32: many ties), with
    duplicates; shards of unequal sizes; two partitions of queries."""
    rng = np.random.default_rng(7)
    vecs = rng.integers(-2, 3, size=(500, DIM)).astype(np.float32) / 4
    vecs[100:140] = vecs[0]  # 40 duplicates of passage 0
    docids = [f"d{rng.integers(1_000_000)}-{i}" for i in range(500)]  # docid order is not index order
    sizes = [100, 37, 263, 100]
    shards, start = [], 0
    for i, n in enumerate(sizes):
        shards.append(_vectors(tmp_path / f"s{i}.parquet", "docid", docids[start : start + n], vecs[start : start + n]))
        start += n
    queries = {}
    for part, n in (("ar", 23), ("zz", 14)):
        q = rng.integers(-2, 3, size=(n, DIM)).astype(np.float32) / 4
        queries[part] = (_vectors(tmp_path / f"{part}.parquet", "qid", [f"{part}{i}" for i in range(n)], q), q)
    return {"vecs": vecs, "docids": docids, "shards": shards, "queries": queries}


def _flat_run(corpus: dict, part: str, hits: int) -> pa.Table:
    """The reference: one IndexFlatIP of every passage, every score, ranked and cut by rank_table."""
    index = faiss.IndexFlatIP(DIM)
    index.add(corpus["vecs"])
    path, q = corpus["queries"][part]
    scores, labels = index.search(q, len(corpus["vecs"]))
    qids = pa.array([f"{part}{i}" for i in range(len(q))])
    qpos = np.repeat(np.arange(len(q)), labels.shape[1])
    docids = pa.array(corpus["docids"]).take(pa.array(labels.ravel()))
    return rank_table(qids, qpos, docids, scores.ravel(), depth=hits)


@pytest.mark.parametrize("hits", [1, 10, 150, 1000])  # 150: more than the 137 passages of a block; 1000: all
@pytest.mark.parametrize(
    "grouping", [[[0, 1, 2, 3]], [[0, 1], [2], [3]], [[0], [1], [2], [3]]], ids=["one", "three", "four"]
)
def test_blocks_merged_equal_one_flat_index(corpus: dict, tmp_path: Path, hits: int, grouping: list[list[int]]) -> None:
    queries = {part: path for part, (path, _) in corpus["queries"].items()}
    files = []
    for i, group in enumerate(grouping):
        out = tmp_path / f"block{i}.parquet"
        block_search([corpus["shards"][s] for s in group], queries, out, hits=hits, memory_mb=1)  # tiny query batches
        files.append(out)
    for part in ("ar", "zz"):
        run = tmp_path / f"{part}-{hits}.parquet"
        assert merge_blocks(files, part, run, tmp_path / f"{part}.trec", hits=hits) == len(corpus["queries"][part][1])
        got, want = pq.read_table(run), _flat_run(corpus, part, hits)
        assert got.select(["qid", "docid", "rank"]).equals(want.select(["qid", "docid", "rank"]))
        np.testing.assert_array_equal(got["score"].to_numpy(), want["score"].to_numpy())


def test_a_block_keeps_every_passage_tied_with_its_last_hit(corpus: dict, tmp_path: Path) -> None:
    queries = {"ar": corpus["queries"]["ar"][0]}
    out = tmp_path / "block.parquet"
    block_search(corpus["shards"], queries, out, hits=5)
    table = pq.read_table(out)
    q = corpus["queries"]["ar"][1]
    for i in range(len(q)):
        rows = table.filter(pa.compute.equal(table["qid"], f"ar{i}"))
        scores = np.sort(corpus["vecs"] @ q[i])[::-1]
        assert len(rows) == int((scores >= scores[4]).sum()) >= 5  # the top 5 and all ties of the fifth


def test_real_valued_vectors_match_faiss_to_float_rounding(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    vecs = rng.standard_normal((3000, DIM)).astype(np.float32)
    q = rng.standard_normal((50, DIM)).astype(np.float32)
    docids = [f"p{i}" for i in range(3000)]
    shards = [_vectors(tmp_path / f"s{i}.parquet", "docid", docids[i::3], vecs[i::3]) for i in range(3)]
    queries = {"x": _vectors(tmp_path / "q.parquet", "qid", [f"q{i}" for i in range(50)], q)}
    files = [tmp_path / f"b{i}.parquet" for i in range(3)]
    for shard, out in zip(shards, files, strict=True):
        block_search([shard], queries, out, hits=100)
    merge_blocks(files, "x", tmp_path / "run.parquet", tmp_path / "run.trec", hits=100)
    got = pq.read_table(tmp_path / "run.parquet")
    index = faiss.IndexFlatIP(DIM)
    index.add(vecs)
    scores, labels = index.search(q, 100)
    assert got["docid"].to_pylist() == [docids[i] for i in labels.ravel()]
    np.testing.assert_allclose(got["score"].to_numpy(), scores.ravel(), rtol=1e-6, atol=1e-6)


def test_blocks_of_other_query_chunks_are_refused(corpus: dict, tmp_path: Path) -> None:
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    block_search(corpus["shards"][:1], {"ar": corpus["queries"]["ar"][0]}, a, hits=3)
    block_search(corpus["shards"][1:2], {"zz": corpus["queries"]["zz"][0]}, b, hits=3)
    with pytest.raises(MiraclEvalError, match="other query chunks"):
        merge_blocks([a, b], "ar", tmp_path / "r.parquet", tmp_path / "r.trec")
