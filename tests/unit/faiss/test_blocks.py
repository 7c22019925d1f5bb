"""Exact search in blocks and their merge give the run of one flat index (Faiss IndexFlatIP) of all passages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from miracl_eval import schemas
from miracl_eval.errors import MiraclEvalError
from miracl_eval.faiss import blocks
from miracl_eval.faiss import storage as storage_module
from miracl_eval.faiss.blocks import block_search, calibrate, merge_blocks, read_ranges
from miracl_eval.faiss.storage import STORAGES
from miracl_eval.runs import rank_table
from tests.helpers import write_vectors

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


def _stored_scores(corpus: dict, q: np.ndarray, storage: str, ranges: np.ndarray | None) -> np.ndarray:
    """The oracle of a view's scores, in exact arithmetic: sentence-transformers' int8 and ubinary codes
    (int64 dot products), the passages rounded to float16 (quarter units: every sum exact)."""
    p = corpus["vecs"]
    if storage == "int8":
        a, b = (quant().quantize_embeddings(x, "int8", ranges=ranges).astype(np.int64) for x in (q, p))
        return (a @ b.T).astype(np.float64)
    if storage == "binary":
        signs = [np.unpackbits(quant().quantize_embeddings(x, "ubinary"), axis=1)[:, :DIM].astype(np.int64) * 2 - 1
                 for x in (q, p)]  # fmt: skip
        return (signs[0] @ signs[1].T).astype(np.float64)
    return q.astype(np.float64) @ p.astype(np.float16).astype(np.float64).T


def quant():  # type: ignore[no-untyped-def]
    return pytest.importorskip("sentence_transformers.util.quantization")


def _ranked(corpus: dict, part: str, scores: np.ndarray, hits: int) -> pa.Table:
    qids = pa.array([f"{part}{i}" for i in range(len(scores))])
    qpos = np.repeat(np.arange(len(scores)), scores.shape[1])
    return rank_table(qids, qpos, pa.array(corpus["docids"] * len(scores)), scores.ravel(), depth=hits)


def _views_run(corpus: dict, tmp_path: Path, name: str, view: dict, hits: int, **kwargs) -> dict[str, pa.Table]:
    """The merged runs of block searches of a view over three blocks, per partition."""
    queries = {part: path for part, (path, _) in corpus["queries"].items()}
    files = []
    for i, group in enumerate([[0, 1], [2], [3]]):
        out = tmp_path / f"{name}-block{i}.parquet"
        block_search([corpus["shards"][s] for s in group], queries, out, hits=hits, view=view, **kwargs)
        files.append(out)
    runs = {}
    for part in queries:
        run = tmp_path / f"{name}-{part}.parquet"
        merge_blocks(files, part, run, tmp_path / f"{name}-{part}.trec", hits=hits, rescore=kwargs.get("rescore", 0))
        runs[part] = pq.read_table(run)
    return runs


@pytest.mark.parametrize("storage", ["float16", "int8", "binary"])
@pytest.mark.parametrize("hits", [1, 10, 150])
def test_views_in_blocks_equal_exact_arithmetic_on_their_codes(
    corpus: dict, tmp_path: Path, storage: str, hits: int
) -> None:
    """Each storage's run over three blocks (every tie of a block's last hit kept; ties ranked by docid)
    equals exact arithmetic on sentence-transformers' codes: Faiss's Hamming kernels for binary, torch's
    int8 products for int8, float16 widened for float16."""
    ranges = tmp_path / "ranges.parquet"
    calibrate(corpus["shards"], ranges, {}, sample=10_000)  # every passage calibrates
    want_ranges = read_ranges(ranges)
    runs = _views_run(corpus, tmp_path, storage, {"storage": storage}, hits, ranges=ranges, memory_mb=1)
    for part, (_, q) in corpus["queries"].items():
        want = _ranked(corpus, part, _stored_scores(corpus, q, storage, want_ranges), hits)
        assert runs[part].select(["qid", "docid", "rank"]).equals(want.select(["qid", "docid", "rank"]))
        np.testing.assert_array_equal(runs[part]["score"].to_numpy(), want["score"].to_numpy())


@pytest.mark.parametrize("rounds", [1, 2])
def test_rescoring_ranks_the_top_stored_hits_by_float32_in_rounds(
    corpus: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, rounds: int
) -> None:
    """The top `rescore` of all blocks by the binary scores (ties by docid), ranked by float32 products;
    with each chunk's pairs over the round's budget, every chunk is rescored in a round of its own (the
    block read again each time), with the same run."""
    if rounds > 1:
        monkeypatch.setattr(blocks, "RESCORE_PAIR_BYTES", 1 << 30)
    caplog.set_level("INFO", logger="miracl_eval.faiss")
    runs = _views_run(corpus, tmp_path, "bin", {"storage": "binary"}, 1000, rescore=25)
    assert f"rescored in {rounds} round(s)" in caplog.text  # the two partitions' chunks
    for part, (_, q) in corpus["queries"].items():
        chosen = _ranked(corpus, part, _stored_scores(corpus, q, "binary", None), 25)
        floats = q.astype(np.float64) @ corpus["vecs"].astype(np.float64).T
        index = {d: i for i, d in enumerate(corpus["docids"])}
        qpos = np.array([int(x[len(part) :]) for x in chosen["qid"].to_pylist()])
        score = floats[qpos, [index[d] for d in chosen["docid"].to_pylist()]]
        want = rank_table(pa.array([f"{part}{i}" for i in range(len(q))]), qpos, chosen["docid"], score, depth=1000)
        assert runs[part].select(["qid", "docid", "rank"]).equals(want.select(["qid", "docid", "rank"]))
        np.testing.assert_array_equal(runs[part]["score"].to_numpy(), want["score"].to_numpy())


def test_the_gpu_path_of_every_storage_with_cpu_tensors(
    corpus: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No GPU here: the GPU path (TorchScores for every storage, the top hits chosen by torch) run on CPU
    tensors gives the CPU path's runs."""
    ranges = tmp_path / "ranges.parquet"
    calibrate(corpus["shards"], ranges, {}, sample=10_000)
    cpu = {s: _views_run(corpus, tmp_path, f"cpu-{s}", {"storage": s}, 10, ranges=ranges) for s in STORAGES}
    made: list[str] = []

    def on_cpu(stored, device: str):  # type: ignore[no-untyped-def]
        made.append(device)
        return storage_module.TorchScores(stored, "cpu", slab=64)

    monkeypatch.setattr(blocks, "_resolve", lambda device: "cuda:0")
    monkeypatch.setattr(blocks, "TorchScores", on_cpu)
    for s in STORAGES:
        gpu = _views_run(corpus, tmp_path, f"gpu-{s}", {"storage": s}, 10, ranges=ranges, device="cuda")
        for part in cpu[s]:
            assert gpu[part].select(["qid", "docid", "rank"]).equals(cpu[s][part].select(["qid", "docid", "rank"]))
            np.testing.assert_allclose(gpu[part]["score"].to_numpy(), cpu[s][part]["score"].to_numpy(), atol=1e-6)
    assert made == ["cuda:0"] * 3 * len(STORAGES)


