"""What every encoder shares, written once; a family module only says how texts are prepared and
how a batch of hidden states (or logits) becomes outputs.

* device (``auto``: CUDA when available) and dtype (``auto``: bfloat16 on CUDA, float32 on the
  CPU); the whole model runs in that dtype, outputs are float32 (pooled, normalized and
  weighted after the upcast);
* checkpoints: a local folder, or a Hugging Face hub snapshot for a hub id; a local folder
  without ``config.json``, weights or a tokenizer is an :class:`InputError` naming the folder
  and the missing file, an unreachable hub one :class:`DownloadError` sentence;
* tokenization: the same ids as ``tokenizer(texts, truncation=True, max_length=...)``, through
  the fast tokenizer's Rust backend when it agrees with the tokenizer (checked on probes);
  a family may append ids after truncation (the EOS of last-token pooling);
* batching: texts are encoded in chunks of :func:`chunk_rows` texts (memory stays bounded),
  each chunk in batches of the longest texts first (less padding), results in input order;
* on CUDA: inputs go through pinned memory; each batch's outputs are copied to pinned host
  memory asynchronously and turned into arrays one batch late, while the GPU runs the next.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import torch

from miracl_eval.encoders.checkpoints import check_checkpoint
from miracl_eval.errors import ConfigError, DownloadError, InputError, MiraclEvalError

Role = Literal["query", "passage"]
ROLES: tuple[Role, ...] = ("query", "passage")
DENSE, SPARSE = "dense", "sparse"

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
class Encoded:
    """What :meth:`Encoder.encode` returns, in input order; an output the family does not have is ``None``.

    ``dense``: float32 ``[n, dim]``. ``sparse``: per text, (vocabulary ids int32 ascending,
    weights float32 > 0).
    """

    dense: np.ndarray | None
    sparse: list[tuple[np.ndarray, np.ndarray]] | None


class Encoder(Protocol):
    """A loaded model of any family."""

    outputs: tuple[str, ...]  # what encode() fills in: a subset of ("dense", "sparse")
    dim: int | None  # the dense vectors' dimension (None without dense output)

    def encode(self, texts: Sequence[str], role: Role, batch_size: int) -> Encoded:
        """Encode ``texts`` as queries or passages (max length, prefixes: from the spec, by role)."""
        ...


def hidden_size(model: torch.nn.Module) -> int:
    """The width of a transformers model's hidden states (its config's ``hidden_size``)."""
    config: Any = model.config
    return int(config.hidden_size)


def chunk_rows(batch_size: int) -> int:
    """Texts tokenized and sorted together: a bound on the memory a call holds."""
    return max(16 * batch_size, 2048)


# --------------------------------------------------------------------------------------------
# device, dtype, checkpoint


def resolve_device(device: str) -> torch.device:
    """``auto`` (CUDA when available, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise MiraclEvalError(f"unknown device '{device}' (use auto, cpu, cuda or cuda:N)") from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise MiraclEvalError(f"device '{device}' was requested but CUDA is not available here")
    return dev


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """``auto`` (bfloat16 on CUDA, float32 elsewhere), ``float32``, ``float16`` or ``bfloat16``."""
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise MiraclEvalError(f"unknown dtype '{dtype}' (use auto, float32, float16 or bfloat16)") from None


def resolve_model_dir(checkpoint: str | os.PathLike[str]) -> Path:
    """A local folder for ``checkpoint``: the folder itself, or a hub snapshot for a hub id."""
    path = Path(checkpoint).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise InputError(path, "the checkpoint must be a folder (or a Hugging Face hub id), not a file")
    name = str(checkpoint)
    if not _HUB_ID.match(name):
        raise InputError(path, "checkpoint folder does not exist")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id=name, ignore_patterns=_HUB_IGNORE))
    except Exception as err:  # noqa: BLE001 - offline, unknown repo, gated repo...: all mean the same here
        raise DownloadError(
            f"cannot download the checkpoint '{name}' from the Hugging Face hub ({type(err).__name__}) and no "
            f"local folder of that name exists: point the model's `checkpoint` setting at a local folder holding it"
        ) from err


