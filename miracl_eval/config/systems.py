"""The table rows of a run: ``bm25``, ``{model}/{method}``, named hybrids and ``{row}>>{reranker}``, from the validated config.

A row's label is exactly its entry in the config's ``methods`` list, and the same label tags its TREC
run. Labels are also the rows' paths (``runs/{dataset}/{part}/{label}.parquet``): model and hybrid
names are path segments, a model's method is a file name, and a reranked row's file is its first
stage's followed by ``>>{reranker}``.

A reranked row's first stage is any label (a row of the table or not, reranked itself or not):
:func:`computed_systems` gives every system whose run the rows need.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from miracl_eval.config.rerankers import THEN
from miracl_eval.encoders.registry import FAMILIES
from miracl_eval.errors import ConfigError

BM25 = "bm25"
#: the method of a reranked row (``{row}>>{reranker}``)
RERANKED = "reranked"
#: every method a row can have: bm25 and every family's methods, in registration order
METHOD_NAMES: tuple[str, ...] = tuple(dict.fromkeys([BM25, *(m for f in FAMILIES.values() for m in f.methods)]))
#: configuration keys that describe rows rather than the whole run
_ROW_KEYS = ("models", "methods", "hybrids", "rerankers")


@dataclass(frozen=True)
class System:
    """One row of the result tables (or the first stage of one)."""

    label: str
    method: str  #: bm25, a model family's method (dense, sparse, multivec, ...), "hybrid" or "reranked"
    model: str | None = None  #: the model's name (config key) for model rows
    hybrid: str | None = None  #: the hybrid's name for hybrid rows
    reranker: str | None = None  #: the reranker's name for reranked rows
    first_stage: System | None = None  #: the system whose top hits a reranked row reranks

    @property
    def kind(self) -> str:
        if self.reranker:
            return "reranked"
        return "bm25" if self.label == BM25 else "hybrid" if self.hybrid else "model"


def _parse_label(
    entry: str,
    key: str,
    models: Mapping[str, Mapping[str, Any]],
    hybrids: Mapping[str, Mapping[str, Any]],
    rerankers: Mapping[str, Mapping[str, Any]],
) -> System:
    """The system of one label; ConfigError names ``key`` (``methods.<i>``)."""
    if THEN in entry:
        first, _, reranker = entry.rpartition(THEN)
        if reranker not in rerankers:
            raise ConfigError(
                key,
                f"'{entry}' reranks with '{reranker}', which is not under `rerankers` "
                f"(configured: {', '.join(rerankers) or 'none'}; e.g. rerankers: {{bge-reranker-v2-m3: {{}}}})",
            )
        try:
            stage = _parse_label(first, key, models, hybrids, rerankers)
        except ConfigError as err:
            raise ConfigError(key, f"the first stage of '{entry}' cannot be computed: {err.reason}") from None
        return System(entry, RERANKED, reranker=reranker, first_stage=stage)
    if entry == BM25:
        return System(BM25, BM25)
    if entry in hybrids:
        return System(entry, "hybrid", hybrid=entry)
    if "/" in entry:
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
        return System(entry, method, model=model)
    if any(entry in f.methods for f in FAMILIES.values()):
        example = next((m for m in models if entry in FAMILIES[models[m]["family"]].methods), "bge-m3")
        raise ConfigError(
            key,
            f"'{entry}' is the old form: methods are written '{{model}}/{{method}}' now, e.g. "
            f"'{example}/{entry}', with the model under `models` (e.g. models: {{{example}: {{}}}})",
        )
    raise ConfigError(
        key,
        f"unknown method '{entry}': use 'bm25', '{{model}}/{{method}}', a name under `hybrids` or "
        f"'{{row}}{THEN}{{reranker}}'",
    )


def _stages(system: System) -> list[System]:
    """``system`` and its first stages, innermost first."""
    return [*(_stages(system.first_stage) if system.first_stage else []), system]


def parse_methods(
    methods: Sequence[str],
    models: Mapping[str, Mapping[str, Any]],
    hybrids: Mapping[str, Mapping[str, Any]],
    rerankers: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[System]:
    """The systems of the ``methods`` list; ConfigError names ``methods[i]`` or ``hybrids.<name>``."""
    out = [_parse_label(entry, f"methods.{i}", models, hybrids, rerankers or {}) for i, entry in enumerate(methods)]
    labels = {s.label for s in out}
    used_hybrids = {stage.hybrid for s in out for stage in _stages(s) if stage.hybrid}
    for name, hybrid in hybrids.items():
        if name not in used_hybrids:
            continue  # a hybrid no row uses is not run
        if name in models or name == BM25 or "/" in name or THEN in name:
            raise ConfigError(
                f"hybrids.{name}",
                f"a hybrid's name must differ from 'bm25' and the model names, without '/' or '{THEN}'",
            )
        for j, member in enumerate(hybrid["systems"]):
            if member not in labels:
                raise ConfigError(f"hybrids.{name}.systems.{j}", f"'{member}' is not in `methods`")
            if member in hybrids:
                raise ConfigError(f"hybrids.{name}.systems.{j}", "a hybrid of hybrids is not supported")
    return out


def systems(config: Mapping[str, Any]) -> list[System]:
    """The systems of a validated configuration, in the order of ``methods``."""
    return parse_methods(config["methods"], config["models"], config["hybrids"], config.get("rerankers"))


def computed_systems(config: Mapping[str, Any]) -> list[System]:
    """Every system whose run the rows need: the rows and the first stages of reranked rows (each
    once, a first stage before the rows that rerank it)."""
    out: dict[str, System] = {}
    for row in systems(config):
        for stage in _stages(row):
            out.setdefault(stage.label, stage)
    return list(out.values())


def used_models(config: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved specs of the models that some computed system uses, by name in the config's order: a
    configured model that no row uses gets no jobs."""
    used = {s.model for s in computed_systems(config) if s.model}
    return {name: spec for name, spec in config["models"].items() if name in used}


