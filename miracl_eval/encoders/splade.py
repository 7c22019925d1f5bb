"""The SPLADE family: a weight per vocabulary id from a masked language model's logits.

The weight of vocabulary id ``v`` for a text is ``max_t log(1 + relu(logits[t, v]))`` over the
text's tokens ``t`` (the attention mask), as naver's SPLADE (``SpladeMax``) and pyserini's
``SpladeDocumentEncoder`` compute it; the ids with a weight > 0 are kept. Like both, no id is
dropped for being a special token (a trained SPLADE model gives them no weight). Texts are
encoded as they are, truncated to the role's max length. Since ``log(1 + relu(x))`` is
increasing, the maximum is taken over the logits first (an exact shortcut), in float32.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from miracl_eval.encoders.base import TransformerEncoder, load_checkpoint, resolve_model_dir
from miracl_eval.encoders.kinds import SPARSE
from miracl_eval.encoders.pipeline import Batch


class SpladeEncoder(TransformerEncoder):
    """A SPLADE model ready to encode: use :func:`load`."""

    outputs = (SPARSE,)

    def forward(self, input_ids: torch.Tensor, mask: torch.Tensor, kinds: Sequence[str]) -> dict[str, torch.Tensor]:
        logits = self.model(input_ids=input_ids, attention_mask=mask).logits  # [B, L, V]
        logits.masked_fill_(~mask.bool()[:, :, None], -torch.inf)
        return {SPARSE: torch.log1p(torch.relu(logits.amax(dim=1).float()))}  # [B, V]

    def rows(self, kind: str, batch: Batch) -> list[Any]:
        weights = batch.tensors[SPARSE].cpu().numpy()
        out = []
        for row in weights:
            ids = np.flatnonzero(row > 0)
            out.append((ids.astype(np.int32), row[ids]))
        return out


def load(spec: Mapping[str, Any], device: str = "auto", dtype: str = "auto") -> SpladeEncoder:
    """Load the masked language model of a resolved ``spec`` (a local folder or a hub id)."""
    ckpt = load_checkpoint(
        resolve_model_dir(spec["checkpoint"], spec.get("revision")), "AutoModelForMaskedLM", device, dtype
    )
    return SpladeEncoder(ckpt, spec)
