"""The cross-encoder family: a sequence-classification head over the (query, passage) pair.

The score is the head's raw logit (one label), as sentence-transformers' ``CrossEncoder`` (without
an activation) and FlagEmbedding's ``FlagReranker`` give it; ``sigmoid: true`` maps it to (0, 1),
which does not change the order. The pair is the tokenizer's pair encoding
(``<s> query </s></s> passage </s>`` for XLM-R, ``[CLS] query [SEP] passage [SEP]`` for BERT) of the
query and passage cut to their token budgets as :mod:`.base` says (decoded back to text and encoded
as a pair, the passage shortened to fit ``max_length``: what FlagEmbedding does with transformers 5,
which dropped the id-level ``prepare_for_model``). The head runs in float32 (:func:`.base.float32_head`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from miracl_eval.encoders.base import load_checkpoint, resolve_model_dir
from miracl_eval.rerankers.base import Counter, float32_head, query_max_length, score_inputs, score_windows, token_ids
from miracl_eval.rerankers.heads import check_classifier


class CrossEncoderReranker:
    """A loaded cross-encoder: use :func:`load`."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, device: torch.device, spec: Mapping[str, Any]) -> None:
        self.model, self.tokenizer, self.device, self.spec = model, tokenizer, device, spec
        self.max_length = int(spec["max_length"])
        self.query_max_length = query_max_length(spec)
        float32_head(model)

    def inputs(self, pairs: Sequence[tuple[str, str]]) -> list[list[int]]:
        """The token ids of each pair, special tokens included."""
        queries = token_ids(self.tokenizer, [q for q, _ in pairs], self.query_max_length)
        passages = token_ids(self.tokenizer, [p for _, p in pairs], self.max_length)

        def text(ids: list[int]) -> str:
            return str(self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))

        firsts, seconds = [text(q) for q in queries], [text(p) for p in passages]
        encoded = self.tokenizer(firsts, seconds, truncation="only_second", max_length=self.max_length)
        return [list(ids) for ids in encoded["input_ids"]]

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The head's float32 logit (through a sigmoid with ``sigmoid: true``)."""
        logits = self.model(input_ids=ids, attention_mask=mask).logits[:, 0].float()
        return torch.sigmoid(logits) if self.spec.get("sigmoid") else logits

    def score(self, pairs: Sequence[tuple[str, str]], batch_size: int, progress: Counter | None = None) -> np.ndarray:
        def scored(inputs: Sequence[list[int]]) -> np.ndarray:
            return score_inputs(inputs, self.tokenizer, self.device, batch_size, self.forward, progress)

        return score_windows(pairs, self.inputs, scored)


def load(spec: Mapping[str, Any], device: str = "auto", dtype: str = "auto") -> CrossEncoderReranker:
    """Load the cross-encoder of a resolved ``spec``; an :class:`InputError` when the checkpoint has no
    one-label classification head."""
    path = resolve_model_dir(spec["checkpoint"], spec.get("revision"))
    check_classifier(path)
    ckpt = load_checkpoint(path, "AutoModelForSequenceClassification", device, dtype)
    return CrossEncoderReranker(ckpt.model, ckpt.tokenizer, ckpt.device, spec)
