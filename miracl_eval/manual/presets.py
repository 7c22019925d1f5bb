"""The preset pages: every shipped model and reranker preset with its settings, the source of each, and how
its training data are known (``data/presets.yaml``, ``data/reranker_presets.yaml``)."""

from __future__ import annotations

from collections.abc import Mapping

from miracl_eval.config.models import Preset, presets
from miracl_eval.config.rerankers import reranker_presets
from miracl_eval.encoders.registry import FAMILIES
from miracl_eval.manual.markdown import anchor, cell, code, table
from miracl_eval.rerankers.registry import FAMILIES as RERANKER_FAMILIES


def _trained_on(preset: Preset) -> str:
    value = preset.settings.get("trained_on")
    if value is None:
        return "unknown"
    return ", ".join(value) if value else "none (zero-shot everywhere)"


def _checkpoint(preset: Preset) -> str:
    settings = preset.settings
    return str(settings.get("checkpoint") or settings.get("model") or "")


def _preset_section(preset: Preset, what: str) -> str:
    settings = dict(preset.settings)
    out = [f"### {preset.name}\n\n"]
    if preset.refused:
        out.append(f'!!! failure "Refused"\n    {cell(preset.refused)}\n\n')
    out.append(f"**Source.** {cell(preset.source)}\n\n")
    if preset.training_source:
        how = cell(preset.training_source)
        out.append(f"**Trained on:** {_trained_on(preset)}. {how[:1].upper()}{how[1:]}\n\n")
    out.append(f"Settings the preset gives (every other setting is its {what}'s default):\n\n")
    out.append(table(("setting", "value"), ([code(k), code(v)] for k, v in settings.items())))
    return "".join(out) + "\n"


def _overview(items: Mapping[str, Preset], rows_of: str) -> str:
    rows = []
    for name, p in items.items():
        family = str(p.settings.get("family", ""))
        status = "refused" if p.refused else ""
        rows.append([f"[`{name}`](#{anchor(name)})", code(family), code(_checkpoint(p)), _trained_on(p), status])
    return table(("preset", "family", rows_of, "trained on", ""), rows) + "\n"


def models_page() -> str:
    """``reference/models.md``."""
    items = presets()
    usable = sum(1 for p in items.values() if not p.refused)
    families = table(
        ("family", "rows of a model `{name}`", "stored per text", "runs"),
        (
            [code(f.name), ", ".join(code(f"{{name}}/{m}") for m in f.methods), ", ".join(f.outputs),
             "behind an HTTP API (CPU jobs)" if f.remote else "here (GPU when there is one)"]
            for f in FAMILIES.values()
        ),
    )  # fmt: skip
    return (
        "# Model presets\n\n"
        f"{len(items)} presets ship in `miracl_eval/data/presets.yaml` ({usable} that run, "
        f"{len(items) - usable} refused with the reason), over {len(FAMILIES)} families. A config's `models:` key "
        "that names a preset needs no settings, and any setting given overrides the preset's "
        "(`me5-large: {query_max_length: 128}`). Each preset's settings are those of the reference harness "
        "that published its numbers; the source says where each comes from. This page is written from the "
        "presets file at every build of the docs; every setting is described in "
        "[Configuration keys](config.md#modelsname-a-models-settings).\n\n"
        "## Families\n\n" + families + "\n## Presets\n\n" + _overview(items, "checkpoint") +
        "".join(_preset_section(p, "family") for p in items.values())
    )  # fmt: skip


def rerankers_page() -> str:
    """``reference/rerankers.md``."""
    items = reranker_presets()
    families = table(("family", "score"), ([code(f.name), cell(f.score)] for f in RERANKER_FAMILIES.values()))
    return (
        "# Reranker presets\n\n"
        f"{len(items)} presets ship in `miracl_eval/data/reranker_presets.yaml`, over {len(RERANKER_FAMILIES)} "
        "families. A config's `rerankers:` key that names a preset needs no settings; a row "
        "`{first stage}>>{reranker}` reranks the first stage's top `depth` hits. Written from the presets file "
        "at every build; every setting is described in "
        "[Configuration keys](config.md#rerankersname-a-rerankers-settings).\n\n"
        "## Families\n\n" + families + "\n## Presets\n\n" + _overview(items, "checkpoint") +
        "".join(_preset_section(p, "family") for p in items.values())
    )  # fmt: skip
