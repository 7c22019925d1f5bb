"""The SPLADE family against a plain numpy formula over the masked LM's logits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from miracl_eval.encoders import splade
from miracl_eval.encoders.registry import get_family
from tests.helpers import BATCH_TOL, sample_passages, sample_queries

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TOL = BATCH_TOL["splade"]  # a max-pooled logit moves by up to 2.1e-5 with the batch's shape


def _load(folder, dtype: str = "float32") -> splade.SpladeEncoder:
    spec = get_family("splade").resolve({"checkpoint": str(folder), "query_max_length": 24, "passage_max_length": 64})
    return splade.load(spec, device="cpu", dtype=dtype)


def _numpy_weights(folder, texts: list[str], max_length: int) -> list[np.ndarray]:
    """Per text, one weight per vocabulary id: max over its tokens of log(1 + relu(logits)), in float64."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForMaskedLM.from_pretrained(folder).eval()
    out = []
    for text in texts:  # one at a time: no padding
        ids = tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0].double().numpy()  # [tokens, vocab]
        out.append(np.log1p(np.maximum(logits, 0.0)).max(axis=0))
    return out


@pytest.mark.parametrize("role,max_length", [("query", 24), ("passage", 64)])
def test_weights_equal_the_formula(tiny_checkpoints, role, max_length):
    folder = tiny_checkpoints("mlm")
    enc = _load(folder)
    texts = [*sample_queries(), "x"] if role == "query" else [*sample_passages(), ""]
    got = enc.encode(texts, role, batch_size=4)
    assert got.dense is None and got.sparse is not None and enc.dim is None
    want = _numpy_weights(folder, texts, max_length)
    assert max(len(enc.tokenizer(t)["input_ids"]) for t in texts) > max_length or role == "query"
    worst, kept = 0.0, 0
    for (ids, weights), full in zip(got.sparse, want, strict=True):
        assert (
            ids.dtype == np.int32 and weights.dtype == np.float32 and (np.diff(ids) > 0).all() and (weights > 0).all()
        )
        expected = np.flatnonzero(full > 0)
        differ = np.setxor1d(ids, expected)
        assert (full[differ] <= TOL).all()  # only weights within float noise of 0 may be in one list only
        worst = max(worst, float(np.abs(full[ids] - weights).max(initial=0.0)))
        kept += len(ids)
    assert worst <= TOL
    assert 3 * len(texts) < kept < 0.5 * len(texts) * enc.model.config.vocab_size  # sparse, not empty


def test_special_token_ids_are_kept_like_naver_and_pyserini(tiny_checkpoints, tmp_path):
    """No id is dropped for being a special token: the MLM's weights decide (as naver's SPLADE and pyserini)."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    model = AutoModelForMaskedLM.from_pretrained(tiny_checkpoints("mlm"))
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoints("mlm"))
    specials = sorted(tokenizer.all_special_ids)
    with torch.no_grad():
        model.cls.predictions.bias[specials] += 50.0  # every special id gets a weight in every text
    model.save_pretrained(tmp_path / "mlm")
    tokenizer.save_pretrained(tmp_path / "mlm")
    texts = sample_passages(per_lang=1)
    want = _numpy_weights(tmp_path / "mlm", texts, 64)
    for (ids, weights), full in zip(
        _load(tmp_path / "mlm").encode(texts, "passage", 4).sparse or [], want, strict=True
    ):
        assert set(specials) <= set(ids.tolist())
        np.testing.assert_allclose(weights, full[ids], atol=TOL)


@pytest.mark.parametrize("dtype,min_shared,median_tol", [("bfloat16", 0.75, 0.06), ("float16", 0.9, 0.01)])
def test_half_precision_path(tiny_checkpoints, dtype, min_shared, median_tol):
    """The CUDA code path (the model in bf16/fp16) run on the CPU: float32 weights close to float32's.

    The random model's logits are large, so half precision moves weights by a few hundredths
    (the median) and ids with weights near 0 in or out of the list.
    """
    folder = tiny_checkpoints("mlm")
    full, half = _load(folder), _load(folder, dtype)
    assert half.model.dtype == getattr(torch, dtype)
    texts = sample_passages(per_lang=2)
    diffs = []
    ours, theirs = full.encode(texts, "passage", 4).sparse, half.encode(texts, "passage", 4).sparse
    assert ours is not None and theirs is not None
    for (ta, wa), (tb, wb) in zip(ours, theirs, strict=True):
        assert wb.dtype == np.float32 and (wb > 0).all()
        a = dict(zip(ta.tolist(), wa.tolist(), strict=True))
        b = dict(zip(tb.tolist(), wb.tolist(), strict=True))
        shared = a.keys() & b.keys()
        assert len(shared) >= min_shared * len(a.keys() | b.keys())
        diffs.extend(abs(a[k] - b[k]) for k in shared)
    assert np.median(diffs) <= median_tol
