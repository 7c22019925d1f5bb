"""A dense model's search views (miracl_eval.faiss.storage): truncation, int8 and binary codes equal
sentence-transformers' (truncate_dim, quantize_embeddings), and their scores equal exact arithmetic."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from miracl_eval.errors import InputError, MiraclEvalError
from miracl_eval.faiss import blocks, storage
from miracl_eval.faiss.storage import (
    Stored,
    TorchScores,
    bytes_per_vector,
    hamming_top,
    int8_ranges,
    pack_binary,
    quantize_int8,
    truncate,
)
from tests.helpers import write_vectors

quant = pytest.importorskip("sentence_transformers.util.quantization")


def unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_truncation_equals_sentence_transformers_truncate_dim(tiny_checkpoints) -> None:
    st = pytest.importorskip("sentence_transformers")
    model = st.SentenceTransformer(str(tiny_checkpoints("xlm-r")), device="cpu")
    texts = ["una casa", "the first book", "ndani ya nyumba"]
    full = model.encode(texts, convert_to_numpy=True, normalize_embeddings=True)
    short = model.encode(texts, convert_to_numpy=True, normalize_embeddings=True, truncate_dim=16)
    # sentence-transformers truncates, then normalises (normalize_embeddings): as a view of a normalising model
    np.testing.assert_allclose(truncate(full, 16, normalize=True), short, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(truncate(full, 16, normalize=False), full[:, :16])
    with pytest.raises(ValueError, match="dimensions 99"):
        truncate(full[:, :32], 99, True)


def test_int8_and_binary_codes_equal_quantize_embeddings() -> None:
    rng = np.random.default_rng(7)
    corpus, queries = unit(rng, 500, 64), unit(rng, 20, 64)
    sample = corpus[::5]  # a calibration sample, as the int8_ranges rule takes one
    ranges = int8_ranges([sample[:40], sample[40:]])
    np.testing.assert_array_equal(ranges, quant._get_quantization_ranges(corpus, "int8", sample))
    for x in (corpus, queries):
        np.testing.assert_array_equal(quantize_int8(x, ranges), quant.quantize_embeddings(x, "int8", ranges=ranges))
        np.testing.assert_array_equal(pack_binary(x), quant.quantize_embeddings(x, "ubinary"))
    constant = np.ones((3, 4), np.float32)  # a dimension with one value: its step is 1, as theirs
    np.testing.assert_array_equal(
        quantize_int8(constant, int8_ranges([constant])),
        quant.quantize_embeddings(constant, "int8", ranges=int8_ranges([constant])),
    )


def signs(x: np.ndarray) -> np.ndarray:
    """The ±1 vectors whose dot product binary scores are."""
    return np.where(x > 0, 1, -1).astype(np.int64)


# 70: a last byte half used and int8 rows padded to 72 codes; 2048: int8 sums beyond float32's exact range.
# 300 passages in slabs of 64: several slabs and a last one of 44 rows (padded to 48); 9 queries (padded to 32).
@pytest.mark.parametrize("d", [64, 70, 2048])
def test_torch_scores_are_exact_for_every_storage(d: int) -> None:
    faiss = pytest.importorskip("faiss")
    rng = np.random.default_rng(d)
    corpus, queries = unit(rng, 300, d), unit(rng, 9, d)
    ranges = int8_ranges([corpus])

    def scores(storage: str, r: np.ndarray | None = None) -> np.ndarray:
        return TorchScores(Stored(corpus, storage, r), "cpu", slab=64).scores(queries).numpy()

    # int8: the integer dot product of sentence-transformers' codes, exactly (int64 here: no rounding)
    codes, qcodes = (quant.quantize_embeddings(x, "int8", ranges=ranges).astype(np.int64) for x in (corpus, queries))
    np.testing.assert_array_equal(scores("int8", ranges), (qcodes @ codes.T).astype(np.float32))
    # binary: the ±1 dot product, exactly; and Faiss's Hamming distances: d - 2 H
    binary = scores("binary")
    np.testing.assert_array_equal(binary, signs(queries) @ signs(corpus).T)
    index = faiss.IndexBinaryFlat(8 * -(-d // 8))
    index.add(pack_binary(corpus))
    hamming, cols = index.search(pack_binary(queries), len(corpus))
    np.testing.assert_array_equal(np.take_along_axis(binary, cols, axis=1), d - 2 * hamming)
    # float16: the passages in half precision, the queries in float32, summed in float32
    half = scores("float16")
    np.testing.assert_allclose(half, queries @ corpus.astype(np.float16).astype(np.float32).T, rtol=0, atol=1e-6)
    np.testing.assert_allclose(scores("float32"), queries @ corpus.T, rtol=0, atol=1e-6)
    assert Stored(corpus, "binary").bytes_per_vector == -(-d // 8) == bytes_per_vector("binary", d)
    assert Stored(corpus, "int8", ranges).bytes_per_vector == d == bytes_per_vector("int8", d)
    assert Stored(corpus, "float16").bytes_per_vector == 2 * d == bytes_per_vector("float16", d)


def test_a_block_is_filled_in_its_storage_batch_by_batch() -> None:
    rng = np.random.default_rng(5)
    corpus = unit(rng, 50, 20)
    ranges = int8_ranges([corpus])
    for kind in storage.STORAGES:
        stored = Stored.allocate(50, 20, kind, ranges)
        for start in range(0, 50, 16):
            stored.put(start, corpus[start : start + 16])
        np.testing.assert_array_equal(stored.data, Stored(corpus, kind, ranges).data)
        assert stored.data.nbytes == 50 * bytes_per_vector(kind, 20)


TF32_ENV = """
import torch
from miracl_eval.faiss import storage
before = torch.get_float32_matmul_precision()
storage.exact_float32_products(torch, "cpu")
print(before, torch.get_float32_matmul_precision())
"""


def test_tf32_products_are_told_apart_and_refused_where_they_stay() -> None:
    """cuBLAS with TF32 rounds float32 inputs to 10 mantissa bits; here a CPU stand-in for it. The probe tells
    it from float32 products; a process started with NGC's TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 (torch reads it
    at import: TF32 on) gets float32 products ("highest"); a product that still uses TF32 is an error."""
    torch = pytest.importorskip("torch")

    def tf32_mm(a, b):
        def tf32(x):  # the 13 low mantissa bits dropped
            return (x.contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32)

        return torch.mm(tf32(a), tf32(b))

    assert storage.uses_tf32(tf32_mm, torch, "cpu") and not storage.uses_tf32(torch.mm, torch, "cpu")
    env = {**os.environ, "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}
    out = subprocess.run([sys.executable, "-c", TF32_ENV], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["high", "highest"]
    still = types.SimpleNamespace(**{k: getattr(torch, k) for k in ("full", "ones", "float32", "backends")}, mm=tf32_mm)
    with pytest.raises(MiraclEvalError, match=r"on cpu use TF32 although torch was told not to"):
        storage.exact_float32_products(still, "cpu")


def test_half_precision_products_keep_the_float32_query(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU, float16 is multiplied in half precision (float32 accumulation and output): the query's
    low part keeps its float32 precision. Here a CPU stand-in for that product: halves multiplied
    exactly in float32 (11 + 11 significant bits) and summed in float32."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(storage, "_half_mm", lambda a, b: torch.mm(a.to(torch.float32), b.to(torch.float32)))
    rng = np.random.default_rng(11)
    corpus, queries = unit(rng, 500, 384), unit(rng, 20, 384)
    scorer = TorchScores(Stored(corpus, "float16"), "cpu", slab=128)
    scorer.half_native = True  # what a GPU with torch.mm(..., out_dtype=torch.float32) uses
    want = queries @ corpus.astype(np.float16).astype(np.float32).T
    got = scorer.scores(queries).numpy()
    # float32 rounding only (the query rounded to half alone would be off by about 1e-4)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "d, n, hits, ranged",
    [(12, 3000, 1, True), (12, 3000, 3, True), (12, 3000, 900, False), (16, 50, 80, False), (1024, 4000, 30, False)],
)
def test_hamming_top_keeps_the_top_hits_and_every_tie_of_the_last(
    monkeypatch: pytest.MonkeyPatch, d: int, n: int, hits: int, ranged: bool
) -> None:
    """Faiss's Hamming kernels give each query's top hits and all ties of the last hit: with 12 bits
    hundreds of passages tie, beyond the hits Faiss's k-NN returns (then found by its range search)."""
    faiss = pytest.importorskip("faiss")
    radii: list[int] = []
    search = faiss.hamming_range_search
    monkeypatch.setattr(faiss, "hamming_range_search", lambda *a: radii.append(a[4]) or search(*a))
    rng = np.random.default_rng(d + hits)
    corpus, queries = rng.standard_normal((n, d)).astype(np.float32), rng.standard_normal((15, d)).astype(np.float32)
    rows, cols, scores = hamming_top(pack_binary(corpus), pack_binary(queries), d, hits)
    assert bool(radii) == ranged
    exact = signs(queries) @ signs(corpus).T
    keep = exact >= np.sort(exact, axis=1)[:, ::-1][:, min(hits, n) - 1 : min(hits, n)]
    want_rows, want_cols = np.nonzero(keep)  # row-major: rows, then passages ascending
    np.testing.assert_array_equal(rows, want_rows)
    np.testing.assert_array_equal(cols, want_cols)
    np.testing.assert_array_equal(scores, exact[want_rows, want_cols].astype(np.float32))
    assert scores.dtype == np.float32


