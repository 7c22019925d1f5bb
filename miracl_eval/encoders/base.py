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
* batching and the host side (:mod:`miracl_eval.encoders.pipeline`): texts are tokenized by worker
  threads ahead of the model, cut into batches by a token budget over length-sorted windows, and
  their outputs assembled off the model's thread; results in input order;
* on CUDA: inputs go through pinned memory; each batch's outputs are copied to pinned host
  memory asynchronously, while the GPU runs the next batch.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from miracl_eval.encoders.checkpoints import HUB_ID, HUB_IGNORE, check_checkpoint, hub_error
from miracl_eval.encoders.kinds import DENSE, ROLES, SPARSE, Role
from miracl_eval.encoders.pipeline import TOKENIZE_SLICE, Batch, HostSettings, collect, encode_stream, plan_batches
from miracl_eval.errors import ConfigError, InputError, MiraclEvalError
from miracl_eval.jobs.devices import driver_version, held_gpus

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}


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

    def encode(self, texts: Sequence[str], role: Role, batch_size: int, host: HostSettings | None = None) -> Encoded:
        """Encode ``texts`` as queries or passages (max length, prefixes: from the spec, by role), in
        batches of at most ``batch_size`` texts (``host``: the rest of :class:`HostSettings`)."""
        ...


def hidden_size(model: torch.nn.Module) -> int:
    """The width of a transformers model's hidden states (its config's ``hidden_size``)."""
    config: Any = model.config
    return int(config.hidden_size)


def chunk_rows(batch_size: int) -> int:
    """Texts tokenized and sorted together: a bound on the memory a call holds."""
    return max(16 * batch_size, 2048)


def host_settings(batch_size: int, token_budget: int | None = None, workers: int | None = None) -> HostSettings:
    """The pipeline's settings for batches of at most ``batch_size`` texts (defaults for the rest)."""
    default = HostSettings()
    return HostSettings(
        token_budget=token_budget or default.token_budget,
        max_rows=batch_size,
        workers=workers or default.workers,
        window=chunk_rows(batch_size),
    )


# --------------------------------------------------------------------------------------------
# device, dtype, checkpoint


def resolve_device(device: str) -> torch.device:
    """``auto`` (CUDA when available, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``.

    A job that holds a GPU (:func:`miracl_eval.jobs.devices.held_gpus`: leased, or given by SLURM)
    never falls back to the CPU: with ``auto`` or ``cuda`` and no usable CUDA it stops with
    :func:`cuda_unusable` (torch's build, the driver, the devices, what to do)."""
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        held = held_gpus()
        if held is not None:
            raise MiraclEvalError(cuda_unusable(device, held))
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise MiraclEvalError(f"unknown device '{device}' (use auto, cpu, cuda or cuda:N)") from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise MiraclEvalError(cuda_unusable(device, held_gpus()))
    return dev


def cuda_unusable(device: str, held: str | None) -> str:
    """The message of a job that should run on a GPU and cannot use CUDA: what torch, the driver and
    the job have, and what to do."""
    build = torch.version.cuda
    reason = ""
    try:
        torch.cuda.init()
    except Exception as err:  # noqa: BLE001 - torch says why in its message
        reason = f": {str(err).strip().splitlines()[0]}" if str(err).strip() else ""
    driver = driver_version()
    given = f"this job holds GPU(s) {held}" if held is not None else "no GPU was given to this job"
    return (
        f"encoder.device '{device}': CUDA is not usable here{reason} ({given}; torch {torch.__version__}, "
        f"{'built for CUDA ' + build if build else 'a CPU-only build'}; NVIDIA driver "
        f"{driver or 'not found'}; CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}). "
        "Install a torch build that this driver supports (the docs' Install page, 'torch and your CUDA driver': "
        "docs/get-started/install.md), or set encoder.device: cpu to encode on the CPU on purpose"
    )


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """``auto`` (bfloat16 on a GPU with native bfloat16, float16 on an older one, float32 on the CPU),
    ``float32``, ``float16`` or ``bfloat16``."""
    if dtype == "auto":
        if device.type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported(including_emulation=False) else torch.float16
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise MiraclEvalError(f"unknown dtype '{dtype}' (use auto, float32, float16 or bfloat16)") from None


def dtype_name(dtype: torch.dtype) -> str:
    """A torch dtype's name as the settings spell it: ``bfloat16``, ``float32``."""
    return str(dtype).removeprefix("torch.")


