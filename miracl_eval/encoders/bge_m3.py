"""The BGE-M3 family: dense, sparse (lexical) and multi-vector (ColBERT) outputs of one encoder pass.

This reproduces FlagEmbedding's ``BGEM3FlagModel`` (``M3Embedder``, FlagEmbedding 1.4.2) without
depending on it:

* checkpoint: a transformers encoder + tokenizer, plus ``sparse_linear.pt`` (the state dict of
  ``Linear(hidden, 1)``) and ``colbert_linear.pt`` (``Linear(hidden, colbert_dim)``);
* inputs: the tokenizer's ``<s> ... </s>`` encoding of the text as it is (no prefix), truncated
  to the role's max length (both special tokens included);
* dense: the first (CLS) token's last hidden state, L2-normalized;
* sparse (lexical weights): ``relu(sparse_linear(h))`` per token, dropping the cls, eos, pad
  and unk token ids and weights ``<= 0``, keeping the maximum over repeats of a token; the
  score of two weight maps is the sum over shared tokens of the products of their weights;
* multi-vector: ``colbert_linear`` over the token states after the first one (``h[:, 1:]``,
  so ``</s>`` is kept), one L2-normalized vector per real token; the score is the mean over
  query vectors of the best dot product with a passage vector.

FlagEmbedding normalizes with ``F.normalize`` in the model's dtype; here normalization and all
outputs are float32 (identical in float32, more accurate in half precision). Token-level
vectors are never stored for a corpus: :func:`multivec_scores` re-encodes the candidate
passages it needs to score.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from miracl_eval.encoders.base import (
    Checkpoint,
    TransformerEncoder,
    chunk_rows,
    hidden_size,
    load_checkpoint,
    resolve_model_dir,
)
from miracl_eval.encoders.kinds import DENSE, SPARSE, Role
from miracl_eval.encoders.pipeline import Batch, HostSettings
from miracl_eval.errors import InputError

SPARSE_HEAD = "sparse_linear.pt"
COLBERT_HEAD = "colbert_linear.pt"
MULTIVEC = "colbert"  # the token-level output kind (never stored)


def _load_head(path: Path, in_features: int, out_features: int | None) -> torch.nn.Linear:
    """Load a ``torch.nn.Linear`` state dict saved by FlagEmbedding (``*_linear.pt``)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - torch raises many types for a corrupt file
        raise InputError(path, f"cannot load the head's state dict ({type(err).__name__}: {err})") from err
    weight = state.get("weight") if isinstance(state, Mapping) else None
    bias = state.get("bias") if isinstance(state, Mapping) else None
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or weight.shape[1] != in_features:
        raise InputError(path, f"not the state dict of a Linear({in_features}, ...) layer")
    if out_features is not None and weight.shape[0] != out_features:
        raise InputError(path, f"expected a Linear({in_features}, {out_features}) layer, found {tuple(weight.shape)}")
    layer = torch.nn.Linear(in_features, weight.shape[0], bias=bias is not None)
    try:
        layer.load_state_dict(state)
    except RuntimeError as err:
        raise InputError(path, f"state dict does not fit a Linear layer ({err})") from err
    return layer


