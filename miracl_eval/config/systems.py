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