def test_calibration_takes_every_kth_vector_over_the_shards(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    vecs = unit(rng, 250, 16)
    shards = [write_vectors(tmp_path / f"{i}.parquet", [f"d{j}" for j in range(i * 100, min(250, i * 100 + 100))],
                            vecs[i * 100 : i * 100 + 100]) for i in range(3)]  # fmt: skip
    used = blocks.calibrate(shards, tmp_path / "ranges.parquet", {"dimensions": 8, "normalize": True}, sample=50)
    assert used == 50  # every 5th of 250
    np.testing.assert_array_equal(
        blocks.read_ranges(tmp_path / "ranges.parquet"), int8_ranges([truncate(vecs[::5], 8, True)])
    )


def test_a_view_wider_than_the_vectors_names_the_setting_and_the_shard(tmp_path: Path) -> None:
    """Known only once the vectors exist: the search job and the int8 ranges' job each stop with the key and the
    file (the ranges' job raised a bare ValueError before), and leave nothing."""
    rng = np.random.default_rng(1)
    shard = write_vectors(tmp_path / "s.parquet", ["a", "b"], unit(rng, 2, 8))
    queries = write_vectors(tmp_path / "q.parquet", ["q"], unit(rng, 1, 8), key="qid")
    want = r"s\.parquet: models\.me5-small@16\.dimensions is 16, more than the 8 dimensions .* at most 8"
    with pytest.raises(InputError, match=want):
        blocks.block_search(
            [shard], {"sw": queries}, tmp_path / "out.parquet", hits=1, view={"dimensions": 16}, model="me5-small@16"
        )
    view = {"dimensions": 16, "storage": "int8", "normalize": True}
    with pytest.raises(InputError, match=want):
        blocks.calibrate([shard], tmp_path / "ranges.parquet", view, sample=10, model="me5-small@16")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.parquet", "s.parquet"]


def test_calibration_passages_beyond_the_corpus_calibrate_on_all_of_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rng = np.random.default_rng(2)
    vecs = unit(rng, 7, 8)
    shard = write_vectors(tmp_path / "s.parquet", [f"d{i}" for i in range(7)], vecs)
    with caplog.at_level("INFO"):
        used = blocks.calibrate([shard], tmp_path / "r.parquet", {"storage": "int8"}, sample=100_000, model="m@int8")
    assert used == 7 and "calibration_passages (100000) is more than the corpus's 7 passages" in caplog.text
    np.testing.assert_array_equal(blocks.read_ranges(tmp_path / "r.parquet"), int8_ranges([vecs]))


@pytest.mark.parametrize("rescore", [5, 40, 1000])  # 40: more than a block's 25 passages; 1000: than all of them
def test_rescoring_more_hits_than_the_run_keeps_is_sentence_transformers_recipe(tmp_path: Path, rescore: int) -> None:
    """``rescore`` larger than ``hits`` (sentence-transformers' rescore_multiplier): the top ``rescore`` by the
    binary scores, all blocks together, ranked by float32 and cut to ``hits``; smaller: at most ``rescore``."""
    rng = np.random.default_rng(3)
    p, q = unit(rng, 50, 16), unit(rng, 3, 16)
    ids = [f"d{i:02d}" for i in range(50)]
    shards = [
        write_vectors(tmp_path / f"s{i}.parquet", ids[i * 25 : i * 25 + 25], p[i * 25 : i * 25 + 25]) for i in (0, 1)
    ]
    queries = write_vectors(tmp_path / "q.parquet", ["q0", "q1", "q2"], q, key="qid")
    view, hits = {"storage": "binary"}, 10
    outs = [tmp_path / f"b{i}.parquet" for i in (0, 1)]
    for shard, out in zip(shards, outs, strict=True):
        blocks.block_search([shard], {"sw": queries}, out, hits=hits, view=view, rescore=rescore)
    blocks.merge_blocks(outs, "sw", tmp_path / "run.parquet", tmp_path / "run.trec", hits=hits, rescore=rescore)
    run = pq.read_table(tmp_path / "run.parquet").to_pylist()
    signs = lambda x: np.where(x > 0, 1, -1)  # noqa: E731
    binary, floats = signs(q) @ signs(p).T, q @ p.T
    for row, qid in enumerate(["q0", "q1", "q2"]):
        top = sorted(range(50), key=lambda j: (-binary[row, j], ids[j]))[:rescore]
        want = sorted(top, key=lambda j: (-floats[row, j], ids[j]))[: min(hits, rescore)]
        got = [r["docid"] for r in sorted((r for r in run if r["qid"] == qid), key=lambda r: r["rank"])]
        assert got == [ids[j] for j in want], qid
