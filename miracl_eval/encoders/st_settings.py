"""A dense model's module chain and settings read from its checkpoint's sentence-transformers files.

Most embedding checkpoints ship how sentence-transformers runs them: ``modules.json`` lists the modules
that ``SentenceTransformer(folder)`` runs, in order. :func:`read_st_chain` reads the whole chain, torch-free,
and refuses what it cannot run exactly (an error naming ``modules.json`` and the module, never a skip):

* ``Transformer`` (first, the checkpoint's own folder): ``sentence_bert_config.json`` (or an earlier
  release's ``sentence_{model}_config.json``). The truncation length is sentence-transformers': the
  tokenizer's ``model_max_length`` set from ``max_seq_length`` (or from ``processor_kwargs``'
  ``model_max_length``), else ``tokenizer_config.json``'s, capped at ``config.json``'s
  ``max_position_embeddings``; ``query_length`` / ``document_length`` replace it for queries /
  passages (what ``encode_query`` / ``encode_document`` pass). ``do_lower_case`` puts a ``Lowercase``
  normalizer in front of the tokenizer's own, as sentence-transformers does (a checkpoint saved by
  sentence-transformers 6 has it in ``tokenizer.json`` already). A chat-template (``message``) or any
  other modality, query expansion, ``processing_kwargs``, model or configuration arguments that change
  the outputs are refused;
* ``Pooling``: every mode of sentence-transformers 6 (``cls``, ``mean``, ``max``, ``mean_sqrt_len_tokens``,
  ``weightedmean``, ``lasttoken``; the ``pooling_mode_*`` flags of earlier releases, none set meaning
  ``mean``); several modes concatenated, and ``include_prompt: false`` with a prompt, are refused;
* after the pooling, in their order: ``Dense`` (``{path}/config.json``: ``in_features``, ``out_features``,
  ``bias``, ``activation_function`` a ``torch.*`` module class, default ``Tanh``; weights in
  ``{path}/model.safetensors`` or ``pytorch_model.bin``), ``Normalize`` and ``Dropout`` (nothing at
  inference). Any other module type, and any type outside ``sentence_transformers`` (its own code), is refused.

``config_sentence_transformers.json`` names the prompts: ``query``, and the first of ``document``,
``passage`` and ``corpus`` in the file, the order in which ``SentenceTransformer.encode_document`` looks for
them (sentence-transformers 6 also fills in an empty ``document`` prompt when it loads a checkpoint that
names none, which is not read here: a checkpoint saved with ``passage: `` keeps it).

A ``dense`` model whose ``pooling``, ``normalize``, ``query_prefix``, ``passage_prefix``,
``query_max_length`` or ``passage_max_length`` is left out takes it from there (:func:`fill_from_checkpoint`);
a setting given in the config wins (a max length longer than the checkpoint's is honoured, as
``SentenceTransformer``'s ``max_seq_length`` set by hand; past the model's positions it is an error naming
the key). Without the files, a missing ``pooling`` or ``normalize`` is an error naming it, a missing prompt
is no prompt and a missing max length 512. The Dense modules always run: they are the checkpoint's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from miracl_eval.errors import ConfigError, InputError

log = logging.getLogger(__name__)

#: the settings that may be read from the checkpoint, and the ones that must then be found there
FROM_CHECKPOINT = (
    "pooling",
    "normalize",
    "query_prefix",
    "passage_prefix",
    "query_max_length",
    "passage_max_length",
)
REQUIRED = ("pooling", "normalize")
#: the max length of a model whose checkpoint has no sentence-transformers files and whose config gives none
DEFAULT_MAX_LENGTH = 512
#: sentence-transformers 6's pooling modes (``Pooling.POOLING_MODES``); each is a ``pooling`` setting of its own
ST_POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
#: the ``pooling_mode_*`` flags of earlier releases, in sentence-transformers' order
_LEGACY_POOLING = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
#: the Transformer module's configuration files, in the order sentence-transformers looks for them
_TRANSFORMER_CONFIGS = tuple(
    f"sentence_{name}_config.json" for name in ("bert", "roberta", "distilbert", "camembert", "albert", "xlm-roberta",
                                                 "xlnet")
)  # fmt: skip
#: the module types this project runs (the class name of a ``sentence_transformers.*`` type)
KNOWN_MODULES = ("Transformer", "Pooling", "Dense", "Normalize", "Dropout")
#: what sentence-transformers names the pooled vector (the only feature a module after the pooling may read)
SENTENCE_EMBEDDING = "sentence_embedding"
#: keys of a Transformer's model / processor / configuration arguments that change no output here
_HARMLESS_ARGS = {
    "model": {"torch_dtype", "dtype", "attn_implementation", "device_map", "low_cpu_mem_usage", "trust_remote_code"},
    "processor": {"model_max_length", "padding_side", "use_fast", "trust_remote_code"},
    "config": {"trust_remote_code"},
}
#: the text modality as sentence-transformers runs a transformers encoder (its default for feature extraction)
_TEXT_ONLY = {"text": {"method": "forward", "method_output_name": "last_hidden_state"}}
NORMALIZE = "normalize"


@dataclass(frozen=True)
class DenseModule:
    """A ``Dense`` module of the chain: ``activation(x @ weight.T + bias)``."""

    name: str  #: how modules.json names it, for messages (``2_Dense``)
    folder: Path
    weights: Path  #: model.safetensors or pytorch_model.bin
    in_features: int
    out_features: int
    bias: bool
    activation: str  #: a dotted ``torch.*`` class (``torch.nn.modules.activation.Tanh``)


Step = DenseModule | str  # a Dense module, or NORMALIZE


@dataclass(frozen=True)
class StChain:
    """What ``SentenceTransformer(folder)`` runs, read from the checkpoint's files."""

    folder: Path
    pooling: str | None = None  #: the Pooling module's mode (a ``pooling`` setting); None without one
    include_prompt: bool = True
    pooling_file: Path | None = None
    #: the modules after the pooling, in their order (Dropout, a no-op at inference, left out)
    steps: tuple[Step, ...] = ()
    #: the truncation length per role (``query``, ``passage``), when the files give one
    max_length: Mapping[str, int] = field(default_factory=dict)
    do_lower_case: bool = False
    prompts: Mapping[str, str] = field(default_factory=dict)  #: ``query_prefix``, ``passage_prefix`` found

    @property
    def normalize(self) -> bool:
        return NORMALIZE in self.steps

    @property
    def dense_modules(self) -> list[DenseModule]:
        return [s for s in self.steps if isinstance(s, DenseModule)]

    def settings(self) -> dict[str, Any]:
        """The settings this chain gives: pooling (when it has a Pooling module), normalize, the prompts and
        the max lengths it names."""
        out: dict[str, Any] = {"normalize": self.normalize, **self.prompts}
        if self.pooling is not None:
            out["pooling"] = self.pooling
        out.update({f"{role}_max_length": n for role, n in self.max_length.items()})
        return out

    def steps_for(self, normalize: bool) -> tuple[Step, ...]:
        """The steps after the pooling when the model normalizes or not: the chain's own when that is what it
        does, else without its Normalize modules, or with one at the end."""
        if normalize == self.normalize:
            return self.steps
        if normalize:
            return (*self.steps, NORMALIZE)
        return tuple(s for s in self.steps if s != NORMALIZE)


