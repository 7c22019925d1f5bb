"""The reranker families against sentence-transformers' CrossEncoder, FlagEmbedding's FlagReranker and
FlagLLMReranker, each on the same tiny random checkpoint (built offline)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from miracl_eval.errors import InputError
from miracl_eval.rerankers import base, cross_encoder, llm
from tests.helpers import BATCH_TOL, sample_passages, sample_queries

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def classifier(tiny_checkpoints) -> Path:
    """The workflow's tiny cross-encoder: an XLM-R-shaped sequence classifier with one label (a random head)."""
    return tiny_checkpoints("cross-encoder")


@pytest.fixture(scope="module")
def decoder(tiny_checkpoints) -> Path:
    """The workflow's tiny LLM reranker: a Mistral causal language model, its head saved."""
    return tiny_checkpoints("llm")


def _pairs() -> list[tuple[str, str]]:
    queries, passages = sample_queries(["en", "zh", "ar", "sw"]), sample_passages(["en", "zh", "ar", "sw"], 2)
    return [(q, p) for i, q in enumerate(queries) for j, p in enumerate(passages) if (i + j) % 3 == 0]


def _ce_spec(folder: Path, max_length: int = 512, **extra) -> dict:
    return {"family": "cross-encoder", "checkpoint": str(folder), "max_length": max_length, "sigmoid": False, **extra}


@pytest.mark.parametrize("max_length", [512, 40])
def test_cross_encoder_equals_flag_reranker(classifier, max_length, monkeypatch) -> None:
    flag_embedding = pytest.importorskip("FlagEmbedding")
    pairs = _pairs()
    monkeypatch.setattr(base, "WINDOW", 7)  # pairs tokenized and scored a window at a time
    ours = cross_encoder.load(_ce_spec(classifier, max_length), device="cpu").score(pairs, batch_size=5)
    flag = flag_embedding.FlagReranker(str(classifier), use_fp16=False, devices="cpu", max_length=max_length)
    theirs = np.asarray(flag.compute_score([list(p) for p in pairs], batch_size=4, normalize=False))
    tol = BATCH_TOL["cross-encoder"]
    np.testing.assert_allclose(ours, theirs, atol=tol, rtol=tol)  # float32 in other batches
    assert np.unique(np.round(ours, 5)).size > len(pairs) // 2  # the scores do not tie
    if max_length == 40:  # truncation at work: the passage is cut, never the query
        ce = cross_encoder.load(_ce_spec(classifier, max_length), device="cpu")
        assert max(len(x) for x in ce.inputs(pairs)) == 40


def test_cross_encoder_equals_sentence_transformers_and_its_sigmoid(classifier) -> None:
    st = pytest.importorskip("sentence_transformers")
    pairs = [(q, p[:200]) for q, p in _pairs()]  # no truncation: both tokenizations agree
    ours = cross_encoder.load(_ce_spec(classifier), device="cpu").score(pairs, batch_size=3)
    model = st.CrossEncoder(str(classifier), device="cpu", max_length=512)
    theirs = model.predict(pairs, batch_size=4, activation_fn=torch.nn.Identity())
    tol = BATCH_TOL["cross-encoder"]
    np.testing.assert_allclose(ours, theirs, atol=tol, rtol=tol)  # float32 in other batches
    squashed = cross_encoder.load(_ce_spec(classifier, sigmoid=True), device="cpu").score(pairs, batch_size=3)
    np.testing.assert_allclose(squashed, 1 / (1 + np.exp(-ours)), atol=1e-6)
    assert (np.argsort(squashed) == np.argsort(ours)).all()


@pytest.mark.parametrize("max_length", [48, 12])
def test_llm_reranker_equals_flag_llm_reranker(decoder, max_length, monkeypatch) -> None:
    flag_embedding = pytest.importorskip("FlagEmbedding")
    pairs = _pairs()
    monkeypatch.setattr(base, "WINDOW", 6)
    spec = {"family": "llm", "checkpoint": str(decoder), "max_length": max_length, "prompt": llm.DEFAULT_PROMPT,
            "query_instruction": "A: ", "passage_instruction": "B: "}  # fmt: skip
    ours = llm.load(spec, device="cpu").score(pairs, batch_size=5)
    flag = flag_embedding.FlagLLMReranker(
        str(decoder), use_fp16=False, use_bf16=False, devices="cpu", max_length=max_length
    )
    theirs = np.asarray(flag.compute_score([list(p) for p in pairs], batch_size=4))
    np.testing.assert_allclose(ours, theirs, atol=BATCH_TOL["llm"], rtol=BATCH_TOL["llm"])  # float32 in other batches
    assert np.unique(np.round(ours, 5)).size > len(pairs) // 2


