"""BGE-M3 encoding (dense, sparse/lexical and multi-vector/ColBERT) on plain torch + transformers.

This reproduces FlagEmbedding's ``BGEM3FlagModel`` (``M3Embedder``, FlagEmbedding 1.4.2) without
depending on it:

* checkpoint: a transformers encoder + tokenizer, plus ``sparse_linear.pt`` (the state dict of
  ``Linear(hidden, 1)``) and ``colbert_linear.pt`` (``Linear(hidden, colbert_dim)``);
* inputs: the tokenizer's ``<s> ... </s>`` encoding, truncated to ``max_length`` tokens (both
  special tokens included), right-padded with the pad id;
* dense: the first (CLS) token's last hidden state, L2-normalized;
* sparse (lexical weights): ``relu(sparse_linear(h))`` per token, dropping the cls, eos, pad
  and unk token ids and weights ``<= 0``, keeping the maximum over repeats of a token; the
  score of two weight maps is the sum over shared tokens of the products of their weights;
* multi-vector: ``colbert_linear`` over the token states after the first one (``h[:, 1:]``,
  so ``</s>`` is kept), one L2-normalized vector per real token; the score is the mean over
  query vectors of the best dot product with a passage vector.

FlagEmbedding normalizes with ``F.normalize`` in the model's dtype; here normalization and all
outputs are float32 (identical in float32, more accurate in half precision). On CUDA the whole
model runs in the requested dtype (bfloat16 by default), like FlagEmbedding with ``use_fp16``.

Corpora are encoded shard by shard in bounded chunks (:func:`encode_corpus_shard`), so memory
does not grow with the corpus or shard size; token-level vectors are never stored for a corpus:
:func:`multivec_scores` re-encodes the candidate passages it needs to score.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.nn.functional as F

from . import schemas
from .errors import DownloadError, InputError, MiraclEvalError

SPARSE_HEAD = "sparse_linear.pt"
COLBERT_HEAD = "colbert_linear.pt"

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}
_TOKENIZE_SLICE = 256
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
_HUB_IGNORE = ["onnx/*", "imgs/*", "*.onnx", "*.onnx_data", "flax_model.msgpack", "rust_model.ot", "tf_model.h5"]


@dataclass
class M3Output:
    """What :meth:`M3Encoder.encode` returns, in input order; a part not requested is ``None``.

    ``dense``: float32 ``[n, dim]``, unit rows. ``sparse``: one ``{token_id: weight}`` per text
    (weights > 0). ``colbert``: one float32 ``[tokens - 1, colbert_dim]`` array per text, unit rows.
    """

    dense: np.ndarray | None = None
    sparse: list[dict[int, float]] | None = None
    colbert: list[np.ndarray] | None = None


@dataclass
class _Batch:
    """One encoded batch, in the batch's (length-sorted) order; tensors stay on the model's device."""

    positions: np.ndarray  # the batch rows' indices in the encoded text list
    input_ids: np.ndarray  # int64 [B, L]
    lengths: np.ndarray  # int64 [B], tokens including <s> and </s>
    dense: torch.Tensor | None = None  # float32 [B, dim], normalized
    sparse: torch.Tensor | None = None  # float32 [B, L], relu(sparse_linear(h))
    colbert: torch.Tensor | None = None  # float32 [B, L - 1, colbert_dim], normalized, zero past each text's end
    ready: Any = None  # a CUDA event marking the end of the copies started by M3Encoder._start_host_copy

    def wait(self) -> None:
        """Block until the batch's tensors have reached the host (no-op when they were computed there)."""
        if self.ready is not None:
            self.ready.synchronize()
            self.ready = None


# --------------------------------------------------------------------------------------------
# scores


def sparse_score(q: Mapping[Any, float], p: Mapping[Any, float]) -> float:
    """Lexical matching score: the sum over shared tokens of ``q[token] * p[token]``."""
    if len(q) > len(p):
        q, p = p, q
    return float(sum(w * p[t] for t, w in q.items() if t in p))


def colbert_score(q: np.ndarray, p: np.ndarray) -> float:
    """Multi-vector score: the mean over query vectors of their best dot product with a passage vector."""
    q = np.asarray(q, dtype=np.float32)
    p = np.asarray(p, dtype=np.float32)
    if q.shape[0] == 0:
        return 0.0
    return float((q @ p.T).max(axis=1).sum() / q.shape[0])


