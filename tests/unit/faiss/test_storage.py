"""A dense model's search views (miracl_eval.faiss.storage): truncation, int8 and binary codes equal
sentence-transformers' (truncate_dim, quantize_embeddings), and their scores equal exact arithmetic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from miracl_eval.errors import InputError
from miracl_eval.faiss import blocks
from miracl_eval.faiss.storage import Stored, int8_ranges, pack_binary, quantize_int8, truncate
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


@pytest.mark.parametrize("d", [64, 70, 2048])  # 70: a last byte half used; 2048: int8 sums beyond float32's exact range
def test_scores_are_exact_for_every_storage(d: int) -> None:
    rng = np.random.default_rng(d)
    corpus, queries = unit(rng, 300, d), unit(rng, 9, d)
    ranges = int8_ranges([corpus])
    int8 = Stored(corpus, "int8", ranges).scores(queries)
    want = quantize_int8(queries, ranges).astype(np.int64) @ quantize_int8(corpus, ranges).astype(np.int64).T
    np.testing.assert_array_equal(int8, want.astype(np.float32))
    signs = lambda x: np.where(x > 0, 1, -1)  # noqa: E731 - the +-1 vectors whose dot product binary scores are
    np.testing.assert_array_equal(Stored(corpus, "binary").scores(queries), signs(queries) @ signs(corpus).T)
    half = Stored(corpus, "float16").scores(queries)
    np.testing.assert_allclose(half, queries @ corpus.astype(np.float16).astype(np.float32).T, rtol=1e-5, atol=1e-6)
    assert Stored(corpus, "binary").bytes_per_vector == -(-d // 8)
    assert Stored(corpus, "int8", ranges).bytes_per_vector == d


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


def test_a_view_wider_than_the_vectors_names_the_shard(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    shard = write_vectors(tmp_path / "s.parquet", ["a", "b"], unit(rng, 2, 8))
    queries = write_vectors(tmp_path / "q.parquet", ["q"], unit(rng, 1, 8), key="qid")
    with pytest.raises(InputError, match=r"s\.parquet.*dimensions setting \(16\) exceeds its vectors' 8"):
        blocks.block_search([shard], {"sw": queries}, tmp_path / "out.parquet", hits=1, view={"dimensions": 16})