def used_hybrids(config: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of the hybrids that some computed system is, by name in the order of the systems."""
    return {s.hybrid: config["hybrids"][s.hybrid] for s in computed_systems(config) if s.hybrid}


def used_rerankers(config: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved specs of the rerankers that some row uses, by name in the order of the systems."""
    return {s.reranker: config["rerankers"][s.reranker] for s in computed_systems(config) if s.reranker}


def first_stages(config: Mapping[str, Any]) -> list[str]:
    """The labels whose top hits some reranker reranks (rows of the table or not), each once."""
    return list(dict.fromkeys(s.first_stage.label for s in computed_systems(config) if s.first_stage))


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
    models' checkpoints joined with ``+``; a reranked row's the reranker's), the model's settings as
    ``model.<key>``, a hybrid's as ``hybrid.<key>``, a reranker's as ``reranker.<key>`` and a
    reranked row's first stage's facts as ``first_stage.<fact>`` (``first_stage.method``,
    ``first_stage.model``, ...)."""
    by_label = {s.label: s for s in systems(config)}
    if label not in by_label:
        raise KeyError(f"{label!r} is not a row of this run (rows: {', '.join(by_label)})")
    facts = flatten_config({k: v for k, v in config.items() if k not in _ROW_KEYS})
    return {**facts, **_own_facts(config, by_label[label], by_label)}


def _own_facts(config: Mapping[str, Any], system: System, by_label: Mapping[str, System]) -> dict[str, object]:
    facts: dict[str, object] = {"method": system.method}
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
    if system.reranker is not None and system.first_stage is not None:
        spec = config["rerankers"][system.reranker]
        facts["model"] = spec["checkpoint"]
        facts.update(flatten_config(spec, "reranker."))
        first = _own_facts(config, system.first_stage, by_label)
        facts.update({f"first_stage.{k}": v for k, v in first.items()})
    return facts


#: a row's training with respect to the run's dataset (:func:`training`)
ZERO_SHOT, IN_DOMAIN, UNKNOWN_TRAINING = "zero-shot", "in-domain", "unknown"
#: the marks the report gives rows that are not zero-shot
TRAINING_MARKS: Mapping[str, str] = {ZERO_SHOT: "", IN_DOMAIN: "†", UNKNOWN_TRAINING: "?"}


def _model_training(spec: Mapping[str, Any], dataset: str) -> str:
    trained_on = spec.get("trained_on")
    if trained_on is None:
        return UNKNOWN_TRAINING
    return IN_DOMAIN if TRAINING_DATA.get(dataset, dataset) in trained_on else ZERO_SHOT


#: a dataset whose queries come from another's (its training split is the other's): MTEB's MIRACL
#: hard-negatives corpora keep MIRACL's dev queries and judgements
TRAINING_DATA: Mapping[str, str] = {"miracl-hn": "miracl"}


def training(config: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """Per row: ``training`` (``zero-shot``, ``in-domain``: its model was trained on the run's dataset's
    training split, or ``unknown``: a model without ``trained_on``) and ``trained_on`` (the datasets,
    ``+``-joined; ``-`` for none, ``?`` when unknown). BM25 is zero-shot; a hybrid (of its members) or
    a reranked row (of its first stage and its reranker) is in-domain when a part is, else unknown
    when a part is, else zero-shot."""
    dataset = config["dataset"]

    def of_spec(spec: Mapping[str, Any]) -> dict[str, str]:  # a model's or a reranker's
        names = spec.get("trained_on")
        status = _model_training(spec, dataset)
        return {"training": status, "trained_on": "?" if names is None else "+".join(names) or "-"}

    def of_system(system: System) -> dict[str, str]:
        if system.reranker is not None and system.first_stage is not None:
            return _combined([of_system(system.first_stage), of_spec(config["rerankers"][system.reranker])])
        if system.hybrid is not None:  # its members are rows
            return _combined([of_system(rows[m]) for m in config["hybrids"][system.hybrid]["systems"]])
        if system.model is not None:
            return of_spec(config["models"][system.model])
        return {"training": ZERO_SHOT, "trained_on": "-"}

    rows = {s.label: s for s in systems(config)}
    return {label: of_system(system) for label, system in rows.items()}


def _combined(parts: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """The training of a system made of others: in-domain when a part is, else unknown when a part is."""
    statuses = {p["training"] for p in parts}
    status = IN_DOMAIN if IN_DOMAIN in statuses else UNKNOWN_TRAINING if UNKNOWN_TRAINING in statuses else ZERO_SHOT
    names = sorted({n for p in parts for n in p["trained_on"].split("+") if n not in ("-", "?")})
    return {"training": status, "trained_on": "+".join(names) or ("?" if status == UNKNOWN_TRAINING else "-")}
