"""Configuration: validated against ``config.schema.yaml`` at start-up; errors name the key."""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from .datasets import get_dataset
from .errors import ConfigError
from .preprocess import check_template

PLACEHOLDERS = ("{lang}", "{partition}")


@cache
def schema() -> dict[str, Any]:
    text = (Path(__file__).parent / "config.schema.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def method_names() -> tuple[str, ...]:
    """Every method the config's ``methods`` list takes, in the schema's order."""
    return tuple(schema()["properties"]["methods"]["items"]["enum"])


def _fill_defaults(value: dict[str, Any], node: Mapping[str, Any]) -> None:
    for key, prop in node.get("properties", {}).items():
        if key not in value and "default" in prop:
            value[key] = copy.deepcopy(prop["default"])
        if isinstance(value.get(key), dict) and prop.get("type") == "object":
            _fill_defaults(value[key], prop)


def _key(path: Any) -> str:
    parts = [str(p) for p in path]
    return ".".join(parts) if parts else "(top level)"


def validate(config: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``config`` and return a copy with defaults filled in.

    Raises :class:`ConfigError` naming the first offending key.
    """
    cfg = copy.deepcopy(dict(config))
    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(cfg), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        err = errors[0]
        key = _key(err.absolute_path)
        if err.validator == "required":
            missing = err.message.split("'")[1] if "'" in err.message else err.message
            key = _key([*err.absolute_path, missing])
            raise ConfigError(key, "is required")
        raise ConfigError(key, err.message)
    _fill_defaults(cfg, schema())
    dataset = get_dataset(cfg["dataset"])
    bad = [p for p in cfg["languages"] if p not in dataset.partitions]
    if bad:
        raise ConfigError(
            "languages",
            f"unknown code(s) {', '.join(map(repr, bad))} for {dataset.name}; valid: {', '.join(dataset.partitions)}",
        )
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
    return cfg


def load_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise ConfigError("(file)", f"{path} is not valid YAML ({err})") from None
    return validate(data)


def fill_placeholders(template: str, partition: str) -> str:
    """Replace ``{lang}`` / ``{partition}`` in a local source path."""
    return template.replace("{lang}", partition).replace("{partition}", partition)
