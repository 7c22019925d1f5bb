"""The configuration reference: every key of ``config/schema.yaml`` and every setting of the model families,
views, reranker families and hybrids (their registries), each with its type, default and description."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from miracl_eval.config.hybrids import HYBRID_SCHEMA
from miracl_eval.config.models import presets
from miracl_eval.config.rerankers import reranker_presets
from miracl_eval.config.validate import schema
from miracl_eval.encoders.registry import FAMILIES, VIEW_SETTINGS
from miracl_eval.manual.markdown import anchor, cell, code, table
from miracl_eval.rerankers.registry import FAMILIES as RERANKER_FAMILIES

HEADER = ("key", "type", "default", "description")


def _types(node: Mapping[str, Any]) -> list[str]:
    t = node.get("type", [])
    return [t] if isinstance(t, str) else list(t)


def type_text(node: Mapping[str, Any]) -> str:
    """A JSON-schema node's type in words: ``integer ≥ 1``, ``one of `flat`, `hnsw` ``, ``string or null``."""
    if "const" in node:
        return code(node["const"])
    if "$ref" in node:
        name = str(node["$ref"]).rsplit("/", 1)[-1]
        return f"{name} settings (below)"
    types = _types(node)
    nullable = "null" in types
    types = [t for t in types if t != "null"]
    if "enum" in node:
        values = [v for v in node["enum"] if v is not None]
        text = "one of " + ", ".join(code(v) for v in values)
        nullable = nullable or None in node["enum"]
    elif types == ["array"] and isinstance(node.get("items"), Mapping):
        items = node["items"]
        if "enum" in items:
            text = "list of " + ", ".join(code(v) for v in items["enum"])
        else:
            text = "list of " + " or ".join(f"{t}s" for t in _types(items))
            if items.get("minLength"):
                text += " (not empty)"
        if node.get("minItems"):
            text += f", at least {node['minItems']}"
    elif types == ["object"] and isinstance(node.get("additionalProperties"), Mapping) and not node.get("properties"):
        names = node.get("propertyNames", {}).get("enum")
        keys = " or ".join(code(n) for n in names) if names else "name"
        text = f"mapping of {keys} to {type_text(node['additionalProperties'])}"
        return text + (" or null" if nullable else "")
    else:
        text = " or ".join(types) if types else "any"
    bounds = []
    if "minimum" in node:
        bounds.append(f"≥ {node['minimum']}")
    if "exclusiveMinimum" in node:
        bounds.append(f"> {node['exclusiveMinimum']}")
    if "maximum" in node:
        bounds.append(f"≤ {node['maximum']}")
    if "minLength" in node and node["minLength"] > 0:
        bounds.append("not empty")
    if "pattern" in node:
        bounds.append(f"matching {code(node['pattern'])}")
    if bounds:
        text += " " + ", ".join(bounds)
    return text + (" or null" if nullable else "")


def default_text(node: Mapping[str, Any], required: bool) -> str:
    if "default" in node:
        return code(node["default"])
    return "**required**" if required else "(none)"


def key_rows(properties: Mapping[str, Any], prefix: str = "", required: tuple[str, ...] = ()) -> Iterator[list[str]]:
    """A table row per key of ``properties``, nested objects' keys after their own (``encoder.batch_size``)."""
    for name, node in properties.items():
        key = f"{prefix}{name}"
        yield [code(key), type_text(node), default_text(node, name in required), cell(node.get("description", ""))]
        inner = node.get("properties")
        if isinstance(inner, Mapping):
            yield from key_rows(inner, f"{key}.", tuple(node.get("required", ())))


def _section(title: str, text: str, properties: Mapping[str, Any], prefix: str, required: tuple[str, ...]) -> str:
    return f"## {title}\n\n{text}\n\n" + table(HEADER, key_rows(properties, prefix, required)) + "\n"


