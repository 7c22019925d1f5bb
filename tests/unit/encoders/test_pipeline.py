"""The host pipeline: token-budget batches, tokenizer threads, outputs independent of how texts are batched."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from miracl_eval.encoders import base, pipeline
from miracl_eval.encoders.pipeline import HostSettings, plan_batches
from miracl_eval.encoders.registry import get_family
from miracl_eval.errors import InputError
from tests.helpers import BATCH_TOL, assert_same_weights, sample_passages, sample_queries

pytestmark = pytest.mark.usefixtures("one_torch_thread")
#: family -> (tiny checkpoint kind, settings)
FAMILIES = {
    "bge-m3": ("bge-m3", {"query_max_length": 32, "passage_max_length": 64}),
    "dense": (
        "xlm-r",
        {
            "pooling": "mean",
            "normalize": True,
            "passage_max_length": 64,
            "query_prefix": "query: ",
            "passage_prefix": "passage: ",
        },
    ),
    "splade": ("mlm", {"passage_max_length": 64}),
}
#: absolute tolerance per family (tests.helpers.BATCH_TOL: the measured batch-shape bounds, x10): a text
#: encoded alone and in a padded batch differ by float rounding only
ATOL = {"bge-m3": BATCH_TOL["bge-m3 sparse"], "dense": BATCH_TOL["dense"], "splade": BATCH_TOL["splade"]}
SETTINGS = [
    HostSettings(token_budget=64, max_rows=4, workers=1, window=5),
    HostSettings(token_budget=300, max_rows=256, workers=3, window=16),
    HostSettings(token_budget=100_000, max_rows=1000, workers=2, window=4096),
]


def test_batches_fill_the_token_budget_longest_first() -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 200, size=500)
    batches = plan_batches(lengths, token_budget=1000, max_rows=16)
    positions = np.concatenate(batches)
    assert sorted(positions.tolist()) == list(range(500))  # every text once
    assert np.all(np.diff(lengths[positions]) <= 0)  # longest first, across batches
    for batch in batches:
        width = lengths[batch].max()
        assert len(batch) <= 16 and (len(batch) == 1 or len(batch) * width <= 1000)
        if len(batch) < 16 and batch is not batches[-1]:
            assert (len(batch) + 1) * width > 1000  # as many rows as fit
    # a text longer than the budget still gets a batch of its own
    assert [b.tolist() for b in plan_batches(np.array([5000, 3, 3]), 100, 8)] == [[0], [1, 2]]
    # ties keep their input order
    assert [b.tolist() for b in plan_batches(np.array([2, 3, 2, 3]), 6, 2)] == [[1, 3], [0, 2]]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [*sample_passages(per_lang=3), "", *sample_queries()]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_outputs_do_not_depend_on_budget_workers_or_windows(tiny_checkpoints, texts, family) -> None:
    """Each setting gives the outputs of texts encoded one at a time (no padding at all): the same
    lexical tokens, dense vectors and weights to 1e-6 (plus 1e-5 of the value: float32 matrix
    products of other shapes round differently; see ATOL for SPLADE)."""
    kind, settings = FAMILIES[family]
    fam = get_family(family)
    enc = fam.load(fam.resolve({"checkpoint": str(tiny_checkpoints(kind)), **settings}), device="cpu")
    alone = enc.encode(texts, "passage", batch_size=1)
    for host in SETTINGS:
        got = enc.encode(texts, "passage", batch_size=host.max_rows, host=host)
        if alone.dense is not None:
            assert got.dense is not None and got.dense.shape == alone.dense.shape
            np.testing.assert_allclose(got.dense, alone.dense, atol=ATOL[family], rtol=1e-5)
        if alone.sparse is not None:
            assert got.sparse is not None and len(got.sparse) == len(alone.sparse)
            for (tokens, weights), (want_t, want_w) in zip(got.sparse, alone.sparse, strict=True):
                assert_same_weights(tokens, weights, want_t, want_w, ATOL[family])


def test_chunks_come_back_in_order_with_their_keys(tiny_checkpoints, texts) -> None:
    fam = get_family("dense")
    enc = fam.load(
        fam.resolve(
            {
                "checkpoint": str(tiny_checkpoints("xlm-r")),
                "pooling": "mean",
                "normalize": True,
                "passage_max_length": 64,
            }
        ),
        device="cpu",
    )
    chunks = [("a", texts[:7]), ("empty", []), ("b", texts[7:30]), ("c", texts[30:])]
    host = HostSettings(token_budget=200, max_rows=8, workers=2, window=6)
    got = list(pipeline.encode_stream(enc, chunks, "passage", ("dense",), host))
    assert [key for key, _ in got] == ["a", "empty", "b", "c"]
    assert [len(out["dense"]) for _, out in got] == [7, 0, 23, len(texts) - 30]
    whole = enc.encode(texts, "passage", batch_size=1).dense
    np.testing.assert_allclose(np.concatenate([out["dense"] for _, out in got]), whole, atol=BATCH_TOL["dense"])


@pytest.mark.parametrize("workers", [1, 3])
def test_tokenizing_runs_ahead_in_the_planner_on_the_tokenizers_threads(tiny_checkpoints, texts, monkeypatch, workers):
    """Not in the caller's thread nor the model's; the tokenizers library runs each call on `workers`
    threads of its own (its parallelism on with more than one)."""
    fam = get_family("bge-m3")
    enc = fam.load(fam.resolve({"checkpoint": str(tiny_checkpoints("bge-m3"))}), device="cpu")
    seen: set[str] = set()
    parallel: set[str | None] = set()
    real = base.TransformerEncoder.token_ids

    def recording(self, batch, max_length):
        seen.add(threading.current_thread().name)
        parallel.add(os.environ.get("TOKENIZERS_PARALLELISM"))
        return real(self, batch, max_length)

    monkeypatch.setattr(base.TransformerEncoder, "token_ids", recording)
    monkeypatch.setattr(pipeline, "TOKENIZE_SLICE", 2)
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    got = enc.encode(texts * 4, "passage", batch_size=8, host=HostSettings(workers=workers, window=64))
    assert seen == {"encode-planner"}
    assert parallel == {"true" if workers > 1 else "false"} and os.environ["RAYON_NUM_THREADS"] == str(workers)
    alone = enc.encode(texts * 4, "passage", batch_size=1)
    np.testing.assert_allclose(got.dense, alone.dense, atol=BATCH_TOL["dense"])  # type: ignore[arg-type]


def test_an_error_in_the_input_reaches_the_caller_and_stops_every_thread(tiny_checkpoints, texts) -> None:
    fam = get_family("dense")
    enc = fam.load(
        fam.resolve({"checkpoint": str(tiny_checkpoints("xlm-r")), "pooling": "mean", "normalize": True}), device="cpu"
    )

    def pipeline_threads() -> list[str]:
        return [t.name for t in threading.enumerate() if t.name.startswith("encode-")]

    def chunks():
        yield "a", texts[:10]
        raise InputError("corpus.parquet", "null docid or text in row 11")

    stream = pipeline.encode_stream(enc, chunks(), "passage", ("dense",), HostSettings(workers=2))
    with pytest.raises(InputError, match="row 11"):
        for _ in stream:
            pass
    assert pipeline_threads() == []
    # the caller stops early: the threads stop too
    stream = pipeline.encode_stream(enc, [("a", texts), ("b", texts)], "passage", ("dense",), HostSettings(window=4))
    next(stream)
    stream.close()
    assert pipeline_threads() == []


def test_bad_settings() -> None:
    with pytest.raises(ValueError, match="token_budget must be positive"):
        HostSettings(token_budget=0)
    with pytest.raises(ValueError, match="workers must be positive"):
        HostSettings(workers=0)
