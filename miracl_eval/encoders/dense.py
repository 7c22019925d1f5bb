"""The dense family: one vector per text from a transformers encoder or decoder (E5, GTE, mDPR,
mContriever, E5-mistral, LaBSE, ...), as the checkpoint's sentence-transformers module chain runs it
(:mod:`miracl_eval.encoders.st_settings`).

* texts: a query is ``query_template`` with ``{query}`` replaced by it (and ``{task}`` by
  ``query_instruction``, the dataset's task instruction unless the config gives one) when the
  template is set (both in one pass: :mod:`miracl_eval.encoders.prompts`), else
  ``query_prefix + query``; a passage is ``passage_prefix + passage``; lower-cased
  by the tokenizer when the checkpoint's Transformer module says ``do_lower_case``;
* pooling, as sentence-transformers' ``Pooling`` (right-padded texts): ``cls``, the first token's last
  hidden state (mDPR, BGE); ``mean``, the mean over the text's tokens, special ones included (the
  attention mask); ``max``, the largest value of each dimension over the tokens; ``mean_sqrt_len_tokens``,
  the sum divided by the square root of the token count; ``weightedmean``, the mean weighted by the
  token's position (1, 2, ...); ``lasttoken``, the last token's state; and ``last``, the last token's
  state with the text ending with the tokenizer's EOS token: appended after truncation (to
  ``max_length - 1`` tokens) unless the tokenizer adds it itself, as E5-mistral's recipe and
  FlagEmbedding's decoder-only embedder (with an EOS-adding tokenizer) do;
* then the checkpoint's modules after the pooling, in their order: ``Dense`` (``activation(W x + b)``,
  LaBSE's and other projection heads) and ``Normalize`` (L2); ``normalize`` given in the config adds a
  Normalize at the end, or drops the checkpoint's.

Pooling and the modules after it run in float32 (after the upcast of the hidden states).
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from miracl_eval.encoders.base import (
    Checkpoint,
    TransformerEncoder,
    hidden_size,
    load_checkpoint,
    resolve_model_dir,
)
from miracl_eval.encoders.kinds import DENSE, Role
from miracl_eval.encoders.prompts import TASK, query_text
from miracl_eval.encoders.st_settings import (
    NORMALIZE,
    DenseModule,
    MissingSettings,
    StChain,
    Step,
    fill_from_checkpoint,
    read_st_chain,
)
from miracl_eval.errors import ConfigError, InputError

log = logging.getLogger(__name__)


class DenseEncoder(TransformerEncoder):
    """A dense model ready to encode: use :func:`load`."""

    outputs = (DENSE,)

    def __init__(
        self,
        ckpt: Checkpoint,
        spec: Mapping[str, Any],
        chain: StChain | None = None,
        from_checkpoint: Sequence[str] = (),
    ) -> None:
        self.pooling = str(spec["pooling"])
        self.normalize = bool(spec["normalize"])
        suffix = _eos_suffix(ckpt) if self.pooling == "last" else ()
        super().__init__(ckpt, spec, suffix_ids=suffix, from_checkpoint=from_checkpoint)
        steps: tuple[Step, ...] = chain.steps_for(self.normalize) if chain else ((NORMALIZE,) if self.normalize else ())
        width = hidden_size(self.model)
        self.steps: list[torch.nn.Module | str] = []
        for step in steps:
            if isinstance(step, DenseModule):
                self.steps.append(dense_head(step, width, ckpt.device))
                width = step.out_features
            else:
                self.steps.append(step)
        self.dim = width

    def prepare(self, texts: Sequence[str], role: Role) -> list[str]:
        if role == "passage":
            prefix = self.spec["passage_prefix"]
            return [prefix + t for t in texts]
        template = self.spec["query_template"]
        if template is not None:
            instruction = self.spec.get("query_instruction")
            if TASK in template and not instruction:
                raise ConfigError("query_instruction", "query_template has {task} and no instruction fills it")
            return [query_text(template, t, instruction) for t in texts]
        prefix = self.spec["query_prefix"]
        return [prefix + t for t in texts]

    def forward(self, input_ids: torch.Tensor, mask: torch.Tensor, kinds: Sequence[str]) -> dict[str, torch.Tensor]:
        hidden = self.model(input_ids=input_ids, attention_mask=mask).last_hidden_state
        vecs = pool(hidden, mask, self.pooling)
        for step in self.steps:
            vecs = F.normalize(vecs, p=2, dim=-1) if step == NORMALIZE else step(vecs)  # type: ignore[operator]
        return {DENSE: vecs}


def pool(hidden: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """The float32 vector of each right-padded text (``mask``: 1 on its tokens) by ``mode``, as
    sentence-transformers' ``Pooling`` computes it (``last``: the last token, as ``lasttoken``)."""
    if mode == "cls":
        return hidden[:, 0].float()
    if mode in ("last", "lasttoken"):
        last = mask.sum(dim=1) - 1
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last].float()
    states = hidden.float()
    weights = mask[:, :, None].float()
    if mode == "max":
        return states.masked_fill(weights == 0, float("-inf")).max(dim=1).values
    if mode == "weightedmean":  # position weights 1, 2, ... (the first token is the first position: right padding)
        weights = (
            weights * torch.arange(1, hidden.shape[1] + 1, device=hidden.device, dtype=torch.float32)[None, :, None]
        )
    summed = (states * weights).sum(dim=1)
    count = weights.sum(dim=1).clamp(min=1e-9)
    if mode in ("mean", "weightedmean"):
        return summed / count
    if mode == "mean_sqrt_len_tokens":
        return summed / torch.sqrt(count)
    raise ValueError(f"unknown pooling {mode!r}")