def _top_level(top: Mapping[str, Any], required: tuple[str, ...]) -> str:
    """The config file's own keys: one table of those without settings of their own, then a section per
    group of settings (``encoder``, ``dense_index``, ...), so that a search for a key lands on its group."""
    flat = {k: v for k, v in top.items() if not isinstance(v.get("properties"), Mapping)}
    groups = {k: v for k, v in top.items() if isinstance(v.get("properties"), Mapping)}
    out = ["## Top-level keys\n\nKeys of the config file itself; the groups of settings follow.\n\n"]
    out.append(table(HEADER, key_rows(flat, "", required)) + "\n")
    for name, node in groups.items():
        text = str(node.get("description", "")).strip()
        out.append(f"### `{name}`\n\n")
        if text:
            out.append(cell(text[:1].upper() + text[1:]) + ".\n\n")
        out.append(f"Default: {default_text(node, name in required)}.\n\n")
        out.append(table(HEADER, key_rows(node["properties"], f"{name}.", tuple(node.get("required", ())))) + "\n")
    return "".join(out)


def config_page() -> str:
    """``reference/config.md``."""
    root = schema()
    top = dict(root["properties"])
    required = tuple(root.get("required", ()))
    model_presets = ", ".join(f"[`{n}`](models.md#{anchor(n)})" for n in presets())
    reranker_names = ", ".join(f"[`{n}`](rerankers.md#{anchor(n)})" for n in reranker_presets())
    parts = [
        "# Configuration keys\n\n",
        "Every key a config file (`--configfile`) or `--config` may set, with its type, its default (filled in when ",
        "the key is absent) and what it does. The workflow validates the config when it starts and an error names ",
        "the key (`models.my-e5.pooling`). This page is written from `miracl_eval/config/schema.yaml` and the ",
        "families' registries (`miracl_eval/encoders/registry.py`, `miracl_eval/rerankers/registry.py`, ",
        "`miracl_eval/config/hybrids.py`) at every build of the docs.\n\n",
        '!!! tip "Where a run\'s settings come from"\n',
        "    `config.yaml` in the working directory, then each `--configfile` in order, then `--config`: see ",
        "[Which settings a run uses](../how-to/data.md#which-settings-a-run-uses). Every run writes its effective ",
        "configuration, merged and with every default filled in, to `results/{dataset}_config.yaml`.\n\n",
        _top_level(top, required),
        "## `models.{name}`: a model's settings\n\n",
        "A model is named under `models`; the name is its cache key. A name that is a shipped preset needs no ",
        f"settings ({model_presets}); any setting given overrides the preset's. Any other name needs `family` ",
        "and `checkpoint`. The settings are the family's:\n\n",
    ]
    for name, family in FAMILIES.items():
        props = family.properties()
        views = [k for k in props if k in VIEW_SETTINGS]
        methods = ", ".join(f"`{{name}}/{m}`" for m in family.methods)
        parts.append(f"### Family `{name}`\n\n")
        parts.append(f"Rows: {methods}. Stores per text: {', '.join(family.outputs)}.")
        if family.remote:
            parts.append(" Its models run behind an HTTP API: the jobs run on CPUs and ask for no GPU.")
        if views:
            parts.append(
                f" The view settings ({', '.join(f'`{k}`' for k in views)}) change how the vectors are searched, "
                "not how they are made: see [Views](../how-to/views.md)."
            )
        parts.append("\n\n" + table(HEADER, key_rows(props, "models.{name}.", ("checkpoint",))) + "\n")
    parts.append(
        "## `rerankers.{name}`: a reranker's settings\n\n"
        f"A reranker is named under `rerankers` and used in a row `{{row}}>>{{name}}`. Presets: {reranker_names}. "
        "Any other name needs `family` and `checkpoint`.\n\n"
    )
    for name, rfamily in RERANKER_FAMILIES.items():
        parts.append(f"### Family `{name}`\n\nScore: {rfamily.score}.\n\n")
        parts.append(table(HEADER, key_rows(rfamily.properties(), "rerankers.{name}.", ("checkpoint",))) + "\n")
    hybrid = HYBRID_SCHEMA
    parts.append(
        _section(
            "`hybrids.{name}`: a hybrid's settings",
            f"{str(hybrid['description']).capitalize()}. The hybrid's name is a row of `methods`.",
            hybrid["properties"],
            "hybrids.{name}.",
            tuple(hybrid.get("required", ())),
        )
    )
    return "".join(parts)
