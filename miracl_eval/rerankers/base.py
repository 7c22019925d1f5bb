"""What every reranker family shares: its settings, the pair tokenization, batching by length.

A reranker scores ``(query, passage)`` pairs, one forward pass per batch of pairs sorted by length.
Inputs follow FlagEmbedding's rerankers (the reference harness of the BGE rerankers' MIRACL
numbers): the query's tokens (without special tokens) are cut to ``query_max_length`` (by default
three quarters of ``max_length``), the passage's to ``max_length``, and the pair is then cut to
``max_length`` by shortening the passage only (``truncation='only_second'``).

Scores are computed in float32 whatever dtype the model runs in: a head left in bfloat16 would round
every score to 8 significant bits, and a top 10 of close scores would tie, broken by docid. (FlagEmbedding
runs the whole model, head included, in float16 with ``use_fp16``, 11 bits: its
``inference/reranker/encoder_only/base.py`` and ``decoder_only/base.py`` call ``model.half()`` and
upcast the logits after.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np
import torch

#: pairs tokenized per call of the tokenizer (its memory holds every token of the call's texts)
TOKENIZE_SLICE = 256
#: pairs tokenized and scored together: a job's token lists stay small (8,192 pairs of 1,024 tokens are
#: about 300 MB of Python ints) whatever its number of pairs, and the next window is tokenized while the
#: model scores this one
WINDOW = 8_192


#: called with each batch's number of pairs once scored (a stage's progress)
Counter = Callable[[int], None]


class Reranker(Protocol):
    def score(self, pairs: Sequence[tuple[str, str]], batch_size: int, progress: Counter | None = None) -> np.ndarray:
        """One float64 score per pair, in input order (``progress``: told of each scored batch)."""
        ...


def _float32_inputs(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    def up(x: Any) -> Any:
        return x.float() if isinstance(x, torch.Tensor) and x.is_floating_point() else x

    return tuple(up(a) for a in args), {k: up(v) for k, v in kwargs.items()}


def float32_head(model: torch.nn.Module) -> list[str]:
    """Run a classifier's head in float32 on the (upcast) hidden states of its base model, which stays in
    its dtype: the modules beside the base model (``classifier``, ``score``, ``pre_classifier``) and the
    base model's ``pooler`` (BERT's head reads it). Returns the names of the modules made float32."""
    base_model = getattr(model, "base_model", model)
    heads = [(name, m) for name, m in model.named_children() if m is not base_model]
    pooler = getattr(base_model, "pooler", None)
    if isinstance(pooler, torch.nn.Module):
        heads.append((f"{getattr(model, 'base_model_prefix', 'base_model')}.pooler", pooler))
    for _, module in heads:
        module.float()
        module.register_forward_pre_hook(_float32_inputs, with_kwargs=True)
    return [name for name, _ in heads]


def query_max_length(spec: Mapping[str, Any]) -> int:
    """The query's token budget: ``query_max_length``, or three quarters of ``max_length`` (FlagEmbedding's)."""
    given = spec.get("query_max_length")
    return int(given) if given is not None else int(spec["max_length"]) * 3 // 4


def token_ids(tokenizer: Any, texts: Sequence[str], max_length: int) -> list[list[int]]:
    """Token ids of ``texts`` without special tokens, each cut to ``max_length``."""
    out: list[list[int]] = []
    for start in range(0, len(texts), TOKENIZE_SLICE):
        chunk = list(texts[start : start + TOKENIZE_SLICE])
        out += tokenizer(chunk, add_special_tokens=False, max_length=max_length, truncation=True)["input_ids"]
    return out


def length_batches(lengths: Sequence[int], batch_size: int) -> Iterator[np.ndarray]:
    """Positions of the inputs, longest first, ``batch_size`` at a time (less padding)."""
    if batch_size < 1:
        raise ValueError("batch_size must be positive")
    order = np.argsort([-n for n in lengths], kind="stable")
    for start in range(0, len(order), batch_size):
        yield order[start : start + batch_size]


def padded(
    inputs: Sequence[list[int]], pad_id: int, device: torch.device, left: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of token lists, padded to the longest (right, or left)."""
    width = max(len(ids) for ids in inputs)
    ids = torch.full((len(inputs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(inputs), width), dtype=torch.long)
    for i, row in enumerate(inputs):
        span = slice(width - len(row), width) if left else slice(0, len(row))
        ids[i, span] = torch.tensor(row, dtype=torch.long)
        mask[i, span] = 1
    return ids.to(device), mask.to(device)


@torch.inference_mode()
def score_inputs(
    inputs: Sequence[list[int]],
    tokenizer: Any,
    device: torch.device,
    batch_size: int,
    forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    progress: Counter | None = None,
) -> np.ndarray:
    """``forward(input_ids, attention_mask)`` over the token lists in batches of similar length,
    padded on the right; one float64 score per input, in input order."""
    out = np.zeros(len(inputs), dtype=np.float64)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    for positions in length_batches([len(x) for x in inputs], batch_size):
        ids, mask = padded([inputs[i] for i in positions], pad, device)
        out[positions] = forward(ids, mask).float().cpu().numpy()
        if progress is not None:
            progress(len(positions))
    return out


def score_windows(
    pairs: Sequence[tuple[str, str]],
    inputs: Callable[[Sequence[tuple[str, str]]], list[list[int]]],
    score: Callable[[Sequence[list[int]]], np.ndarray],
    window: int | None = None,
) -> np.ndarray:
    """``score(inputs(window))`` over windows of ``pairs``, the next window's ``inputs`` built on another
    thread while this one is scored (the tokenizers library and torch release the GIL); one float64
    score per pair, in input order."""
    window = window or WINDOW
    out = np.zeros(len(pairs), dtype=np.float64)
    starts = list(range(0, len(pairs), window))
    if not starts:
        return out
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="reranker-inputs") as pool:
        pending = pool.submit(inputs, pairs[:window])
        for i, start in enumerate(starts):
            ready = pending.result()
            if i + 1 < len(starts):
                pending = pool.submit(inputs, pairs[starts[i + 1] : starts[i + 1] + window])
            out[start : start + len(ready)] = score(ready)
    return out