@pytest.mark.parametrize("view", [{"storage": "binary"}, {"storage": "int8"}, {"storage": "binary", "rescore": 100}])
def test_a_block_is_held_in_its_storage_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, view: dict) -> None:
    """80,000 passages of 64 dimensions are 20 MB of float32 vectors, 5 MB of int8 codes and 0.6 MB of
    bits: the block is read into its storage a batch at a time and rescored in slices, so the search's
    peak of numpy memory (tracemalloc) stays under half the float32 block (read batches of 1,000 here;
    holding the block in float32 first, as before, peaked at 28 MB for half as many passages)."""
    import tracemalloc

    rng = np.random.default_rng(3)
    dim, n = 64, 80_000
    shards = []
    for s in range(4):
        vecs = rng.standard_normal((n // 4, dim)).astype(np.float32)
        shards.append(write_vectors(tmp_path / f"s{s}.parquet", [f"d{s}-{i}" for i in range(n // 4)], vecs))
    q = rng.standard_normal((200, dim)).astype(np.float32)
    queries = {"x": write_vectors(tmp_path / "q.parquet", [f"q{i}" for i in range(200)], q, key="qid")}
    ranges = tmp_path / "ranges.parquet"
    calibrate(shards, ranges, {}, sample=5_000)
    monkeypatch.setattr(blocks, "READ_ROWS", 1_000)
    monkeypatch.setattr(blocks, "RESCORE_SLICE", 1_000)
    rescore = view.pop("rescore", 0)
    pytest.importorskip("torch")  # imported before: its modules' memory is not the search's
    tracemalloc.start()
    try:
        block_search(shards, queries, tmp_path / "out.parquet", hits=100, memory_mb=1, view=view, ranges=ranges,
                     rescore=rescore)  # fmt: skip
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    float32_block = n * dim * 4
    assert peak < float32_block / 2, f"peak {peak / 2**20:.1f} MiB, the float32 block {float32_block / 2**20:.1f} MiB"
    assert pq.read_table(tmp_path / "out.parquet").num_rows >= 200 * 100


def test_gpu_scores_turn_tf32_off(monkeypatch) -> None:
    """An environment that turns TF32 on (NGC containers' TORCH_ALLOW_TF32_CUBLAS_OVERRIDE) gets exact float32
    products in a GPU search: the scorer turns it off (checked without a GPU: the device is not touched)."""
    torch = pytest.importorskip("torch")
    from miracl_eval.faiss import storage

    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        stored = storage.Stored(np.eye(4, 8, dtype=np.float32), "float32")
        monkeypatch.setattr(storage, "_tensor", lambda data, *a: type("T", (), {"to": lambda self, d: data})())
        probed = []  # the product that checks it (test_storage: the probe itself) runs on the job's device
        monkeypatch.setattr(storage, "uses_tf32", lambda mm, torch, device: probed.append(str(device)) or False)
        storage.TorchScores(stored, "cuda")
        assert torch.backends.cuda.matmul.allow_tf32 is False and probed == ["cuda"]
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


CALIBRATE = """
import sys, tracemalloc
import pyarrow as pa
from miracl_eval.faiss.blocks import calibrate
out, shards = sys.argv[1], sys.argv[2:]
calibrate(shards[:1], out, {"storage": "int8"}, sample=10, batch_rows=1024)  # the readers' imports, once
tracemalloc.start()
used = calibrate(shards, out, {"storage": "int8"}, sample=1000, batch_rows=1024)
print(used, tracemalloc.get_traced_memory()[1] + pa.default_memory_pool().max_memory())
"""


def test_calibration_holds_one_shard_whatever_the_corpus(tmp_path) -> None:
    """calibrate takes the ranges as it reads: its peak (numpy's and Arrow's, in a process of its own) is about
    a shard's, not the corpus's (it kept every batch alive through views of its sample); the ranges equal
    numpy's over the same every-k-th vectors."""
    import subprocess
    import sys

    from miracl_eval.faiss.blocks import read_ranges

    rng = np.random.default_rng(5)
    vecs = rng.standard_normal((80_000, 128)).astype(np.float32)  # 40 MB, in 40 shards of 1 MB
    shards = [
        str(write_vectors(tmp_path / f"{s:05d}.parquet", [f"d{i}" for i in range(s * 2000, (s + 1) * 2000)],
                          vecs[s * 2000 : (s + 1) * 2000], key="docid"))
        for s in range(40)
    ]  # fmt: skip
    out = tmp_path / "ranges.parquet"
    proc = subprocess.run([sys.executable, "-c", CALIBRATE, str(out), *shards], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    used, peak = map(int, proc.stdout.split())
    assert peak < 16 << 20, peak  # a shard and the reader's buffers (about 6 MB), not the corpus's 40 MB
    picked = vecs[:: len(vecs) // 1000]
    assert used == len(picked)
    np.testing.assert_array_equal(read_ranges(out), np.vstack([picked.min(0), picked.max(0)]))