class MissingSettings(ConfigError):
    """Settings left out of the config that the checkpoint's sentence-transformers files do not give."""

    def __init__(self, key: str, names: list[str], folder: str | Path, has_files: bool) -> None:
        self.names, self.folder, self.has_files, self.model_key = names, str(folder), has_files, key
        why = "names none of them in its" if has_files else "has no"
        super().__init__(
            ", ".join(f"{key}.{n}" for n in names),
            f"is not set, and the checkpoint {folder} {why} sentence-transformers files (modules.json, "
            "1_Pooling/config.json) to read it from: set it in the config",
        )

    def __reduce__(self) -> tuple[type, tuple[str, list[str], str, bool]]:  # type: ignore[override]
        return type(self), (self.model_key, self.names, self.folder, self.has_files)


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise InputError(path, f"cannot read sentence-transformers file ({err})") from err


class _Modules:
    """``modules.json`` of a checkpoint, for errors that name it and the module."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / "modules.json"
        entries = _json(self.path)
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise InputError(self.path, "must be a list of modules (objects with type and path)")
        self.entries: list[dict[str, Any]] = entries

    def error(self, entry: Mapping[str, Any], message: str) -> InputError:
        where = entry.get("path") or entry.get("name") or entry.get("idx")
        return InputError(self.path, f"module {where} ({entry.get('type', 'no type')}): {message}")

    def kind(self, entry: Mapping[str, Any]) -> str:
        """The module's class name, when it is one this project runs; else an error naming it."""
        type_ = str(entry.get("type", ""))
        if not type_.startswith("sentence_transformers."):
            raise self.error(
                entry, "a module of the checkpoint's own code, which this project never runs (only "
                f"sentence-transformers' {', '.join(KNOWN_MODULES)} modules are run)",
            )  # fmt: skip
        name = type_.rsplit(".", 1)[-1]
        if name not in KNOWN_MODULES:
            raise self.error(
                entry, f"a {name} module is not run by this project (it runs {', '.join(KNOWN_MODULES)}): "
                "its vectors would not be the model's",
            )  # fmt: skip
        return name

    def folder(self, entry: Mapping[str, Any]) -> Path:
        rel = str(entry.get("path") or "")
        if rel.startswith(("/", "\\")) or ".." in Path(rel).parts:
            raise self.error(entry, f"its path {rel!r} is not a folder inside the checkpoint")
        return self.root / rel