@dataclass
class Checkpoint:
    """A transformers model (eval mode, no gradients, on its device in its dtype) and its tokenizer."""

    model: torch.nn.Module
    tokenizer: Any
    path: Path
    device: torch.device
    dtype: torch.dtype


def load_checkpoint(
    path: Path, model_class: str, device: str = "auto", dtype: str = "auto", required_files: Sequence[str] = ()
) -> Checkpoint:
    """Load the model (``transformers.<model_class>``, e.g. ``AutoModel``) and tokenizer of a local folder.

    ``required_files``: more files the family needs in the folder (checked before the slow load).
    """
    import transformers

    dev = resolve_device(device)
    tdtype = resolve_dtype(dtype, dev)
    check_checkpoint(path)
    for name in required_files:
        if not (path / name).is_file():
            raise InputError(path / name, "missing: the checkpoint folder must hold this file")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    except Exception as err:  # noqa: BLE001
        raise InputError(path, f"cannot load the tokenizer ({type(err).__name__}: {err})") from err
    try:
        model = getattr(transformers, model_class).from_pretrained(path, dtype=tdtype)
    except Exception as err:  # noqa: BLE001
        raise InputError(path, f"cannot load the transformers model ({type(err).__name__}: {err})") from err
    if getattr(model, "pooler", None) is not None:
        model.pooler = None  # no family uses it: skip its work
    model.to(device=dev, dtype=tdtype).eval().requires_grad_(False)
    return Checkpoint(model, tokenizer, path, dev, tdtype)


# --------------------------------------------------------------------------------------------
# encoding


@dataclass
class Batch:
    """One encoded batch, in the batch's (length-sorted) order; tensors stay on the model's device."""

    positions: np.ndarray  # the batch rows' indices in the encoded text list
    input_ids: np.ndarray  # int64 [B, L], right-padded
    lengths: np.ndarray  # int64 [B], tokens including special ones
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # float32 outputs of the family's forward
    ready: Any = None  # a CUDA event marking the end of the copies started by TransformerEncoder._start_host_copy

    def wait(self) -> None:
        """Block until the batch's tensors have reached the host (no-op when they were computed there)."""
        if self.ready is not None:
            self.ready.synchronize()
            self.ready = None


