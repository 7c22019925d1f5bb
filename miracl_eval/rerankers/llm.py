"""The llm family: a decoder prompted with the query and the passage; the score is the logit of "Yes".

As FlagEmbedding's ``FlagLLMReranker`` (bge-reranker-v2-gemma): the query is ``query_instruction``
+ query (``A: ...``), the passage ``passage_instruction`` + passage (``B: ...``), each tokenized
without special tokens and cut as :mod:`.base` says; the input is ``<bos>`` (when the tokenizer has
one apart from its pad token) + query, then ``"\\n"`` + passage cut so that the two fit
``max_length`` + the separator and prompt, then ``"\\n"`` + the prompt. The score is the logit of
the first token of ``Yes`` at the last position.

Only that one logit is computed: the base model's last hidden state at each input's last token times
the output head's row of ``Yes`` (and its bias, and the model's final soft cap where it has one), in
float32. The model's own forward would apply the head at every position: for bge-reranker-v2-gemma
(a 256,000-token vocabulary) at 64 pairs of ~1,060 tokens, about 32 GiB of bfloat16 logits a batch
and a fifth of its FLOPs, to read one number per pair.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from miracl_eval.encoders.base import load_checkpoint, resolve_model_dir
from miracl_eval.rerankers.base import Counter, query_max_length, score_inputs, score_windows, token_ids
from miracl_eval.rerankers.heads import check_causal_lm
from miracl_eval.rerankers.registry import DEFAULT_PROMPT

__all__ = ["DEFAULT_PROMPT", "LlmReranker", "load"]


class LlmReranker:
    """A loaded LLM reranker: use :func:`load`."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, device: torch.device, spec: Mapping[str, Any]) -> None:
        self.model, self.tokenizer, self.device, self.spec = model, tokenizer, device, spec
        self.max_length = int(spec["max_length"])
        self.query_max_length = query_max_length(spec)
        self.prompt_ids = tokenizer(spec["prompt"], add_special_tokens=False)["input_ids"]
        self.sep_ids = tokenizer("\n", add_special_tokens=False)["input_ids"]
        self.yes_id = tokenizer("Yes", add_special_tokens=False)["input_ids"][0]
        bos, pad = tokenizer.bos_token_id, tokenizer.pad_token_id
        self.prefix = [bos] if bos is not None and bos != pad else []
        self.decoder = getattr(model, "base_model", model)
        head = model.get_output_embeddings()  # type: ignore[operator]  # a transformers model's method
        if not isinstance(head, torch.nn.Linear) or self.decoder is model:
            raise TypeError(f"{type(model).__name__} has no decoder and linear output head to read 'Yes' from")
        self.yes_weight = head.weight[self.yes_id].detach().float().clone()  # [hidden]
        self.yes_bias = head.bias[self.yes_id].detach().float().clone() if head.bias is not None else None
        self.softcap = getattr(model.config, "final_logit_softcapping", None)

    def inputs(self, pairs: Sequence[tuple[str, str]]) -> list[list[int]]:
        q_texts = [self.spec["query_instruction"] + q for q, _ in pairs]
        p_texts = [self.spec["passage_instruction"] + p for _, p in pairs]
        queries = token_ids(self.tokenizer, q_texts, self.query_max_length)
        passages = token_ids(self.tokenizer, p_texts, self.max_length)
        budget = self.max_length + len(self.sep_ids) + len(self.prompt_ids)
        out = []
        for q, p in zip(queries, passages, strict=True):
            first, second = self.prefix + q, self.sep_ids + p
            over = len(first) + len(second) - budget
            if 0 < over < len(second):  # only the second is cut, and never to nothing (FlagEmbedding's)
                second = second[:-over]
            out.append(first + second + self.sep_ids + self.prompt_ids)
        return out

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The float32 logit of "Yes" at each input's last token (inputs padded on the right)."""
        hidden = self.decoder(input_ids=ids, attention_mask=mask).last_hidden_state  # [B, L, H]
        last = mask.sum(dim=1) - 1
        logit = hidden[torch.arange(len(ids), device=hidden.device), last].float() @ self.yes_weight
        if self.yes_bias is not None:
            logit = logit + self.yes_bias
        if self.softcap:
            logit = torch.tanh(logit / self.softcap) * self.softcap
        return logit

    def score(self, pairs: Sequence[tuple[str, str]], batch_size: int, progress: Counter | None = None) -> np.ndarray:
        def scored(inputs: Sequence[list[int]]) -> np.ndarray:
            return score_inputs(inputs, self.tokenizer, self.device, batch_size, self.forward, progress)

        return score_windows(pairs, self.inputs, scored)


def load(spec: Mapping[str, Any], device: str = "auto", dtype: str = "auto") -> LlmReranker:
    """Load the decoder of a resolved ``spec`` (a causal language model with its head)."""
    path = resolve_model_dir(spec["checkpoint"], spec.get("revision"))
    check_causal_lm(path)
    ckpt = load_checkpoint(path, "AutoModelForCausalLM", device, dtype)
    return LlmReranker(ckpt.model, ckpt.tokenizer, ckpt.device, spec)