def read_st_chain(folder: str | Path) -> StChain | None:
    """The module chain of the checkpoint's sentence-transformers files (see the module); None when it has
    no ``modules.json``. Raises :class:`InputError` naming ``modules.json`` and the module for one that
    cannot be run exactly, or naming the file that cannot be read."""
    root = Path(folder)
    if not (root / "modules.json").is_file():
        return None
    modules = _Modules(root)
    kinds = [modules.kind(e) for e in modules.entries]
    if not kinds or kinds[0] != "Transformer" or kinds.count("Transformer") != 1:
        raise InputError(modules.path, "the first module, and only the first, must be a Transformer")
    first = modules.entries[0]
    if modules.folder(first) != root:
        raise modules.error(first, "a Transformer in a subfolder (an early sentence-transformers layout) is not run")
    if len(kinds) < 2 or kinds[1] != "Pooling" or kinds.count("Pooling") != 1:
        raise InputError(modules.path, "the Transformer must be followed by one Pooling module (and no other)")
    transformer = _transformer(modules, first)
    pooling, include_prompt, pooling_file = _pooling(modules, modules.entries[1])
    steps: list[Step] = []
    for entry, kind in zip(modules.entries[2:], kinds[2:], strict=True):
        if kind == "Dense":
            steps.append(_dense(modules, entry))
        elif kind == "Normalize":
            _check_io(modules, entry, modules.folder(entry) / "config.json")
            steps.append(NORMALIZE)
        elif kind != "Dropout":  # Dropout: nothing at inference
            raise modules.error(entry, f"a {kind} module after the pooling is not run by this project")
    width = transformer.get("hidden_size")
    for step in steps:
        if isinstance(step, DenseModule):
            if width is not None and step.in_features != width:
                raise InputError(
                    modules.path,
                    f"module {step.name}: its in_features ({step.in_features}) is not the width of the vectors "
                    f"it is given ({width})",
                )
            width = step.out_features
    st_config = root / "config_sentence_transformers.json"
    model_config = _json(st_config) if st_config.is_file() else {}
    if not isinstance(model_config, dict):
        raise InputError(st_config, "must be a JSON object")
    if model_config.get("truncate_dim") is not None:
        raise InputError(
            st_config,
            f"truncate_dim {model_config['truncate_dim']} (sentence-transformers cuts the vectors after the "
            "modules) is not run by this project: set the model's dimensions instead (a view)",
        )
    return StChain(
        folder=root,
        pooling=pooling,
        include_prompt=include_prompt,
        pooling_file=pooling_file,
        steps=tuple(steps),
        max_length=transformer["max_length"],
        do_lower_case=transformer["do_lower_case"],
        prompts=_prompts(model_config.get("prompts") or {}),
    )


def _prompts(prompts: Mapping[str, Any]) -> dict[str, str]:
    out = {}
    if "query" in prompts:
        out["query_prefix"] = str(prompts["query"])
    for name in ("document", "passage", "corpus"):  # as SentenceTransformer.encode_document looks for them
        if name in prompts:
            out["passage_prefix"] = str(prompts[name])
            break
    return out