def _llm_spec(decoder: Path, max_length: int = 48) -> dict:
    return {"family": "llm", "checkpoint": str(decoder), "max_length": max_length, "prompt": llm.DEFAULT_PROMPT,
            "query_instruction": "A: ", "passage_instruction": "B: "}  # fmt: skip


def _loaded(family: str, folder: Path, dtype: str):
    if family == "cross-encoder":
        return cross_encoder.load(_ce_spec(folder), device="cpu", dtype=dtype)
    return llm.load(_llm_spec(folder), device="cpu", dtype=dtype)


def test_the_llm_reranker_computes_one_logit_per_pair_not_the_vocabulary(decoder) -> None:
    """The output head is never applied over the positions (bge-reranker-v2-gemma's 256,000-token
    vocabulary at 64 pairs of ~1,060 tokens would be ~32 GiB of logits a batch): only the row of "Yes"
    meets each pair's last hidden state, and the scores are those of the model's full logits."""
    reranker = llm.load(_llm_spec(decoder), device="cpu")
    head = reranker.model.get_output_embeddings()
    calls: list[tuple[int, ...]] = []
    hook = head.register_forward_hook(lambda module, args, out: calls.append(tuple(out.shape)))
    pairs = _pairs()[:20]
    try:
        ours = reranker.score(pairs, batch_size=8)
    finally:
        hook.remove()
    assert calls == []
    with torch.inference_mode():  # the model's own forward, one pair at a time: its logits at the last token
        full = [
            float(reranker.model(input_ids=torch.tensor([ids])).logits[0, -1, reranker.yes_id])
            for ids in reranker.inputs(pairs)
        ]
    np.testing.assert_allclose(ours, full, atol=BATCH_TOL["llm"], rtol=BATCH_TOL["llm"])  # batches of 8, one alone


@pytest.mark.parametrize("family", ["cross-encoder", "llm"])
def test_half_precision_models_give_float32_scores(family, classifier, decoder) -> None:
    """In bfloat16 the model's body runs in bfloat16 but the score comes from a float32 head: scores are
    not rounded to bfloat16's 8 significant bits (which would tie close scores in a top 10). Against
    FlagEmbedding run as it runs on a GPU with ``use_fp16`` (``model.half()``, float16 logits
    upcast after; its reranker/encoder_only/base.py and decoder_only/base.py), ours in float16 differ
    by about the float16 rounding of its scores (measured: 2.0e-3 and 6.2e-3 of scores up to 7.1;
    float32 against float16 bodies differ by 0.04 and 0.29)."""
    flag_embedding = pytest.importorskip("FlagEmbedding")
    folder = classifier if family == "cross-encoder" else decoder
    pairs = _pairs()
    bf16 = _loaded(family, folder, "bfloat16").score(pairs, batch_size=4)
    representable = torch.from_numpy(bf16).to(torch.bfloat16).double().numpy()
    assert (bf16 != representable).mean() > 0.9, "scores rounded to bfloat16"
    if family == "cross-encoder":
        flag = flag_embedding.FlagReranker(str(folder), use_fp16=False, devices="cpu", max_length=512)
        kwargs: dict = {"normalize": False}
    else:
        flag = flag_embedding.FlagLLMReranker(str(folder), use_fp16=False, use_bf16=False, devices="cpu", max_length=48)
        kwargs = {}
    flag.model.half()  # what use_fp16 does on a GPU (FlagEmbedding turns it off on the CPU)
    theirs = np.asarray(flag.compute_score([list(p) for p in pairs], batch_size=4, **kwargs))
    ours = _loaded(family, folder, "float16").score(pairs, batch_size=4)
    np.testing.assert_allclose(ours, theirs, atol=0.02)


def test_a_checkpoint_without_a_classification_head_is_refused(tiny_checkpoints) -> None:
    with pytest.raises(InputError, match="not a cross-encoder: its architectures .* have no sequence-classification"):
        cross_encoder.load(_ce_spec(tiny_checkpoints("xlm-r")), device="cpu")


def test_windows_score_every_pair_in_order_and_pass_errors_on() -> None:
    pairs = [(f"q{i}", "p" * i) for i in range(23)]
    calls: list[int] = []

    def inputs(window):
        calls.append(len(window))
        return [[len(p)] for _, p in window]

    def scored(ids):
        return np.array([float(x[0]) for x in ids])

    np.testing.assert_array_equal(base.score_windows(pairs, inputs, scored, window=5), np.arange(23.0))
    assert calls == [5, 5, 5, 5, 3] and base.score_windows([], inputs, scored).size == 0

    def broken(window):
        raise ValueError("bad pair")

    with pytest.raises(ValueError, match="bad pair"):
        base.score_windows(pairs, broken, scored, window=5)