class TransformerEncoder:
    """The shared encoder: a family subclasses it with :meth:`prepare`, :meth:`forward` and :meth:`rows`.

    ``suffix_ids`` are appended to every text's ids after truncation (which keeps room for them).
    """

    outputs: tuple[str, ...] = ()

    def __init__(self, ckpt: Checkpoint, spec: Mapping[str, Any], suffix_ids: Sequence[int] = ()) -> None:
        self.model = ckpt.model
        self.tokenizer = ckpt.tokenizer
        self.path = ckpt.path
        self.device = ckpt.device
        self.dtype = ckpt.dtype
        self.spec = dict(spec)
        self.dim: int | None = None
        self.suffix_ids = tuple(int(i) for i in suffix_ids)
        tok = self.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        if pad is None:
            raise InputError(self.path, "the tokenizer has neither a pad token nor an EOS token to pad with")
        self.pad_id = int(pad)
        config: Any = self.model.config  # a transformers config (torch types it as a module attribute)
        limit = int(getattr(config, "max_position_embeddings", 0) or 0)
        if limit and config.model_type in ("xlm-roberta", "roberta", "camembert") and config.pad_token_id is not None:
            limit -= int(config.pad_token_id) + 1  # RoBERTa positions start after the padding index
        self.max_length_limit: int | None = limit or None
        for role in ROLES:
            if f"{role}_max_length" not in self.spec:  # a spec for one role's texts (registry.encoding_settings)
                continue
            n = self.max_length(role)
            if n < len(self.suffix_ids) + 2:
                raise ConfigError(f"{role}_max_length", f"{n} leaves no room for the text")
            if self.max_length_limit is not None and n > self.max_length_limit:
                raise ConfigError(
                    f"{role}_max_length",
                    f"{n} exceeds the model's limit of {self.max_length_limit} tokens ({self.path})",
                )
        self._backends: dict[int, bool] = {}  # truncation length -> whether the backend's direct call matches

    # ---------------------------------------------------------------- what a family says

    def prepare(self, texts: Sequence[str], role: Role) -> list[str]:
        """The texts the model sees (prefixes, instructions); the texts themselves unless a family says otherwise."""
        return list(texts)

    def forward(self, input_ids: torch.Tensor, mask: torch.Tensor, kinds: Sequence[str]) -> dict[str, torch.Tensor]:
        """A batch's outputs named in ``kinds``, float32 tensors on the device (``mask``: long ``[B, L]``)."""
        raise NotImplementedError

    def rows(self, kind: str, batch: Batch) -> list[Any]:
        """The per-row host values of a non-dense output, in the batch's order (its tensors are on the host)."""
        raise NotImplementedError

    # ---------------------------------------------------------------- machinery

    def max_length(self, role: Role) -> int:
        if role not in ROLES:
            raise ValueError(f"role must be 'query' or 'passage', not {role!r}")
        return int(self.spec[f"{role}_max_length"])

    def encode(self, texts: Sequence[str], role: Role, batch_size: int) -> Encoded:
        """Encode ``texts`` as ``role`` (see :class:`Encoder`); the results are in input order."""
        got = self.encode_outputs(texts, role, batch_size, self.outputs)
        return Encoded(dense=got.get(DENSE), sparse=got.get(SPARSE))

    def encode_outputs(self, texts: Sequence[str], role: Role, batch_size: int, kinds: Sequence[str]) -> dict[str, Any]:
        """``{kind: values}`` of ``texts`` for each of ``kinds``: a float32 array for dense, else a list."""
        if isinstance(texts, str):
            raise TypeError("encode() takes a sequence of texts, not a single string")
        if batch_size < 1:
            raise ValueError("batch_size must be positive")
        max_length = self.max_length(role)
        parts: dict[str, list[Any]] = {kind: [] for kind in kinds}
        chunk = chunk_rows(batch_size)
        for start in range(0, len(texts), chunk):
            prepared = self.prepare(texts[start : start + chunk], role)
            for kind, values in self._encode_chunk(prepared, max_length, batch_size, kinds).items():
                if kind == DENSE:
                    parts[kind].append(values)
                else:
                    parts[kind].extend(values)
        out: dict[str, Any] = dict(parts)
        if DENSE in out:
            dense = out[DENSE]
            out[DENSE] = np.concatenate(dense) if dense else np.zeros((0, self.dim or 0), dtype=np.float32)
        return out

    def tokenize(self, texts: Sequence[str], max_length: int) -> tuple[np.ndarray, np.ndarray]:
        """Token ids (int64, right-padded with the pad id) and lengths of ``texts``, suffix ids included.

        The ids of ``tokenizer(texts, truncation=True, max_length=max_length - len(suffix_ids))``
        followed by the suffix ids. Tokenized in slices: the tokenizer holds every token of a
        text before truncating it, so one call over thousands of long texts would peak high.
        """
        cut = max_length - len(self.suffix_ids)
        lists: list[list[int]] = []
        for start in range(0, len(texts), _TOKENIZE_SLICE):
            lists.extend(self._token_ids(list(texts[start : start + _TOKENIZE_SLICE]), cut))
        if self.suffix_ids:
            lists = [ids + list(self.suffix_ids) for ids in lists]
        lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        width = int(lengths.max()) if len(lists) else 0
        ids = np.full((len(lists), width), self.pad_id, dtype=np.int64)
        ids[np.arange(width)[None, :] < lengths[:, None]] = np.fromiter(
            itertools.chain.from_iterable(lists), dtype=np.int64, count=int(lengths.sum())
        )
        return ids, lengths

    def _token_ids(self, texts: list[str], max_length: int) -> list[list[int]]:
        if max_length not in self._backends:
            self._backends[max_length] = self._fast_backend_matches(texts[:16], max_length)
        if not self._backends[max_length]:
            return self.tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
        return [e.ids for e in self._fast_encode(texts, max_length)]

    def _fast_encode(self, texts: list[str], max_length: int) -> list[Any]:
        """The tokenizer's own backend (``tokenizers``), set up for this call: no padding, truncation
        to ``max_length``. transformers sets the backend's truncation and padding anew on each of its
        own calls, so setting them here changes nothing for those; a copy of the backend would cost a
        round trip through JSON (a second for a 250,000-piece vocabulary)."""
        backend = self.tokenizer.backend_tokenizer
        backend.no_padding()
        backend.enable_truncation(
            max_length,
            stride=0,
            strategy="longest_first",
            direction=getattr(self.tokenizer, "truncation_side", "right"),
        )
        backend.encode_special_tokens = bool(getattr(self.tokenizer, "split_special_tokens", False))
        return backend.encode_batch_fast(texts, add_special_tokens=True)

    def _fast_backend_matches(self, probe: list[str], max_length: int) -> bool:
        """Whether the backend's direct call (:meth:`_fast_encode`) gives the tokenizer's own ids."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is None or not hasattr(backend, "encode_batch_fast"):
            return False
        specials = " ".join(str(t) for t in self.tokenizer.all_special_tokens)
        probe = [*probe, "", f"a {specials} c", " x " * (2 * max_length)]
        try:
            fast = [e.ids for e in self._fast_encode(probe, max_length)]
        except Exception:  # noqa: BLE001 - any trouble: use the tokenizer's own call
            return False
        return fast == self.tokenizer(probe, truncation=True, max_length=max_length)["input_ids"]

    @torch.inference_mode()
    def iter_batches(
        self, texts: Sequence[str], max_length: int, batch_size: int, kinds: Sequence[str]
    ) -> Iterator[Batch]:
        """Encode prepared ``texts`` longest first, one batch at a time (tokenizing all of ``texts`` at once)."""
        if not texts:
            return
        ids, lengths = self.tokenize(texts, max_length)
        order = np.argsort(-lengths, kind="stable")
        for start in range(0, len(order), batch_size):
            pos = order[start : start + batch_size]
            blen = lengths[pos]
            width = int(blen.max())
            bids = np.ascontiguousarray(ids[pos, :width])
            input_ids = self._to_device(torch.from_numpy(bids))
            lengths_dev = self._to_device(torch.from_numpy(blen))
            mask = (torch.arange(width, device=self.device)[None, :] < lengths_dev[:, None]).long()
            yield Batch(positions=pos, input_ids=bids, lengths=blen, tensors=self.forward(input_ids, mask, kinds))

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """A host tensor on the model's device; on CUDA through pinned memory, without waiting for the GPU."""
        if self.device.type != "cuda":
            return tensor.to(self.device)
        return tensor.pin_memory().to(self.device, non_blocking=True)

    def _start_host_copy(self, batch: Batch) -> None:
        """Start copying a CUDA batch's outputs to (pinned) host memory; :meth:`Batch.wait` ends it.

        The copies queue behind the batch's kernels and the next batch's kernels queue behind
        them, so the host can turn this batch into arrays while the GPU runs the next one.
        """
        if self.device.type != "cuda":
            return
        for name, tensor in batch.tensors.items():
            host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            batch.tensors[name] = host.copy_(tensor, non_blocking=True)
        batch.ready = torch.cuda.Event()
        batch.ready.record()

    def _encode_chunk(
        self, texts: Sequence[str], max_length: int, batch_size: int, kinds: Sequence[str]
    ) -> dict[str, Any]:
        """Encode prepared ``texts`` (one tokenization pass; callers bound its size) into input-order values.

        Each batch is stored one step late: its outputs are turned into arrays after the next
        batch has been queued on the device, so that on a GPU the two overlap.
        """
        n = len(texts)
        out: dict[str, Any] = {
            kind: np.zeros((n, self.dim or 0), dtype=np.float32) if kind == DENSE else [None] * n for kind in kinds
        }

        def store(batch: Batch) -> None:
            batch.wait()
            for kind in kinds:
                if kind == DENSE:
                    out[kind][batch.positions] = batch.tensors[kind].cpu().numpy()
                else:
                    for p, item in zip(batch.positions, self.rows(kind, batch), strict=True):
                        out[kind][p] = item

        pending: Batch | None = None
        for batch in self.iter_batches(texts, max_length, batch_size, kinds):
            self._start_host_copy(batch)
            if pending is not None:
                store(pending)
            pending = batch
        if pending is not None:
            store(pending)
        return out