def _transformer(modules: _Modules, entry: Mapping[str, Any]) -> dict[str, Any]:
    """The Transformer module's truncation lengths (by role), lower-casing and hidden size."""
    root = modules.root
    path = next((root / n for n in _TRANSFORMER_CONFIGS if (root / n).is_file()), None)
    config: dict[str, Any] = {}
    if path is not None:
        loaded = _json(path)
        if not isinstance(loaded, dict):
            raise InputError(path, "must be a JSON object")
        config = loaded
    name = path.name if path else "sentence_bert_config.json"

    def refuse(what: str) -> InputError:
        return modules.error(entry, f"{name}'s {what}: not run by this project (the vectors would not be the model's)")

    task = config.get("transformer_task", "feature-extraction")
    if task != "feature-extraction":
        raise refuse(f"transformer_task {task!r}")
    modality = config.get("modality_config")
    if modality is not None and modality != _TEXT_ONLY:
        raise refuse(f"modality_config {json.dumps(modality)} (only plain text, not a chat template, is run)")
    if config.get("module_output_name", "token_embeddings") != "token_embeddings":
        raise refuse(f"module_output_name {config['module_output_name']!r}")
    for key in ("query_expansion", "processing_kwargs"):
        if config.get(key):
            raise refuse(f"{key} {json.dumps(config[key])}")
    args: dict[str, dict[str, Any]] = {}
    for kind, names in (
        ("model", ("model_kwargs", "model_args")),
        ("processor", ("processor_kwargs", "tokenizer_args")),
        ("config", ("config_kwargs", "config_args")),
    ):
        given: dict[str, Any] = next((config[n] for n in names if isinstance(config.get(n), dict)), {})
        other = sorted(set(given) - _HARMLESS_ARGS[kind])
        if other:
            raise refuse(f"{kind} arguments {', '.join(other)}")
        args[kind] = given
    model_config = _json(root / "config.json") if (root / "config.json").is_file() else {}
    positions = model_config.get("max_position_embeddings") if isinstance(model_config, dict) else None
    hidden = model_config.get("hidden_size") if isinstance(model_config, dict) else None
    # sentence-transformers' truncation: the tokenizer's model_max_length, set from the processor arguments'
    # model_max_length, else from max_seq_length; else the tokenizer's own capped at the model's positions
    plain: int | None
    if "model_max_length" in args["processor"]:
        plain = _length(args["processor"]["model_max_length"], refuse, "model_max_length")
    elif config.get("max_seq_length") is not None:
        plain = _length(config["max_seq_length"], refuse, "max_seq_length")
    else:
        tok_config = _json(root / "tokenizer_config.json") if (root / "tokenizer_config.json").is_file() else {}
        tok_max = tok_config.get("model_max_length") if isinstance(tok_config, dict) else None
        plain = int(tok_max) if isinstance(tok_max, int | float) and tok_max > 0 else None
        if isinstance(positions, int) and positions != -1:
            plain = positions if plain is None else min(plain, positions)
    lengths: dict[str, int] = {}
    for role, key in (("query", "query_length"), ("passage", "document_length")):
        n = _length(config[key], refuse, key) if config.get(key) is not None else plain
        if n is not None:
            lengths[role] = n
    lower = config.get("do_lower_case", False)
    if not isinstance(lower, bool):
        raise refuse(f"do_lower_case {lower!r} (not true or false)")
    return {"max_length": lengths, "do_lower_case": lower, "hidden_size": hidden if isinstance(hidden, int) else None}