class BgeM3Encoder(TransformerEncoder):
    """A BGE-M3 model ready to encode: use :func:`load`."""

    outputs = (DENSE, SPARSE)

    def __init__(
        self,
        ckpt: Checkpoint,
        spec: Mapping[str, Any],
        sparse_linear: torch.nn.Linear,
        colbert_linear: torch.nn.Linear | None,
    ) -> None:
        super().__init__(ckpt, spec)
        self.sparse_linear = sparse_linear
        self.colbert_linear = colbert_linear
        self.dim = hidden_size(self.model)
        tok = self.tokenizer
        special = [tok.cls_token_id, tok.eos_token_id, tok.pad_token_id, tok.unk_token_id]
        self.unused_token_ids = np.array(sorted({int(t) for t in special if t is not None}), dtype=np.int64)

    def forward(self, input_ids: torch.Tensor, mask: torch.Tensor, kinds: Sequence[str]) -> dict[str, torch.Tensor]:
        hidden = self.model(input_ids=input_ids, attention_mask=mask).last_hidden_state
        out = {}
        if DENSE in kinds:
            out[DENSE] = F.normalize(hidden[:, 0].float(), dim=-1)
        if SPARSE in kinds:
            out[SPARSE] = torch.relu(self.sparse_linear(hidden)).squeeze(-1).float()  # [B, L]
        if MULTIVEC in kinds:
            if self.colbert_linear is None:
                raise ValueError("multi-vector output from an encoder loaded without the colbert head (multivec=False)")
            vecs = self.colbert_linear(hidden[:, 1:]).float() * mask[:, 1:, None]
            out[MULTIVEC] = F.normalize(vecs, dim=-1)  # [B, L - 1, d], zero past each text's end
        return out

    def rows(self, kind: str, batch: Batch) -> list[Any]:
        if kind == SPARSE:
            return self._sparse_rows(batch)
        vecs = batch.tensors[MULTIVEC].cpu().numpy()
        return [vecs[i, : int(n) - 1].copy() for i, n in enumerate(batch.lengths)]

    def _sparse_rows(self, batch: Batch) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per batch row: (token ids int32 ascending, weights float32 > 0), the max over repeated tokens."""
        weights = batch.tensors[SPARSE].cpu().numpy()
        ids = batch.input_ids
        n, width = ids.shape
        valid = (np.arange(width)[None, :] < batch.lengths[:, None]) & (weights > 0)
        valid &= ~np.isin(ids, self.unused_token_ids)
        rows, cols = np.nonzero(valid)
        key = (rows.astype(np.int64) << 32) | ids[rows, cols]  # (row, token): sorted, rows in order
        w = weights[rows, cols]
        order = np.argsort(key, kind="stable")
        key, w = key[order], w[order]
        first = np.ones(len(key), dtype=bool)
        first[1:] = key[1:] != key[:-1]
        starts = np.flatnonzero(first)
        w = np.maximum.reduceat(w, starts) if len(w) else w  # the maximum over a token's repeats
        key = key[starts]
        tokens = (key & 0xFFFFFFFF).astype(np.int32)
        bounds = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(key >> 32, minlength=n), out=bounds[1:])
        return [(tokens[bounds[i] : bounds[i + 1]], w[bounds[i] : bounds[i + 1]]) for i in range(n)]

    def encode_multivec(self, texts: Sequence[str], role: Role, batch_size: int) -> list[np.ndarray]:
        """One float32 ``[tokens - 1, colbert_dim]`` array of unit rows per text, in input order."""
        return self.encode_outputs(texts, role, batch_size, (MULTIVEC,))[MULTIVEC]


def load(spec: Mapping[str, Any], device: str = "auto", dtype: str = "auto", multivec: bool = False) -> BgeM3Encoder:
    """Load the BGE-M3 checkpoint of a resolved ``spec`` (local folder or hub id).

    The colbert head is loaded (and required) only with ``multivec=True`` (the rerank stage).
    Raises :class:`InputError` naming a missing or corrupt head file or a bad checkpoint,
    :class:`DownloadError` when a hub id cannot be fetched.
    """
    path = resolve_model_dir(spec["checkpoint"], spec.get("revision"))
    heads = [SPARSE_HEAD, COLBERT_HEAD] if multivec else [SPARSE_HEAD]
    ckpt = load_checkpoint(path, "AutoModel", device, dtype, required_files=heads)
    hidden = hidden_size(ckpt.model)
    sparse = _load_head(path / SPARSE_HEAD, hidden, 1)
    colbert = _load_head(path / COLBERT_HEAD, hidden, None) if multivec else None
    for head in (sparse, colbert):
        if head is not None:
            head.to(device=ckpt.device, dtype=ckpt.dtype).eval().requires_grad_(False)
    return BgeM3Encoder(ckpt, spec, sparse, colbert)


#: padded query tokens whose multi-vector outputs a rerank holds at once (1 GiB of float32 at 1024
#: dimensions): queries are scored in groups of this many tokens, whatever the query chunk
QUERY_TOKENS = 1 << 18

#: ``on_batch(pair indices, the pairs' rows in the batch, batch)``: called for each passage batch
BatchHook = Callable[[np.ndarray, np.ndarray, Batch], None]


def query_groups(lengths: np.ndarray, budget: int) -> list[np.ndarray]:
    """Consecutive runs of query indices whose padded size (count x longest) stays within ``budget``
    tokens (a longer query is a group of its own)."""
    groups: list[np.ndarray] = []
    start, longest = 0, 0
    for i, n in enumerate(lengths.tolist()):
        if i > start and max(longest, n) * (i - start + 1) > budget:
            groups.append(np.arange(start, i))
            start, longest = i, 0
        longest = max(longest, n)
    if len(lengths):
        groups.append(np.arange(start, len(lengths)))
    return groups


@torch.inference_mode()
def multivec_scores(
    model: BgeM3Encoder,
    queries: Sequence[str],
    passages: Mapping[str, str],
    pairs: Sequence[tuple[int, str]],
    batch_size: int,
    *,
    passage_kinds: Sequence[str] = (),
    on_batch: BatchHook | None = None,
    query_tokens: int = QUERY_TOKENS,
    token_budget: int | None = None,
) -> np.ndarray:
    """ColBERT scores (float32, aligned with ``pairs``) of ``(query index, docid)`` pairs.

    ``queries[i]`` is the text of query index ``i``; ``passages[docid]`` that of a passage; the
    max lengths are the spec's. Queries are taken in groups of at most ``query_tokens`` padded
    tokens; every distinct passage of a group's pairs is encoded once, in chunks, and its token
    vectors are dropped once its pairs are scored: memory is bounded by the group and the chunk,
    not by the number of queries or candidates. Encoding batches hold at most ``batch_size`` texts
    and ``token_budget`` padded tokens (the encoding pipeline's default when None), as in encoding:
    256 passages of 8,192 tokens would be one batch of 2.1M tokens otherwise; the pairs of a batch
    are scored in blocks of at most ``token_budget`` passage tokens too.

    The same forward pass gives the passage's other outputs: ``passage_kinds`` (``dense``,
    ``sparse``) are computed too, and ``on_batch`` sees each passage batch with the pairs it
    scores (the rerank's dense and sparse scores, :mod:`miracl_eval.fusion.rerank`).
    """
    if batch_size < 1:
        raise ValueError("batch_size must be positive")
    scores = np.zeros(len(pairs), dtype=np.float32)
    if not pairs:
        return scores
    pair_q = np.empty(len(pairs), dtype=np.int64)
    for k, (qi, docid) in enumerate(pairs):
        if not 0 <= qi < len(queries):
            raise IndexError(f"pair {k}: query index {qi} is out of range (0..{len(queries) - 1})")
        if docid not in passages:
            raise KeyError(f"pair {k}: docid {docid!r} is not among the given passages")
        pair_q[k] = qi
    q_index = np.unique(pair_q)
    q_texts = model.prepare([queries[i] for i in q_index], "query")
    q_ids, q_lengths = model.tokenize(q_texts, model.max_length("query"))
    kinds = (MULTIVEC, *[k for k in passage_kinds if k != MULTIVEC])
    for group in query_groups(q_lengths, query_tokens):
        in_group = np.isin(pair_q, q_index[group])
        ks = np.flatnonzero(in_group)
        by_doc: dict[str, list[int]] = {}
        for k in ks.tolist():
            by_doc.setdefault(pairs[k][1], []).append(k)
        width = int(q_lengths[group].max())
        tokens = (q_ids[group, :width], q_lengths[group])
        sizes = (batch_size, token_budget or HostSettings().token_budget)
        _score_group(model, tokens, q_index[group], pair_q, passages, by_doc, sizes, kinds, scores, on_batch)
    return scores


def _score_group(
    model: BgeM3Encoder,
    q_tokens: tuple[np.ndarray, np.ndarray],
    q_ids: np.ndarray,
    pair_q: np.ndarray,
    passages: Mapping[str, str],
    by_doc: dict[str, list[int]],
    sizes: tuple[int, int],
    kinds: Sequence[str],
    scores: np.ndarray,
    on_batch: BatchHook | None,
) -> None:
    """Score the pairs of one query group (queries ``q_ids``, tokenized: ``q_tokens``); ``sizes``: texts
    and padded tokens per batch at most."""
    dev = model.device
    batch_size, token_budget = sizes
    # Queries: the group's, padded into one tensor on the device.
    q_slot = np.full(int(q_ids.max()) + 1, -1, dtype=np.int64)
    q_slot[q_ids] = np.arange(len(q_ids))
    q_lens = torch.zeros(len(q_ids), dtype=torch.long, device=dev)
    q_vecs: torch.Tensor | None = None
    for batch in model.iter_token_batches(*q_tokens, batch_size, (MULTIVEC,), token_budget):
        vecs = batch.tensors[MULTIVEC]
        if q_vecs is None:  # the first batch is the longest
            q_vecs = torch.zeros(len(q_ids), vecs.shape[1], vecs.shape[2], device=dev)
        pos = torch.from_numpy(batch.positions).to(dev)
        q_vecs[pos, : vecs.shape[1]] = vecs
        q_lens[pos] = torch.from_numpy(batch.lengths - 1).to(dev)
    assert q_vecs is not None
    q_valid = torch.arange(q_vecs.shape[1], device=dev)[None, :] < q_lens[:, None]

    docids = list(by_doc)
    chunk = chunk_rows(batch_size)
    p_max_length = model.max_length("passage")
    for start in range(0, len(docids), chunk):
        chunk_ids = docids[start : start + chunk]
        texts = model.prepare([passages[d] for d in chunk_ids], "passage")
        for batch in model.iter_batches(texts, p_max_length, batch_size, kinds, token_budget):
            p_vecs = batch.tensors[MULTIVEC]  # [B, Lp, d], zero past each passage's end
            # pairs scored at once: their gathered passage vectors hold at most token_budget tokens
            pair_block = max(1, token_budget // max(1, p_vecs.shape[1]))
            p_valid = (
                torch.arange(p_vecs.shape[1], device=dev)[None, :]
                < torch.from_numpy(batch.lengths - 1).to(dev)[:, None]
            )
            rows = [(row, k) for row, p in enumerate(batch.positions) for k in by_doc[chunk_ids[p]]]
            for b in range(0, len(rows), pair_block):
                block = rows[b : b + pair_block]
                prow = torch.tensor([r for r, _ in block], device=dev)
                ks = np.array([k for _, k in block])
                qrow = torch.from_numpy(q_slot[pair_q[ks]]).to(dev)
                sim = torch.bmm(q_vecs[qrow], p_vecs[prow].transpose(1, 2))  # [m, Lq, Lp]
                sim.masked_fill_(~p_valid[prow][:, None, :], -math.inf)
                best = sim.max(dim=-1).values.masked_fill(~q_valid[qrow], 0.0)
                scores[ks] = (best.sum(dim=1) / q_lens[qrow]).cpu().numpy()
            if on_batch is not None:
                on_batch(np.array([k for _, k in rows], dtype=np.int64), np.array([r for r, _ in rows]), batch)
