"""Configuration: validated against ``schema.yaml`` at start-up; errors name the key."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from miracl_eval.config.hybrids import HYBRID_SCHEMA, check_hybrid
from miracl_eval.config.models import resolve_models
from miracl_eval.config.rerankers import resolve_rerankers
from miracl_eval.config.schema_tools import coerce_strings, fill_defaults, first_error
from miracl_eval.config.systems import parse_methods
from miracl_eval.encoders.prompts import TASK, instruction_problem
from miracl_eval.encoders.registry import SEARCHED_AS_ENCODED
from miracl_eval.errors import ConfigError
from miracl_eval.inputs.datasets import get_dataset
from miracl_eval.inputs.preprocess import check_template

PLACEHOLDERS = ("{lang}", "{partition}")


#: keys of the one-model layout, with the form that replaces each
LEGACY_KEYS: Mapping[str, str] = {
    "model": "models: {bge-m3: {checkpoint: PATH_OR_HUB_ID}} (each model is named under `models`)",
    "fusion": "models: {bge-m3: {weights: {dense: 1.0, sparse: 0.3, multivec: 1.0}}}",
    "sparse_quantization": "models: {bge-m3: {quantization: {scale: 100, rounding: ceil}}}",
    "rerank_depth": "models: {bge-m3: {rerank_depth: 200}}",
    "encoder.query_max_length": "models: {bge-m3: {query_max_length: 256}}",
    "encoder.passage_max_length": "models: {bge-m3: {passage_max_length: 512}}",
    "encoder.preload": "preload: true (top level: every Python stage's jobs, not only the encoders')",
}


@cache
def schema() -> dict[str, Any]:
    """The config's JSON schema, with the hybrids' settings schema from :mod:`miracl_eval.fusion.hybrids`."""
    text = (Path(__file__).parent / "schema.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    data["$defs"] = {"hybrid": copy.deepcopy(dict(HYBRID_SCHEMA))}
    return data


def _check_legacy(cfg: Mapping[str, Any]) -> None:
    for key, new in LEGACY_KEYS.items():
        head, _, tail = key.partition(".")
        present = head in cfg if not tail else isinstance(cfg.get(head), Mapping) and tail in cfg[head]
        if present:
            raise ConfigError(key, f"is no longer a setting; write instead: {new}")
    hub = cfg.get("hub")
    if isinstance(hub, Mapping) and hub.get("messirve_version") == "auto":
        raise ConfigError(
            "hub.messirve_version",
            "'auto' is no longer a value: write latest (the newest release in the hub repository) or a release "
            "such as v1.0 (the default: the paper's)",
        )


def _resolve_schema_refs(node: Mapping[str, Any], root: Mapping[str, Any]) -> dict[str, Any]:
    """``node`` with ``$ref``s to ``#/$defs/...`` replaced (for string coercion and defaults)."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        return _resolve_schema_refs(root["$defs"][name], root)
    out: dict[str, Any] = {}
    for k, v in node.items():
        if isinstance(v, Mapping):
            out[k] = (
                _resolve_schema_refs(v, root)
                if k != "properties"
                else {pk: _resolve_schema_refs(pv, root) for pk, pv in v.items()}
            )
        else:
            out[k] = v
    return out


