"""JSON-schema helpers shared by the config and the model specs: string coercion, defaults, first error."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jsonschema

_TRUE = {"true", "yes", "on"}
_FALSE = {"false", "no", "off"}


def _types(node: Mapping[str, Any]) -> list[str]:
    t = node.get("type", [])
    return [t] if isinstance(t, str) else list(t)


def _scalar(value: str, node: Mapping[str, Any]) -> Any:
    """``value`` as the scalar type the schema wants, or unchanged when it does not convert (the
    validator then names the key)."""
    types = _types(node)
    if "string" in types:
        return value
    text = value.strip()
    if "null" in types and text.lower() in ("null", "~", "none", ""):
        return None
    if "integer" in types:
        try:
            return int(text)
        except ValueError:
            pass
        whole = _whole(text)
        if whole is not None:
            return whole
    if "number" in types:
        try:
            return float(text)
        except ValueError:
            pass
    if "boolean" in types:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
    return value


def _whole(text: str) -> int | None:
    """The integer a number written as a float is (``128.0``, ``1e3``), or None."""
    try:
        number = float(text)
    except ValueError:
        return None
    return int(number) if number.is_integer() else None


def coerce_strings(value: Any, node: Mapping[str, Any]) -> Any:
    """A copy of ``value`` in which strings are converted where ``node`` (a JSON schema) wants a number,
    an integer, a boolean or null, and whole floats (``128.0``) where it wants an integer.

    Snakemake hands nested ``--config`` values over as strings (YAML's BaseLoader):
    ``--config "bm25={k1: 1.2}"`` gives ``{'k1': '1.2'}``. A string that does not convert is kept (the
    validator then names the key), and so is a float that is not whole (``1.5``). JSON schema counts
    ``128.0`` as an integer; converted, it is one where it is used (a slice, a count).
    """
    if isinstance(value, str):
        return _scalar(value, node)
    if isinstance(value, float) and "integer" in _types(node) and "number" not in _types(node):
        return int(value) if value.is_integer() else value
    if isinstance(value, Mapping):
        props = node.get("properties", {})
        extra = node.get("additionalProperties")
        out = {}
        for k, v in value.items():
            sub = props.get(k, extra if isinstance(extra, Mapping) else None)
            out[k] = coerce_strings(v, sub) if sub is not None else copy.deepcopy(v)
        return out
    if isinstance(value, list):
        items = node.get("items")
        return [coerce_strings(v, items) if isinstance(items, Mapping) else v for v in value]
    return value


def fill_defaults(value: dict[str, Any], node: Mapping[str, Any]) -> None:
    """Fill in the schema's defaults for absent keys, recursively (in place)."""
    for key, prop in node.get("properties", {}).items():
        if key not in value and "default" in prop:
            value[key] = copy.deepcopy(prop["default"])
        if isinstance(value.get(key), dict) and prop.get("type") == "object":
            fill_defaults(value[key], prop)
    extra = node.get("additionalProperties")
    if isinstance(extra, Mapping) and extra.get("type") == "object":
        for key, item in value.items():
            if key not in node.get("properties", {}) and isinstance(item, dict):
                fill_defaults(item, extra)


def key_of(path: Any) -> str:
    return ".".join(str(p) for p in path)


def first_error(value: Any, schema: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(dotted key, message)`` of the first validation error (shallowest first), or None."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(value), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if not errors:
        return None
    err = errors[0]
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        return key_of([*err.absolute_path, missing]), "is required"
    if err.validator == "additionalProperties" and "'" in err.message:
        extra = err.message.split("'")[1]
        return key_of([*err.absolute_path, extra]), "is not a known setting"
    if "propertyNames" in err.schema_path:  # a key that is not one of those allowed: named, with them
        allowed = err.validator_value if err.validator == "enum" else []
        return key_of([*err.absolute_path, err.instance]), f"is not one of the names allowed here: {', '.join(allowed)}"
    return key_of(err.absolute_path), err.message