class DenseHead(torch.nn.Module):
    """A sentence-transformers ``Dense`` module: ``activation(linear(x))`` in float32."""

    def __init__(self, linear: torch.nn.Linear, activation: torch.nn.Module) -> None:
        super().__init__()
        self.linear = linear
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.linear(x))


def dense_head(module: DenseModule, width: int, device: torch.device) -> DenseHead:
    """The Dense module's head with its weights, float32 on ``device``. Raises :class:`InputError` naming
    its weights file (or ``modules.json`` and the module) when they do not fit or cannot be read."""
    where = module.folder.parent / "modules.json"
    if module.in_features != width:
        raise InputError(
            where, f"module {module.name}: in_features {module.in_features} is not the width of its input ({width})"
        )
    try:
        cls = _torch_class(module.activation)
        activation = cls()
    except (ImportError, AttributeError, TypeError, ValueError) as err:
        raise InputError(
            where, f"module {module.name}: activation_function {module.activation!r} is not a torch module class "
            f"that takes no argument ({err})",
        ) from None  # fmt: skip
    try:
        if module.weights.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(module.weights))
        else:
            state = torch.load(module.weights, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - a corrupt or foreign file: say which
        raise InputError(
            module.weights, f"cannot read the Dense module's weights ({type(err).__name__}: {err})"
        ) from None
    want: dict[str, tuple[int, ...]] = {"linear.weight": (module.out_features, module.in_features)}
    if module.bias:
        want["linear.bias"] = (module.out_features,)
    got = {k: tuple(v.shape) for k, v in state.items()} if isinstance(state, Mapping) else {}
    if got != want:
        raise InputError(
            module.weights, f"holds {got or 'no tensors'}, not the Dense module's {want} (its config.json's sizes)"
        )
    linear = torch.nn.Linear(module.in_features, module.out_features, bias=module.bias)
    linear.load_state_dict({k.removeprefix("linear."): v.float() for k, v in state.items()})
    return DenseHead(linear, activation).to(device=device, dtype=torch.float32).eval().requires_grad_(False)


def _torch_class(dotted: str) -> type[torch.nn.Module]:
    """The ``torch.*`` module class a dotted path names (as sentence-transformers imports it)."""
    module_name, _, name = dotted.rpartition(".")
    if not dotted.startswith("torch.") or not module_name:
        raise ValueError("not a torch.* path")
    cls = getattr(importlib.import_module(module_name), name)
    if not (inspect.isclass(cls) and issubclass(cls, torch.nn.Module)):
        raise TypeError(f"{dotted} is not a torch.nn.Module class")
    return cls


def _eos_suffix(ckpt: Checkpoint) -> tuple[int, ...]:
    """The EOS id to append for last-token pooling: none when the tokenizer ends every text with it."""
    eos = ckpt.tokenizer.eos_token_id
    if eos is None:
        raise InputError(ckpt.path, "pooling 'last' needs a tokenizer with an EOS token, and this one has none")
    ids = ckpt.tokenizer("x")["input_ids"]
    return () if ids and ids[-1] == eos else (int(eos),)


def lower_case(tokenizer: Any) -> None:
    """Lower-case every text before the tokenizer's own normalizer, as sentence-transformers' Transformer
    module does for ``do_lower_case`` (a ``Lowercase`` in front of the backend's normalizer, when it has none)."""
    from tokenizers.normalizers import Lowercase
    from tokenizers.normalizers import Sequence as NormalizerSequence

    backend = tokenizer.backend_tokenizer
    normalizer: Any = backend.normalizer
    is_sequence = isinstance(normalizer, NormalizerSequence)
    steps: list[Any] = list(backend.normalizer) if is_sequence else [normalizer]  # (typed as not iterable)
    if any(isinstance(n, Lowercase) for n in steps):
        return
    chain: list[Any] = [Lowercase()]
    if is_sequence:
        chain += steps
    elif normalizer is not None:
        chain.append(normalizer)
    backend.normalizer = NormalizerSequence(chain)


def load(spec: Mapping[str, Any], device: str = "auto", dtype: str = "auto") -> DenseEncoder:
    """Load the dense model of a resolved ``spec`` (a local folder or a hub id) with its checkpoint's
    sentence-transformers module chain."""
    folder = resolve_model_dir(spec["checkpoint"], spec.get("revision"))
    chain = read_st_chain(folder)  # before the slow load: a chain that cannot run stops here
    try:
        spec, filled = fill_from_checkpoint(spec, folder, "models", chain)
    except MissingSettings as err:  # read when loaded: the checkpoint lacks what the config left out
        raise InputError(
            folder,
            f"{', '.join(err.names)} not set in the config, and the checkpoint has no sentence-transformers "
            "files (modules.json, 1_Pooling/config.json) to read them from",
        ) from None
    ckpt = load_checkpoint(folder, "AutoModel", device, dtype)
    if chain is not None and chain.do_lower_case:
        lower_case(ckpt.tokenizer)
        log.info("texts lower-cased before tokenization (the checkpoint's do_lower_case)")
    return DenseEncoder(ckpt, spec, chain, filled)