def _length(value: Any, refuse: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise refuse(f"{key} {value!r} (not a positive integer)")
    return value


def _pooling(modules: _Modules, entry: Mapping[str, Any]) -> tuple[str, bool, Path]:
    """The Pooling module's mode, whether it pools the prompt's tokens, and its config file."""
    path = modules.folder(entry) / "config.json"
    config = _json(path)
    if not isinstance(config, dict):
        raise InputError(path, "must be a JSON object")
    given = config.get("pooling_mode")
    if given is None:  # earlier releases: one flag per mode; none set is mean (as sentence-transformers reads it)
        given = [mode for key, mode in _LEGACY_POOLING.items() if config.get(key)] or ["mean"]
    modes = [given] if isinstance(given, str) else list(given) if isinstance(given, list) else [str(given)]
    bad = [m for m in modes if m not in ST_POOLING_MODES]
    if bad:
        raise modules.error(entry, f"1_Pooling/config.json's pooling mode {bad[0]!r} is not one of sentence-"
                            f"transformers' ({', '.join(ST_POOLING_MODES)})")  # fmt: skip
    if len(modes) != 1:
        raise modules.error(
            entry, f"pooling that concatenates several modes ({' + '.join(modes)}) is not run by this project"
        )
    include = config.get("include_prompt", True)
    return modes[0], include is not False, path


def _check_io(modules: _Modules, entry: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """A post-pooling module's config (empty when the file is absent), which must read and write the pooled vector."""
    if not path.is_file():
        return {}
    config = _json(path)
    if not isinstance(config, dict):
        raise InputError(path, "must be a JSON object")
    for key in ("module_input_name", "module_output_name"):
        if config.get(key, SENTENCE_EMBEDDING) not in (SENTENCE_EMBEDDING, None):
            raise modules.error(entry, f"its {key} {config[key]!r} is not the pooled vector (sentence_embedding)")
    return config


def _dense(modules: _Modules, entry: Mapping[str, Any]) -> DenseModule:
    folder = modules.folder(entry)
    if not (folder / "config.json").is_file():
        raise modules.error(entry, f"{folder / 'config.json'} is missing")
    config = _check_io(modules, entry, folder / "config.json")
    sizes = {k: config.get(k) for k in ("in_features", "out_features")}
    bad = [k for k, v in sizes.items() if isinstance(v, bool) or not isinstance(v, int) or v < 1]
    if bad:
        raise modules.error(entry, f"its config.json's {bad[0]} {sizes[bad[0]]!r} is not a positive integer")
    if config.get("use_residual"):
        raise modules.error(
            entry, "a Dense module with a residual connection (use_residual) is not run by this project"
        )
    activation = config.get("activation_function", "torch.nn.modules.activation.Tanh")
    if activation is None:
        activation = "torch.nn.modules.linear.Identity"
    if not isinstance(activation, str) or not activation.startswith("torch."):
        raise modules.error(
            entry, f"its activation_function {activation!r} is not a torch module: the checkpoint's own code, "
            "which this project never runs",
        )  # fmt: skip
    weights = next((folder / n for n in ("model.safetensors", "pytorch_model.bin") if (folder / n).is_file()), None)
    if weights is None:
        raise modules.error(entry, f"its weights are missing ({folder}/model.safetensors or pytorch_model.bin)")
    return DenseModule(
        name=str(entry.get("path") or entry.get("name")),
        folder=folder,
        weights=weights,
        in_features=int(sizes["in_features"]),  # type: ignore[arg-type]
        out_features=int(sizes["out_features"]),  # type: ignore[arg-type]
        bias=bool(config.get("bias", True)),
        activation=activation,
    )


def read_st_settings(folder: str | Path) -> dict[str, Any] | None:
    """The settings the checkpoint's sentence-transformers files give (:meth:`StChain.settings`); None
    when it has no ``modules.json``."""
    chain = read_st_chain(folder)
    return None if chain is None else chain.settings()


def fill_from_checkpoint(
    spec: Mapping[str, Any], folder: str | Path, key: str, chain: StChain | None = None
) -> tuple[dict[str, Any], list[str]]:
    """``spec`` with its missing (None) settings of :data:`FROM_CHECKPOINT` read from ``folder``'s
    sentence-transformers files (``chain`` when already read; a prompt the files do not name: none; a max
    length: 512), and the names of the settings it filled. The chain is read, and checked, whether or not
    a setting is missing. Raises :class:`ConfigError` naming ``key.<setting>`` for a missing ``pooling`` or
    ``normalize`` that the checkpoint cannot give, :class:`InputError` for a chain it cannot run."""
    out = dict(spec)
    chain = chain if chain is not None else read_st_chain(folder)
    missing = [k for k in FROM_CHECKPOINT if out.get(k) is None]
    found = chain.settings() if chain is not None else {}
    unresolved = [k for k in REQUIRED if k in missing and k not in found]
    if unresolved:
        raise MissingSettings(key, unresolved, folder, chain is not None)
    read = [k for k in missing if k in found]
    for k in missing:
        # a prompt the checkpoint does not name: none; a max length: the default
        out[k] = found.get(k, DEFAULT_MAX_LENGTH if k.endswith("_max_length") else "")
    if chain is not None and not chain.include_prompt:
        prompts = {k: out.get(k) for k in ("query_prefix", "passage_prefix", "query_template") if out.get(k)}
        if prompts:
            name, value = next(iter(prompts.items()))
            raise InputError(
                chain.pooling_file or folder,
                f"include_prompt: false (the prompt's tokens left out of the pooling) is not run by this project, "
                f"and the model has a prompt ({key}.{name}: {value!r})",
            )
    if read:
        log.info("%s: %s read from the checkpoint's sentence-transformers files (%s)", key,
                 ", ".join(f"{k}={out[k]!r}" for k in read), folder)  # fmt: skip
    if chain is not None and chain.dense_modules:
        log.info("%s: the checkpoint's Dense modules run after the pooling: %s", key,
                 ", ".join(f"{d.name} ({d.in_features} -> {d.out_features}, {d.activation.rsplit('.', 1)[-1]})"
                           for d in chain.dense_modules))  # fmt: skip
    return out, missing
