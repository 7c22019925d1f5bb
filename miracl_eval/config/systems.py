"""The table rows of a run: ``bm25``, ``{model}/{method}`` and named hybrids, from the validated config.

A row's label is exactly its entry in the config's ``methods`` list, and the same label tags its TREC
run. Labels are also the rows' paths (``runs/{dataset}/{part}/{label}.parquet``): model and hybrid
names are path segments, and a model's method is a file name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from miracl_eval.encoders.registry import FAMILIES
from miracl_eval.errors import ConfigError

BM25 = "bm25"
#: every method a row can have: bm25 and every family's methods, in registration order
METHOD_NAMES: tuple[str, ...] = tuple(dict.fromkeys([BM25, *(m for f in FAMILIES.values() for m in f.methods)]))
#: configuration keys that describe rows rather than the whole run
_ROW_KEYS = ("models", "methods", "hybrids")


@dataclass(frozen=True)
class System:
    """One row of the result tables."""

    label: str
    method: str  #: bm25, a model family's method (dense, sparse, multivec, ...), or "hybrid"
    model: str | None = None  #: the model's name (config key) for model rows
    hybrid: str | None = None  #: the hybrid's name for hybrid rows

    @property
    def kind(self) -> str:
        return "bm25" if self.label == BM25 else "hybrid" if self.hybrid else "model"


def parse_methods(
    methods: Sequence[str], models: Mapping[str, Mapping[str, Any]], hybrids: Mapping[str, Mapping[str, Any]]
) -> list[System]:
    """The systems of the ``methods`` list; ConfigError names ``methods[i]`` or ``hybrids.<name>``."""
    out: list[System] = []
    for i, entry in enumerate(methods):
        key = f"methods.{i}"
        if entry == BM25:
            out.append(System(BM25, BM25))
        elif entry in hybrids:
            out.append(System(entry, "hybrid", hybrid=entry))
        elif "/" in entry:
            model, _, method = entry.partition("/")
            if model not in models:
                raise ConfigError(
                    key,
                    f"'{entry}' names the model '{model}', which is not under `models` "
                    f"(configured: {', '.join(models) or 'none'})",
                )
            family = FAMILIES[models[model]["family"]]
            if method not in family.methods:
                raise ConfigError(
                    key,
                    f"the {family.name} family of '{model}' has no method '{method}' "
                    f"(it has: {', '.join(f'{model}/{m}' for m in family.methods)})",
                )
            out.append(System(entry, method, model=model))
        elif any(entry in f.methods for f in FAMILIES.values()):
            example = next((m for m in models if entry in FAMILIES[models[m]["family"]].methods), "bge-m3")
            raise ConfigError(
                key,
                f"'{entry}' is the old form: methods are written '{{model}}/{{method}}' now, e.g. "
                f"'{example}/{entry}', with the model under `models` (e.g. models: {{{example}: {{}}}})",
            )
        else:
            raise ConfigError(
                key, f"unknown method '{entry}': use 'bm25', '{{model}}/{{method}}' or a name under `hybrids`"
            )
    labels = {s.label for s in out}
    for name, hybrid in hybrids.items():
        if name not in labels:
            continue  # a hybrid no row uses is not run
        if name in models or name == BM25 or "/" in name:
            raise ConfigError(
                f"hybrids.{name}", "a hybrid's name must differ from 'bm25' and the model names, without '/'"
            )
        for j, member in enumerate(hybrid["systems"]):
            if member not in labels:
                raise ConfigError(f"hybrids.{name}.systems.{j}", f"'{member}' is not in `methods`")
            if member in hybrids:
                raise ConfigError(f"hybrids.{name}.systems.{j}", "a hybrid of hybrids is not supported")
    return out


def systems(config: Mapping[str, Any]) -> list[System]:
    """The systems of a validated configuration, in the order of ``methods``."""
    return parse_methods(config["methods"], config["models"], config["hybrids"])


def flatten_config(config: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    """``{"bm25": {"k1": 0.9}}`` → ``{"bm25.k1": 0.9}``."""
    flat: dict[str, object] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_config(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def system_facts(config: Mapping[str, Any], label: str) -> dict[str, object]:
    """What is known of row ``label`` for comparing it with published numbers: the run's flattened
    settings (without the rows' own keys), ``method``, ``model`` (the checkpoint; a hybrid's is its
    models' checkpoints joined with ``+``), the model's settings as ``model.<key>`` and a hybrid's
    as ``hybrid.<key>``."""
    by_label = {s.label: s for s in systems(config)}
    if label not in by_label:
        raise KeyError(f"{label!r} is not a row of this run (rows: {', '.join(by_label)})")
    system = by_label[label]
    facts = flatten_config({k: v for k, v in config.items() if k not in _ROW_KEYS})
    facts["method"] = system.method
    if system.model is not None:
        spec = config["models"][system.model]
        facts["model"] = spec["checkpoint"]
        facts.update(flatten_config(spec, "model."))
    if system.hybrid is not None:
        hybrid = config["hybrids"][system.hybrid]
        members = [by_label[m] for m in hybrid["systems"]]
        facts["model"] = "+".join(config["models"][m.model]["checkpoint"] for m in members if m.model)
        facts.update(flatten_config({k: v for k, v in hybrid.items() if k != "systems"}, "hybrid."))
        facts["hybrid.systems"] = "+".join(m.method for m in members)  # e.g. bm25+dense
    return facts


#: a row's training with respect to the run's dataset (:func:`training`)
ZERO_SHOT, IN_DOMAIN, UNKNOWN_TRAINING = "zero-shot", "in-domain", "unknown"
#: the marks the report gives rows that are not zero-shot
TRAINING_MARKS: Mapping[str, str] = {ZERO_SHOT: "", IN_DOMAIN: "†", UNKNOWN_TRAINING: "?"}


def _model_training(spec: Mapping[str, Any], dataset: str) -> str:
    trained_on = spec.get("trained_on")
    if trained_on is None:
        return UNKNOWN_TRAINING
    return IN_DOMAIN if dataset in trained_on else ZERO_SHOT


def training(config: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """Per row: ``training`` (``zero-shot``, ``in-domain``: its model was trained on the run's dataset's
    training split, or ``unknown``: a model without ``trained_on``) and ``trained_on`` (the datasets,
    ``+``-joined; ``-`` for none, ``?`` when unknown). BM25 is zero-shot; a hybrid is in-domain when a
    member is, else unknown when a member is, else zero-shot."""
    dataset = config["dataset"]

    def of_model(model: str) -> dict[str, str]:
        names = config["models"][model].get("trained_on")
        status = _model_training(config["models"][model], dataset)
        return {"training": status, "trained_on": "?" if names is None else "+".join(names) or "-"}

    def of_label(label: str) -> dict[str, str]:  # a hybrid's member, a row of the run or not
        return {"training": ZERO_SHOT, "trained_on": "-"} if label == BM25 else of_model(label.split("/", 1)[0])

    out: dict[str, dict[str, str]] = {}
    for system in systems(config):
        if system.hybrid is None:
            out[system.label] = of_model(system.model) if system.model is not None else of_label(BM25)
            continue
        members = [of_label(m) for m in config["hybrids"][system.hybrid]["systems"]]
        statuses = {m["training"] for m in members}
        status = IN_DOMAIN if IN_DOMAIN in statuses else UNKNOWN_TRAINING if UNKNOWN_TRAINING in statuses else ZERO_SHOT
        names = sorted({n for m in members for n in m["trained_on"].split("+") if n not in ("-", "?")})
        out[system.label] = {"training": status, "trained_on": "+".join(names) or "-"}
    return out