def resolve_model_dir(checkpoint: str | os.PathLike[str], revision: str | None = None) -> Path:
    """A local folder for ``checkpoint``: the folder itself, or a hub snapshot (at ``revision``: the
    hub's main when None) for a hub id."""
    path = Path(checkpoint).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise InputError(path, "the checkpoint must be a folder (or a Hugging Face hub id), not a file")
    name = str(checkpoint)
    if not HUB_ID.match(name):
        raise InputError(path, "checkpoint folder does not exist")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id=name, revision=revision, ignore_patterns=HUB_IGNORE))
    except Exception as err:  # noqa: BLE001 - offline, unknown repo, gated repo...: all mean the same here
        raise hub_error(name, err) from err


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


class TransformerEncoder:
    """The shared encoder: a family subclasses it with :meth:`prepare`, :meth:`forward` and :meth:`rows`.

    ``suffix_ids`` are appended to every text's ids after truncation (which keeps room for them).
    ``from_checkpoint``: the settings read from the checkpoint's files rather than given; a max length
    read there that is longer than the model's positions is cut to them (one given is an error).
    """

    outputs: tuple[str, ...] = ()

    def __init__(
        self,
        ckpt: Checkpoint,
        spec: Mapping[str, Any],
        suffix_ids: Sequence[int] = (),
        from_checkpoint: Sequence[str] = (),
    ) -> None:
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
                if f"{role}_max_length" in from_checkpoint:  # sentence-transformers' default: the positions
                    self.spec[f"{role}_max_length"] = self.max_length_limit
                    continue
                raise ConfigError(
                    f"{role}_max_length",
                    f"{n} exceeds the model's limit of {self.max_length_limit} tokens ({self.path})",
                )
        self._backends: dict[int, bool] = {}  # truncation length -> whether the backend's direct call matches

    @property
    def precision(self) -> str:
        """The dtype the model runs in, as the encodings record it (``bfloat16``, ``float32``)."""
        return dtype_name(self.dtype)

    def encode_stream(
        self,
        chunks: Iterable[tuple[Any, Sequence[str]]],
        role: Role,
        kinds: Sequence[str],
        settings: HostSettings,
        timings: Any = None,
        progress: Any = None,
    ) -> Iterator[tuple[Any, dict[str, Any]]]:
        """``(key, outputs)`` per ``(key, texts)`` chunk, in order (:func:`pipeline.encode_stream`)."""
        return encode_stream(self, chunks, role, kinds, settings, timings, progress)

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

    def encode(self, texts: Sequence[str], role: Role, batch_size: int, host: HostSettings | None = None) -> Encoded:
        """Encode ``texts`` as ``role`` (see :class:`Encoder`); the results are in input order.

        ``batch_size``: texts per batch at most; ``host``: the rest of the batching (its
        ``max_rows`` is replaced by ``batch_size``)."""
        got = self.encode_outputs(texts, role, batch_size, self.outputs, host)
        return Encoded(dense=got.get(DENSE), sparse=got.get(SPARSE))

    def encode_outputs(
        self,
        texts: Sequence[str],
        role: Role,
        batch_size: int,
        kinds: Sequence[str],
        host: HostSettings | None = None,
    ) -> dict[str, Any]:
        """``{kind: values}`` of ``texts`` for each of ``kinds``: a float32 array for dense, else a list."""
        if isinstance(texts, str):
            raise TypeError("encode() takes a sequence of texts, not a single string")
        if batch_size < 1:
            raise ValueError("batch_size must be positive")
        settings = host_settings(batch_size) if host is None else dataclasses.replace(host, max_rows=batch_size)
        return collect(self, texts, role, kinds, settings)

    def tokenize(self, texts: Sequence[str], max_length: int) -> tuple[np.ndarray, np.ndarray]:
        """Token ids (int64, right-padded with the pad id) and lengths of ``texts``, suffix ids included.

        The ids of ``tokenizer(texts, truncation=True, max_length=max_length - len(suffix_ids))``
        followed by the suffix ids. Tokenized in slices: the tokenizer holds every token of a
        text before truncating it, so one call over thousands of long texts would peak high.
        """
        cut = max_length - len(self.suffix_ids)
        self.prime_tokenizer(cut)
        lists: list[list[int]] = []
        for start in range(0, len(texts), TOKENIZE_SLICE):
            lists.extend(self.token_ids(list(texts[start : start + TOKENIZE_SLICE]), cut))
        return self.pad(lists)

    def pad(self, lists: Sequence[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """Token id lists (before the suffix): a right-padded int64 matrix with the suffix ids, and the lengths."""
        if self.suffix_ids:
            lists = [ids + list(self.suffix_ids) for ids in lists]
        lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        width = int(lengths.max()) if len(lists) else 0
        ids = np.full((len(lists), width), self.pad_id, dtype=np.int64)
        ids[np.arange(width)[None, :] < lengths[:, None]] = np.fromiter(
            itertools.chain.from_iterable(lists), dtype=np.int64, count=int(lengths.sum())
        )
        return ids, lengths

    def prime_tokenizer(self, max_length: int, probe: Sequence[str] = ("a", "b c")) -> None:
        """Decide once, before threads share the tokenizer, whether its fast path serves ``max_length``."""
        if max_length not in self._backends:
            self._backends[max_length] = self._fast_backend_matches(list(probe), max_length)

    def token_ids(self, texts: list[str], max_length: int) -> list[list[int]]:
        """The ids of ``texts`` truncated to ``max_length`` (no suffix); :meth:`prime_tokenizer` first."""
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
        self,
        texts: Sequence[str],
        max_length: int,
        batch_size: int,
        kinds: Sequence[str],
        token_budget: int | None = None,
    ) -> Iterator[Batch]:
        """Encode prepared ``texts`` longest first, one batch at a time (tokenizing all of ``texts`` at once)."""
        if not texts:
            return
        ids, lengths = self.tokenize(texts, max_length)
        yield from self.iter_token_batches(ids, lengths, batch_size, kinds, token_budget)

    def iter_token_batches(
        self,
        ids: np.ndarray,
        lengths: np.ndarray,
        batch_size: int,
        kinds: Sequence[str],
        token_budget: int | None = None,
    ) -> Iterator[Batch]:
        """Encode tokenized texts (:meth:`tokenize`'s ids and lengths) longest first, one batch at a time:
        as many of the longest remaining texts as fit ``token_budget`` padded tokens (the encoding
        pipeline's default when None), at most ``batch_size``, as :func:`pipeline.plan_batches` cuts them."""
        budget = token_budget or HostSettings().token_budget
        for pos in plan_batches(lengths, budget, batch_size):
            blen = lengths[pos]
            bids = torch.from_numpy(np.ascontiguousarray(ids[pos, : int(blen.max())]))
            yield self.run_batch(pos, bids, blen, kinds)

    def run_batch(self, positions: np.ndarray, ids: torch.Tensor, lengths: np.ndarray, kinds: Sequence[str]) -> Batch:
        """The family's forward pass over one batch of host ids (pinned on CUDA), without waiting for the device."""
        width = ids.shape[1]
        input_ids = self._to_device(ids)
        lengths_dev = self._to_device(torch.from_numpy(lengths))
        mask = (torch.arange(width, device=self.device)[None, :] < lengths_dev[:, None]).long()
        return Batch(
            positions=positions, input_ids=ids.numpy(), lengths=lengths, tensors=self.forward(input_ids, mask, kinds)
        )

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """A host tensor on the model's device; on CUDA through pinned memory, without waiting for the GPU."""
        if self.device.type != "cuda":
            return tensor.to(self.device)
        if not tensor.is_pinned():
            tensor = tensor.pin_memory()
        return tensor.to(self.device, non_blocking=True)

    def start_host_copy(self, batch: Batch) -> None:
        """Start copying a CUDA batch's outputs to (pinned) host memory; :meth:`Batch.wait` ends it.

        The copies queue behind the batch's kernels and the next batch's kernels queue behind
        them, so the host can turn this batch into arrays while the GPU runs the next one.
        The copies run on the current stream of the model's device (a device-to-host copy runs on its
        source's), and the event is recorded on that same stream: with the model on ``cuda:1`` and
        the thread's current device 0, an event on device 0's stream would mark nothing of the copy.
        """
        if self.device.type != "cuda":
            return
        stream = torch.cuda.current_stream(self.device)
        for name, tensor in batch.tensors.items():
            host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            batch.tensors[name] = host.copy_(tensor, non_blocking=True)
        batch.ready = torch.cuda.Event()
        batch.ready.record(stream)