def validate(config: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``config`` and return a copy with defaults filled in and every model resolved.

    Strings are converted where the schema wants numbers, integers or booleans (nested ``--config``
    values arrive as strings). Raises :class:`ConfigError` naming the first offending key.
    """
    _check_legacy(config)
    full = _resolve_schema_refs(schema(), schema())
    cfg = coerce_strings(copy.deepcopy(dict(config)), full)
    check_values(cfg)
    err = first_error(cfg, schema())
    if err is not None:
        raise ConfigError(err[0] or "(top level)", err[1])
    fill_defaults(cfg, full)
    cfg["reproduction"] = reproduction_settings(cfg["reproduction"])
    cfg["models"] = resolve_models(cfg["models"])
    cfg["rerankers"] = resolve_rerankers(cfg["rerankers"])
    for name, hybrid in cfg["hybrids"].items():
        check_hybrid(name, hybrid)
    parse_methods(cfg["methods"], cfg["models"], cfg["hybrids"], cfg["rerankers"])
    dataset = get_dataset(cfg["dataset"])
    bad = [p for p in cfg["languages"] if p not in dataset.partitions]
    if bad:
        raise ConfigError(
            "languages",
            f"unknown code(s) {', '.join(map(repr, bad))} for {dataset.name}; valid: {', '.join(dataset.partitions)}",
        )
    for name, spec in cfg["models"].items():
        fill_query_instruction(spec, dataset.query_instruction, f"models.{name}", dataset.name)
        if spec.get("rescore") and spec.get("storage", "float32") == "float32":
            raise ConfigError(f"models.{name}.rescore", "rescores vectors held as float16, int8 or binary (storage)")
        if spec["family"] in ("dense", "openai") and cfg["dense_index"]["type"] != "flat":
            for key in ("dimensions", "storage"):
                if spec.get(key) != SEARCHED_AS_ENCODED[key]:
                    raise ConfigError(
                        f"models.{name}.{key}",
                        f"is searched by the exact search only (dense_index.type: flat), not {cfg['dense_index']['type']}",
                    )
    if cfg["hub"]["revision"] is None:
        cfg["hub"]["revision"] = dataset.revision or "main"
    if cfg["split"] is None:
        cfg["split"] = dataset.default_split
    if cfg["title_join"] is None:
        cfg["title_join"] = dataset.title_join
    try:
        check_template(cfg["title_join"])
    except ValueError as err:
        raise ConfigError("title_join", str(err)) from None
    src = cfg.get("source")
    if src:
        per_partition = ("topics", "qrels") if dataset.shared_corpus else ("corpus", "topics", "qrels")
        for name in per_partition:
            if len(cfg["languages"]) > 1 and not any(p in src[name] for p in PLACEHOLDERS):
                raise ConfigError(f"source.{name}", "must contain '{lang}' when several languages are evaluated")
    if cfg["hub"]["topics_from"] == "ir_datasets" and dataset.name != "miracl":
        raise ConfigError("hub.topics_from", f"ir_datasets holds MIRACL's topics and qrels, not {dataset.name}'s")
    check_values(cfg)  # the models' settings too, as converted and filled in
    return cfg


def check_values(value: Any, path: tuple[str, ...] = ()) -> None:
    """Every string of the config (keys too) must be one UTF-8 can hold, every number finite: an unpaired
    surrogate (YAML's ``"\\ud800"`` escape) would fail the first file written with it, and NaN passes every
    comparison a bound makes (a tolerance, a timeout); ConfigError names the key."""
    key = ".".join(path) or "(top level)"
    if isinstance(value, str):
        bad = next((c for c in value if 0xD800 <= ord(c) <= 0xDFFF), None)
        if bad is not None:
            raise ConfigError(
                key, f"holds an unpaired surrogate \\u{ord(bad):04x} (half of a UTF-16 pair), which UTF-8 cannot hold"
            )
    elif isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(key, f"{value} is not a finite number")
    elif isinstance(value, Mapping):
        for k, v in value.items():
            check_values(k, path)
            check_values(v, (*path, str(k)))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            check_values(v, (*path, str(i)))


#: a tolerance from which on (10 nDCG points) a verdict says nothing: surely meant in points, not on the 0-1 scale
TOLERANCE_LIMIT = 0.1


def reproduction_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``reproduction`` with a tolerance given as one number (for every measure) spread over the measures,
    each below :data:`TOLERANCE_LIMIT`; ConfigError names the key."""
    measures = schema()["properties"]["reproduction"]["properties"]["tolerance"]["propertyNames"]["enum"]

    def spread(value: Any, key: str) -> dict[str, float]:
        table = dict.fromkeys(measures, value) if not isinstance(value, Mapping) else dict(value)
        for measure, tol in table.items():
            if tol >= TOLERANCE_LIMIT:
                where = key if not isinstance(value, Mapping) else f"{key}.{measure}"
                raise ConfigError(
                    where,
                    f"{tol:g} is {tol * 100:g} points: a tolerance is on the measures' 0-1 scale (0.005 is half an "
                    f"nDCG point), and from {TOLERANCE_LIMIT:g} on every verdict would be OKish",
                )
        return {m: float(t) for m, t in table.items()}

    return {
        **settings,
        "tolerance": spread(settings["tolerance"], "reproduction.tolerance"),
        "sources": {s: spread(v, f"reproduction.sources.{s}") for s, v in settings["sources"].items()},
    }


def fill_query_instruction(spec: dict[str, Any], instruction: str, key: str, dataset: str = "the dataset") -> None:
    """A model whose ``query_template`` has ``{task}`` gets the dataset's ``instruction`` unless its
    ``query_instruction`` gives one; an instruction without a ``{task}`` to fill, or an empty one, is an error."""
    template = spec.get("query_template")
    if "query_instruction" not in spec:
        return
    if template is not None and TASK in template:
        given = spec["query_instruction"]
        if given is None and not instruction.strip():
            raise ConfigError(
                f"{key}.query_instruction",
                f"query_template has {{task}}, and {dataset} has no task instruction to put there: give one here",
            )
        if given is None:
            spec["query_instruction"] = instruction
        elif problem := instruction_problem(given):
            raise ConfigError(f"{key}.query_instruction", problem)
    elif spec["query_instruction"] is not None:
        raise ConfigError(f"{key}.query_instruction", "is given, but query_template has no {task} to put it in")


def fill_placeholders(template: str, partition: str) -> str:
    """Replace ``{lang}`` / ``{partition}`` in a local source path."""
    return template.replace("{lang}", partition).replace("{partition}", partition)
