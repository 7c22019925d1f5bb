"""The dense family: one vector per text from a transformers encoder or decoder (E5, GTE, mDPR,
mContriever, E5-mistral, ...).

* texts: a query is ``query_template`` with ``{query}`` replaced by it (and ``{task}`` by
  ``query_instruction``, the dataset's task instruction unless the config gives one) when the
  template is set, else ``query_prefix + query``; a passage is ``passage_prefix + passage``;
* pooling ``cls``: the first token's last hidden state (mDPR, BGE); ``mean``: the mean of the
  last hidden states over the text's tokens, special ones included (the attention mask, as
  sentence-transformers and pyserini); ``last``: the last token's state, the text ending with
  the tokenizer's EOS token: appended after truncation (to ``max_length - 1`` tokens) unless
  the tokenizer adds it itself, as E5-mistral's recipe and FlagEmbedding's decoder-only
  embedder (with an EOS-adding tokenizer) do;
* ``normalize``: L2 normalization of the pooled vector.

Pooling and normalization run in float32 (after the upcast of the hidden states).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from miracl_eval.encoders.base import (
    DENSE,
    Checkpoint,
    Role,
    TransformerEncoder,
    hidden_size,
    load_checkpoint,
    resolve_model_dir,
)
from miracl_eval.encoders.st_settings import MissingSettings, fill_from_checkpoint
from miracl_eval.errors import ConfigError, InputError


class DenseEncoder(TransformerEncoder):
    """A dense model ready to encode: use :func:`load`."""

    outputs = (DENSE,)

    def __init__(self, ckpt: Checkpoint, spec: Mapping[str, Any]) -> None:
        self.pooling = str(spec["pooling"])
        self.normalize = bool(spec["normalize"])
        super().__init__(ckpt, spec, suffix_ids=_eos_suffix(ckpt) if self.pooling == "last" else ())
        self.dim = hidden_size(self.model)

    def prepare(self, texts: Sequence[str], role: Role) -> list[str]:
        if role == "passage":
            prefix = self.spec["passage_prefix"]
            return [prefix + t for t in texts]
        template = self.spec["query_template"]
        if template is not None:
            if "{task}" in template:
                if not self.spec.get("query_instruction"):
                    raise ConfigError("query_instruction", "query_template has {task} and no instruction fills it")
                template = template.replace("{task}", self.spec["query_instruction"])
            return [template.replace("{query}", t) for t in texts]
        prefix = self.spec["query_prefix"]
        return [prefix + t for t in texts]

    def forward(self, input_ids: torch.Tensor, mask: torch.Tensor, kinds: Sequence[str]) -> dict[str, torch.Tensor]:
        hidden = self.model(input_ids=input_ids, attention_mask=mask).last_hidden_state
        if self.pooling == "cls":
            vecs = hidden[:, 0].float()
        elif self.pooling == "mean":
            weights = mask[:, :, None].float()
            vecs = (hidden.float() * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
        else:
            last = mask.sum(dim=1) - 1
            vecs = hidden[torch.arange(hidden.shape[0], device=hidden.device), last].float()
        return {DENSE: F.normalize(vecs, dim=-1) if self.normalize else vecs}


def _eos_suffix(ckpt: Checkpoint) -> tuple[int, ...]:
    """The EOS id to append for last-token pooling: none when the tokenizer ends every text with it."""
    eos = ckpt.tokenizer.eos_token_id
    if eos is None:
        raise InputError(ckpt.path, "pooling 'last' needs a tokenizer with an EOS token, and this one has none")
    ids = ckpt.tokenizer("x")["input_ids"]
    return () if ids and ids[-1] == eos else (int(eos),)


def load(spec: Mapping[str, Any], device: str = "auto", dtype: str = "auto") -> DenseEncoder:
    """Load the dense model of a resolved ``spec`` (a local folder or a hub id)."""
    folder = resolve_model_dir(spec["checkpoint"])
    ckpt = load_checkpoint(folder, "AutoModel", device, dtype)
    try:
        spec, _ = fill_from_checkpoint(spec, folder, "models")
    except MissingSettings as err:  # read when loaded: the checkpoint lacks what the config left out
        raise InputError(
            folder,
            f"{', '.join(err.names)} not set in the config, and the checkpoint has no sentence-transformers "
            "files (modules.json, 1_Pooling/config.json) to read them from",
        ) from None
    return DenseEncoder(ckpt, spec)