# --------------------------------------------------------------------------------------------
# loading


def _resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise MiraclEvalError(f"unknown device '{device}' (use auto, cpu, cuda or cuda:N)") from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise MiraclEvalError(f"device '{device}' was requested but CUDA is not available here")
    return dev


def _resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise MiraclEvalError(f"unknown dtype '{dtype}' (use auto, float32, float16 or bfloat16)") from None


def resolve_model_dir(model: str | os.PathLike[str]) -> Path:
    """A local checkpoint directory for ``model``: the directory itself, or a hub snapshot for a hub id."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise InputError(path, "the model must be a checkpoint directory (or a Hugging Face hub id), not a file")
    name = str(model)
    if not _HUB_ID.match(name):
        raise InputError(path, "model directory does not exist")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id=name, ignore_patterns=_HUB_IGNORE))
    except Exception as err:  # noqa: BLE001 - offline, unknown repo, gated repo...: all mean the same here
        raise DownloadError(
            f"cannot download the model '{name}' from the Hugging Face hub ({type(err).__name__}), and no "
            f"local directory of that name exists: set the config key `model` to a local directory holding "
            f"the checkpoint (config.json, model weights, tokenizer, {SPARSE_HEAD}, {COLBERT_HEAD})"
        ) from err


def _load_head(path: Path, in_features: int, out_features: int | None) -> torch.nn.Linear:
    """Load a ``torch.nn.Linear`` state dict saved by FlagEmbedding (``*_linear.pt``)."""
    if not path.is_file():
        raise InputError(path, "missing: the BGE-M3 checkpoint directory must hold this head file")
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


class M3Encoder:
    """A BGE-M3 model ready to encode: use :meth:`load`."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        sparse_linear: torch.nn.Linear | None,
        colbert_linear: torch.nn.Linear | None,
        device: torch.device,
        dtype: torch.dtype,
        path: Path | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.sparse_linear = sparse_linear
        self.colbert_linear = colbert_linear
        self.device = device
        self.dtype = dtype
        self.path = path
        config = model.config
        self.dim: int = int(config.hidden_size)
        self.colbert_dim: int | None = int(colbert_linear.out_features) if colbert_linear is not None else None
        self.pad_id: int = int(tokenizer.pad_token_id)
        special = [tokenizer.cls_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.unk_token_id]
        self.unused_token_ids = np.array(sorted({int(t) for t in special if t is not None}), dtype=np.int64)
        limit = int(getattr(config, "max_position_embeddings", 0) or 0)
        if limit and config.model_type in ("xlm-roberta", "roberta", "camembert") and config.pad_token_id is not None:
            limit -= int(config.pad_token_id) + 1  # RoBERTa positions start after the padding index
        self.max_length_limit: int | None = limit or None
        self._backends: dict[int, Any] = {}  # max_length -> truncating copy of the fast tokenizer's backend

    @classmethod
    def load(
        cls,
        model: str | os.PathLike[str],
        device: str = "auto",
        dtype: str = "auto",
        need_sparse: bool = True,
        need_colbert: bool = True,
    ) -> M3Encoder:
        """Load a BGE-M3 checkpoint from a local directory or a Hugging Face hub id.

        ``device``: ``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda`` or ``cuda:N``.
        ``dtype``: ``auto`` (bfloat16 on CUDA, float32 on CPU), ``float32``, ``float16`` or
        ``bfloat16``. The heads a run does not need are not loaded (nor required).

        Raises :class:`InputError` naming a missing or corrupt head file or a bad checkpoint,
        :class:`DownloadError` when a hub id cannot be fetched.
        """
        from transformers import AutoModel, AutoTokenizer

        dev = _resolve_device(device)
        tdtype = _resolve_dtype(dtype, dev)
        path = resolve_model_dir(model)
        config_file = path / "config.json"
        if not config_file.is_file():
            raise InputError(config_file, "missing: not a transformers checkpoint directory")
        for needed, name in ((need_sparse, SPARSE_HEAD), (need_colbert, COLBERT_HEAD)):
            if needed and not (path / name).is_file():  # fail before the (slow) model load
                raise InputError(path / name, "missing: the BGE-M3 checkpoint directory must hold this head file")
        try:
            hf_model = AutoModel.from_pretrained(path, dtype=tdtype)
        except Exception as err:  # noqa: BLE001
            raise InputError(path, f"cannot load the transformers model ({type(err).__name__}: {err})") from err
        hidden = int(hf_model.config.hidden_size)
        sparse = _load_head(path / SPARSE_HEAD, hidden, 1) if need_sparse else None
        colbert = _load_head(path / COLBERT_HEAD, hidden, None) if need_colbert else None
        try:
            tokenizer = AutoTokenizer.from_pretrained(path)
        except Exception as err:  # noqa: BLE001
            raise InputError(path, f"cannot load the tokenizer ({type(err).__name__}: {err})") from err
        if tokenizer.pad_token_id is None:
            raise InputError(path, "the tokenizer has no pad token")
        if getattr(hf_model, "pooler", None) is not None:
            hf_model.pooler = None  # BGE-M3 does not use it; skip its work
        modules = [m for m in (hf_model, sparse, colbert) if m is not None]
        for m in modules:
            m.to(device=dev, dtype=tdtype).eval().requires_grad_(False)
        return cls(hf_model, tokenizer, sparse, colbert, dev, tdtype, path)

    # ----------------------------------------------------------------------------------------

    def _check(self, max_length: int, batch_size: int, sparse: bool, colbert: bool) -> None:
        if max_length < 2:
            raise ValueError("max_length must be at least 2 (<s> and </s>)")
        if self.max_length_limit is not None and max_length > self.max_length_limit:
            raise ValueError(f"max_length {max_length} exceeds the model's limit of {self.max_length_limit} tokens")
        if batch_size < 1:
            raise ValueError("batch_size must be positive")
        if sparse and self.sparse_linear is None:
            raise MiraclEvalError("sparse weights requested from an encoder loaded without the sparse head")
        if colbert and self.colbert_linear is None:
            raise MiraclEvalError("multi-vector output requested from an encoder loaded without the colbert head")

    def _tokenize(self, texts: Sequence[str], max_length: int) -> tuple[np.ndarray, np.ndarray]:
        """Token ids (int64, right-padded with the pad id) and lengths of ``texts``.

        The same ids as ``tokenizer(texts, truncation=True, max_length=max_length)``; when the
        tokenizer is a fast one, its Rust backend is called directly (without transformers'
        per-text Python conversions and without offsets), once checked to agree with the
        tokenizer's own call. Tokenized in slices: the tokenizer holds every token of a text
        before truncating it, so one call over thousands of long texts would peak high.
        """
        lists: list[list[int]] = []
        for start in range(0, len(texts), _TOKENIZE_SLICE):
            lists.extend(self._token_ids(list(texts[start : start + _TOKENIZE_SLICE]), max_length))
        lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        width = int(lengths.max()) if len(lists) else 0
        ids = np.full((len(lists), width), self.pad_id, dtype=np.int64)
        ids[np.arange(width)[None, :] < lengths[:, None]] = np.fromiter(
            itertools.chain.from_iterable(lists), dtype=np.int64, count=int(lengths.sum())
        )
        return ids, lengths

    def _token_ids(self, texts: list[str], max_length: int) -> list[list[int]]:
        if max_length not in self._backends:
            self._backends[max_length] = self._make_backend(texts[:16], max_length)
        backend = self._backends[max_length]
        if backend is None:
            return self.tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
        return [e.ids for e in backend.encode_batch_fast(texts, add_special_tokens=True)]

    def _make_backend(self, probe: list[str], max_length: int) -> Any:
        """A truncating copy of the fast tokenizer's backend, or ``None`` if it does not match the tokenizer."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is None or not hasattr(backend, "encode_batch_fast"):
            return None
        try:
            from tokenizers import Tokenizer

            copy = Tokenizer.from_str(backend.to_str())
            copy.no_padding()
            copy.enable_truncation(
                max_length,
                stride=0,
                strategy="longest_first",
                direction=getattr(self.tokenizer, "truncation_side", "right"),
            )
            copy.encode_special_tokens = bool(getattr(self.tokenizer, "split_special_tokens", False))
            probe = [*probe, "", "a <s> b </s> <pad> <unk> c", " x " * (2 * max_length)]
            fast = [e.ids for e in copy.encode_batch_fast(probe, add_special_tokens=True)]
        except Exception:  # noqa: BLE001 - any trouble: use the tokenizer's own call
            return None
        return copy if fast == self.tokenizer(probe, truncation=True, max_length=max_length)["input_ids"] else None

    @torch.inference_mode()
    def _iter_batches(
        self,
        texts: Sequence[str],
        max_length: int,
        batch_size: int,
        dense: bool,
        sparse: bool,
        colbert: bool,
    ) -> Iterator[_Batch]:
        """Encode ``texts`` longest first, one batch at a time (tokenizing all of ``texts`` at once)."""
        if not texts:
            return
        ids, lengths = self._tokenize(texts, max_length)
        order = np.argsort(-lengths, kind="stable")
        for start in range(0, len(order), batch_size):
            pos = order[start : start + batch_size]
            blen = lengths[pos]
            width = int(blen.max())
            bids = np.ascontiguousarray(ids[pos, :width])
            input_ids = self._to_device(torch.from_numpy(bids))
            lengths_dev = self._to_device(torch.from_numpy(blen))
            mask = (torch.arange(width, device=self.device)[None, :] < lengths_dev[:, None]).long()
            hidden = self.model(input_ids=input_ids, attention_mask=mask).last_hidden_state
            out = _Batch(positions=pos, input_ids=bids, lengths=blen)
            if dense:
                out.dense = F.normalize(hidden[:, 0].float(), dim=-1)
            if sparse:
                assert self.sparse_linear is not None
                out.sparse = torch.relu(self.sparse_linear(hidden)).squeeze(-1).float()
            if colbert:
                assert self.colbert_linear is not None
                vecs = self.colbert_linear(hidden[:, 1:]).float() * mask[:, 1:, None]
                out.colbert = F.normalize(vecs, dim=-1)
            yield out

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """A host tensor on the model's device; on CUDA through pinned memory, without waiting for the GPU."""
        if self.device.type != "cuda":
            return tensor.to(self.device)
        return tensor.pin_memory().to(self.device, non_blocking=True)

    def _start_host_copy(self, batch: _Batch) -> None:
        """Start copying a CUDA batch's outputs to (pinned) host memory; :meth:`_Batch.wait` ends it.

        The copies queue behind the batch's kernels and the next batch's kernels queue behind
        them, so the host can turn this batch into arrays while the GPU runs the next one.
        """
        if self.device.type != "cuda":
            return
        for name in ("dense", "sparse", "colbert"):
            tensor = getattr(batch, name)
            if tensor is not None:
                host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
                setattr(batch, name, host.copy_(tensor, non_blocking=True))
        batch.ready = torch.cuda.Event()
        batch.ready.record()

    def _sparse_arrays(self, batch: _Batch) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per batch row: (token ids int32 ascending, weights float32 > 0), the max over repeated tokens."""
        assert batch.sparse is not None
        weights = batch.sparse.cpu().numpy()
        ids = batch.input_ids
        n, width = ids.shape
        valid = (np.arange(width)[None, :] < batch.lengths[:, None]) & (weights > 0)
        valid &= ~np.isin(ids, self.unused_token_ids)
        rows, cols = np.nonzero(valid)
        key = (rows.astype(np.int64) << 32) | ids[rows, cols]
        w = weights[rows, cols]
        order = np.lexsort((w, key))  # by key, then weight ascending: a key's last entry is its max
        key, w = key[order], w[order]
        last = np.ones(len(key), dtype=bool)
        last[:-1] = key[1:] != key[:-1]
        key, w = key[last], w[last]
        tokens = (key & 0xFFFFFFFF).astype(np.int32)
        bounds = np.searchsorted(key >> 32, np.arange(n + 1))
        return [(tokens[bounds[i] : bounds[i + 1]], w[bounds[i] : bounds[i + 1]]) for i in range(n)]

    @staticmethod
    def _colbert_arrays(batch: _Batch) -> list[np.ndarray]:
        assert batch.colbert is not None
        vecs = batch.colbert.cpu().numpy()
        return [vecs[i, : int(n) - 1].copy() for i, n in enumerate(batch.lengths)]

    def _chunk_rows(self, batch_size: int) -> int:
        return max(16 * batch_size, 2048)

    def _encode_arrays(
        self, texts: Sequence[str], max_length: int, batch_size: int, dense: bool, sparse: bool, colbert: bool
    ) -> tuple[np.ndarray | None, list[tuple[np.ndarray, np.ndarray]] | None, list[np.ndarray] | None]:
        """Encode ``texts`` (one tokenization pass; callers bound its size) into input-order arrays.

        Each batch is stored one step late: its outputs are turned into arrays after the next
        batch has been queued on the device, so that on a GPU the two overlap.
        """
        n = len(texts)
        dense_out = np.zeros((n, self.dim), dtype=np.float32) if dense else None
        sparse_out: list[Any] | None = [None] * n if sparse else None
        colbert_out: list[Any] | None = [None] * n if colbert else None

        def store(batch: _Batch) -> None:
            batch.wait()
            if dense_out is not None:
                assert batch.dense is not None
                dense_out[batch.positions] = batch.dense.cpu().numpy()
            if sparse_out is not None:
                for p, item in zip(batch.positions, self._sparse_arrays(batch), strict=True):
                    sparse_out[p] = item
            if colbert_out is not None:
                for p, item in zip(batch.positions, self._colbert_arrays(batch), strict=True):
                    colbert_out[p] = item

        pending: _Batch | None = None
        for batch in self._iter_batches(texts, max_length, batch_size, dense, sparse, colbert):
            self._start_host_copy(batch)
            if pending is not None:
                store(pending)
            pending = batch
        if pending is not None:
            store(pending)
        return dense_out, sparse_out, colbert_out

    def encode(
        self,
        texts: Sequence[str],
        max_length: int,
        batch_size: int,
        dense: bool = True,
        sparse: bool = True,
        colbert: bool = False,
    ) -> M3Output:
        """Encode ``texts``; the results are in input order.

        Texts are tokenized with truncation to ``max_length`` tokens and run in batches of
        ``batch_size``, longest first (less padding). Large inputs are processed in chunks of
        ``max(16 * batch_size, 2048)`` texts, each sorted on its own.
        """
        if isinstance(texts, str):
            raise TypeError("encode() takes a sequence of texts, not a single string")
        self._check(max_length, batch_size, sparse, colbert)
        result = M3Output(
            dense=np.zeros((0, self.dim), dtype=np.float32) if dense else None,
            sparse=[] if sparse else None,
            colbert=[] if colbert else None,
        )
        dense_parts = []
        chunk = self._chunk_rows(batch_size)
        for start in range(0, len(texts), chunk):
            d, s, c = self._encode_arrays(texts[start : start + chunk], max_length, batch_size, dense, sparse, colbert)
            if d is not None:
                dense_parts.append(d)
            if s is not None and result.sparse is not None:
                result.sparse.extend(dict(zip(t.tolist(), w.tolist(), strict=True)) for t, w in s)
            if c is not None and result.colbert is not None:
                result.colbert.extend(c)
        if dense and dense_parts:
            result.dense = dense_parts[0] if len(dense_parts) == 1 else np.concatenate(dense_parts)
        return result


# --------------------------------------------------------------------------------------------
# multi-vector scoring of candidate pairs


@torch.inference_mode()
def multivec_scores(
    model: M3Encoder,
    queries: Sequence[str],
    passages: Mapping[str, str],
    pairs: Sequence[tuple[int, str]],
    q_max_length: int,
    p_max_length: int,
    batch_size: int,
) -> np.ndarray:
    """ColBERT scores (float32, aligned with ``pairs``) of ``(query index, docid)`` pairs.

    ``queries[i]`` is the text of query index ``i``; ``passages[docid]`` that of a passage. Every
    distinct passage is encoded once per call, in chunks, and its token vectors are dropped once
    its pairs are scored: memory is bounded by the chunk, not by the number of candidates.
    """
    model._check(q_max_length, batch_size, False, True)
    model._check(p_max_length, batch_size, False, True)
    scores = np.zeros(len(pairs), dtype=np.float32)
    if not pairs:
        return scores
    by_doc: dict[str, list[int]] = {}
    for k, (qi, docid) in enumerate(pairs):
        if not 0 <= qi < len(queries):
            raise IndexError(f"pair {k}: query index {qi} is out of range (0..{len(queries) - 1})")
        if docid not in passages:
            raise KeyError(f"pair {k}: docid {docid!r} is not among the given passages")
        by_doc.setdefault(docid, []).append(k)
    pair_q = np.array([qi for qi, _ in pairs], dtype=np.int64)

    # Queries: all needed ones, padded into one tensor on the device.
    q_index = np.unique(pair_q)
    q_slot = np.full(len(queries), -1, dtype=np.int64)
    q_slot[q_index] = np.arange(len(q_index))
    q_lens = torch.zeros(len(q_index), dtype=torch.long, device=model.device)
    q_vecs: torch.Tensor | None = None
    q_texts = [queries[i] for i in q_index]
    for batch in model._iter_batches(q_texts, q_max_length, batch_size, False, False, True):
        assert batch.colbert is not None
        if q_vecs is None:  # the first batch is the longest
            q_vecs = torch.zeros(len(q_index), batch.colbert.shape[1], batch.colbert.shape[2], device=model.device)
        pos = torch.from_numpy(batch.positions).to(model.device)
        q_vecs[pos, : batch.colbert.shape[1]] = batch.colbert
        q_lens[pos] = torch.from_numpy(batch.lengths - 1).to(model.device)
    assert q_vecs is not None
    q_valid = torch.arange(q_vecs.shape[1], device=model.device)[None, :] < q_lens[:, None]

    docids = list(by_doc)
    pair_block = max(batch_size, 64)
    chunk = model._chunk_rows(batch_size)
    for start in range(0, len(docids), chunk):
        chunk_ids = docids[start : start + chunk]
        texts = [passages[d] for d in chunk_ids]
        for batch in model._iter_batches(texts, p_max_length, batch_size, False, False, True):
            assert batch.colbert is not None
            p_vecs = batch.colbert  # [B, Lp, d], zero past each passage's end
            p_valid = (
                torch.arange(p_vecs.shape[1], device=model.device)[None, :]
                < torch.from_numpy(batch.lengths - 1).to(model.device)[:, None]
            )
            rows = [(row, k) for row, p in enumerate(batch.positions) for k in by_doc[chunk_ids[p]]]
            for b in range(0, len(rows), pair_block):
                block = rows[b : b + pair_block]
                prow = torch.tensor([r for r, _ in block], device=model.device)
                ks = np.array([k for _, k in block])
                qrow = torch.from_numpy(q_slot[pair_q[ks]]).to(model.device)
                sim = torch.bmm(q_vecs[qrow], p_vecs[prow].transpose(1, 2))  # [m, Lq, Lp]
                sim.masked_fill_(~p_valid[prow][:, None, :], -math.inf)
                best = sim.max(dim=-1).values.masked_fill(~q_valid[qrow], 0.0)
                scores[ks] = (best.sum(dim=1) / q_lens[qrow]).cpu().numpy()
    return scores


# --------------------------------------------------------------------------------------------
# Parquet outputs


def num_shards(corpus_parquet: str | os.PathLike[str], shard_size: int) -> int:
    """Number of shards of ``shard_size`` passages of a corpus Parquet file (from its metadata)."""
    return schemas.num_chunks(corpus_parquet, shard_size)


def _iter_rows(
    path: str | os.PathLike[str], columns: Sequence[str], start: int, stop: int, chunk_rows: int
) -> Iterator[pa.RecordBatch]:
    """Stream rows ``[start, stop)`` of ``columns`` of a Parquet file, reading only the row groups needed."""
    try:
        pfile = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise InputError(path, f"cannot read Parquet file ({err})") from err
    missing = [c for c in columns if c not in pfile.schema_arrow.names]
    if missing:
        raise InputError(path, f"missing column(s) {', '.join(missing)}")
    groups: list[int] = []
    first_row = None
    row = 0
    for i in range(pfile.num_row_groups):
        n = pfile.metadata.row_group(i).num_rows
        if row + n > start and row < stop and n > 0:
            groups.append(i)
            first_row = row if first_row is None else first_row
        row += n
    if not groups:
        return
    pos = first_row or 0
    try:
        for batch in pfile.iter_batches(batch_size=chunk_rows, row_groups=groups, columns=list(columns)):
            lo, hi = max(start, pos) - pos, min(stop, pos + batch.num_rows) - pos
            pos += batch.num_rows
            if hi > lo:
                yield batch.slice(lo, hi - lo)
            if pos >= stop:
                break
    except (pa.ArrowInvalid, OSError) as err:
        raise InputError(path, f"corrupt Parquet file ({err})") from err


def _dense_column(vectors: np.ndarray, dim: int, dense_dtype: str) -> pa.FixedSizeListArray:
    values = np.ascontiguousarray(vectors, dtype=np.float16 if dense_dtype == "float16" else np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), dim)


def _list_column(parts: Sequence[np.ndarray], dtype: Any) -> pa.ListArray:
    offsets = np.zeros(len(parts) + 1, dtype=np.int32)
    np.cumsum([len(p) for p in parts], out=offsets[1:])
    values = np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))


class _BothOrNeither:
    """Stream writers that publish their files together: if any fails, none of them is left behind."""

    def __init__(self, outputs: Sequence[tuple[str | os.PathLike[str] | None, pa.Schema]]) -> None:
        self._specs = outputs
        self._stack = ExitStack()
        self._published: list[Path] = []
        self.writers: list[schemas.StreamWriter | None] = []

    def __enter__(self) -> _BothOrNeither:
        with ExitStack() as guard:
            guard.push(self._stack)
            for path, schema in self._specs:
                if path is None:
                    self.writers.append(None)
                    continue
                writer = schemas.StreamWriter(path, schema)
                # pushed before the writer: it runs after the writer's exit, and records a published file
                self._stack.push(self._published_hook(writer.path))
                self.writers.append(self._stack.enter_context(writer))
            guard.pop_all()
        return self

    def _published_hook(self, path: Path):
        def hook(exc_type, exc, tb) -> bool:
            if exc_type is None:
                self._published.append(path)
            return False

        return hook

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            return bool(self._stack.__exit__(exc_type, exc, tb))
        except BaseException:
            for path in self._published:  # a later writer failed to close: withdraw the earlier ones
                path.unlink(missing_ok=True)
            raise


def _progress(total: int, desc: str):
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit=" passages",
        file=sys.stderr,
        mininterval=1.0 if sys.stderr.isatty() else 30.0,
        dynamic_ncols=True,
    )


def _write_encoded(
    encoder: M3Encoder,
    batches: Iterator[pa.RecordBatch],
    key: str,
    text_column: str,
    total: int,
    dense_out: str | os.PathLike[str] | None,
    sparse_out: str | os.PathLike[str] | None,
    dense_dtype: str,
    max_length: int,
    batch_size: int,
    desc: str,
    source: str | os.PathLike[str],
) -> dict[str, Any]:
    want_dense, want_sparse = dense_out is not None, sparse_out is not None
    dense_schema = schemas.dense_schema(encoder.dim, dense_dtype, key=key)
    sparse_schema = schemas.SPARSE if key == "docid" else schemas.QUERY_SPARSE
    rows = 0
    started = time.perf_counter()
    with _BothOrNeither([(dense_out, dense_schema), (sparse_out, sparse_schema)]) as out, _progress(total, desc) as bar:
        dense_w, sparse_w = out.writers
        for batch in batches:
            ids = batch.column(key)
            texts = batch.column(text_column).to_pylist()
            if ids.null_count or any(t is None for t in texts):
                bad = next(i for i in range(len(texts)) if texts[i] is None or not ids[i].is_valid)
                raise InputError(source, f"null {key} or {text_column} in row {rows + bad + 1}")
            d, s, _ = encoder._encode_arrays(texts, max_length, batch_size, want_dense, want_sparse, False)
            if dense_w is not None:
                assert d is not None
                dense_w.write(pa.table([ids, _dense_column(d, encoder.dim, dense_dtype)], schema=dense_schema))
            if sparse_w is not None:
                assert s is not None
                cols = [ids, _list_column([t for t, _ in s], np.int32), _list_column([w for _, w in s], np.float32)]
                sparse_w.write(pa.table(cols, schema=sparse_schema))
            rows += len(texts)
            bar.update(len(texts))
    seconds = time.perf_counter() - started
    return {
        "rows": rows,
        "dim": encoder.dim,
        "seconds": round(seconds, 3),
        "passages_per_s": round(rows / seconds, 2) if seconds > 0 else float("inf"),
    }


def _encoder(model: str | os.PathLike[str] | M3Encoder, device: str, dtype: str, need_sparse: bool) -> M3Encoder:
    if isinstance(model, M3Encoder):
        return model
    return M3Encoder.load(model, device=device, dtype=dtype, need_sparse=need_sparse, need_colbert=False)


def encode_corpus_shard(
    corpus_parquet: str | os.PathLike[str],
    shard: int,
    shard_size: int,
    dense_out: str | os.PathLike[str] | None,
    sparse_out: str | os.PathLike[str] | None,
    model: str | os.PathLike[str] | M3Encoder,
    max_length: int,
    batch_size: int,
    device: str = "auto",
    dtype: str = "auto",
    dense_dtype: str = "float32",
) -> dict[str, Any]:
    """Encode rows ``[shard * shard_size, (shard + 1) * shard_size)`` of a corpus Parquet file.

    Reads the ``docid`` and ``contents`` columns in a stream and writes, atomically and together
    (both files or neither), the dense vectors (:func:`schemas.dense_schema` with ``dense_dtype``)
    to ``dense_out`` and the lexical weights (:data:`schemas.SPARSE`) to ``sparse_out``; either
    may be ``None`` to skip it. ``model`` is a checkpoint (directory or hub id, loaded with
    ``device``/``dtype``) or an already loaded :class:`M3Encoder`. Shows a progress bar on stderr.

    Returns ``{"shard", "start", "stop", "rows", "dim", "seconds", "passages_per_s"}``.
    Raises ``ValueError`` for a shard outside the corpus.
    """
    if dense_out is None and sparse_out is None:
        raise ValueError("encode_corpus_shard: nothing to write (dense_out and sparse_out are both None)")
    if dense_dtype not in ("float16", "float32"):
        raise ValueError(f"dense_dtype must be float16 or float32, not {dense_dtype!r}")
    total = num_shards(corpus_parquet, shard_size)
    if not 0 <= shard < total:
        raise ValueError(f"shard {shard} is out of range: {corpus_parquet} has {total} shard(s) of {shard_size}")
    n_rows = schemas.count_rows(corpus_parquet)
    start, stop = shard * shard_size, min((shard + 1) * shard_size, n_rows)
    encoder = _encoder(model, device, dtype, need_sparse=sparse_out is not None)
    encoder._check(max_length, batch_size, sparse_out is not None, False)
    batches = _iter_rows(corpus_parquet, ["docid", "contents"], start, stop, encoder._chunk_rows(batch_size))
    stats = _write_encoded(
        encoder,
        batches,
        "docid",
        "contents",
        stop - start,
        dense_out,
        sparse_out,
        dense_dtype,
        max_length,
        batch_size,
        f"encode shard {shard}",
        corpus_parquet,
    )
    if stats["rows"] != stop - start:  # pragma: no cover - metadata and data disagree
        raise InputError(corpus_parquet, f"expected {stop - start} rows in shard {shard}, read {stats['rows']}")
    return {"shard": shard, "start": start, "stop": stop, **stats}


def encode_queries(
    queries_parquet: str | os.PathLike[str],
    dense_out: str | os.PathLike[str] | None,
    sparse_out: str | os.PathLike[str] | None,
    model: str | os.PathLike[str] | M3Encoder,
    max_length: int,
    batch_size: int,
    device: str = "auto",
    dtype: str = "auto",
) -> dict[str, Any]:
    """Encode a queries Parquet file (``qid``, ``query``) like :func:`encode_corpus_shard` does a shard.

    Writes float32 dense vectors (``schemas.dense_schema(dim, key="qid")``) and
    :data:`schemas.QUERY_SPARSE` lexical weights, both or neither. Returns ``{"rows", "dim",
    "seconds", "passages_per_s"}``.
    """
    if dense_out is None and sparse_out is None:
        raise ValueError("encode_queries: nothing to write (dense_out and sparse_out are both None)")
    n_rows = schemas.count_rows(queries_parquet)
    encoder = _encoder(model, device, dtype, need_sparse=sparse_out is not None)
    encoder._check(max_length, batch_size, sparse_out is not None, False)
    batches = _iter_rows(queries_parquet, ["qid", "query"], 0, n_rows, encoder._chunk_rows(batch_size))
    return _write_encoded(
        encoder,
        batches,
        "qid",
        "query",
        n_rows,
        dense_out,
        sparse_out,
        "float32",
        max_length,
        batch_size,
        "encode queries",
        queries_parquet,
    )
