"""Named rerankers: the config's ``rerankers`` mapping resolved into full specs (presets, overrides, defaults).

A key of ``rerankers`` is the reranker's name, its cache key and the right-hand side of a
``{row}>>{reranker}`` row. A name that is a shipped preset (``data/reranker_presets.yaml``) needs
no settings; settings given override the preset's. Any other name must say its ``family`` and
``checkpoint``. A local checkpoint folder is checked now for the family's head (a cross-encoder's
one-label classification head), so that a wrong checkpoint stops the run before any job starts.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from miracl_eval.config.models import BUILT_CHECKPOINTS, NAME, RESERVED, Preset, load_presets
from miracl_eval.config.schema_tools import coerce_strings
from miracl_eval.encoders.checkpoints import check_checkpoint
from miracl_eval.errors import ConfigError, InputError
from miracl_eval.rerankers.registry import FAMILIES

PRESETS_FILE = Path(__file__).resolve().parent.parent / "data" / "reranker_presets.yaml"
#: the operator of a reranked row: ``{row}>>{reranker}`` (PyTerrier's composition of pipelines)
THEN = ">>"


@cache
def reranker_presets() -> dict[str, Preset]:
    """The shipped reranker presets, by name."""
    return load_presets(PRESETS_FILE)


def resolve_reranker(name: str, given: Mapping[str, Any] | None) -> dict[str, Any]:
    """The full spec of reranker ``name`` from its config entry; ConfigError names ``rerankers.<name>...``."""
    key = f"rerankers.{name}"
    if not NAME.match(name) or name in RESERVED:
        raise ConfigError(key, "a reranker name is letters, digits, '.', '_' and '-' (and not 'bm25')")
    if given is None:
        given = {}
    if not isinstance(given, Mapping):
        raise ConfigError(key, f"must be a mapping of settings (or {{}} for a preset), not {given!r}")
    preset = reranker_presets().get(name)
    spec: dict[str, Any] = copy.deepcopy(dict(preset.settings)) if preset else {}
    if preset and "family" in given and given["family"] != spec["family"]:
        spec = {}  # a preset's name used for a reranker of another family: the preset does not apply
    spec.update(copy.deepcopy(dict(given)))
    if "family" not in spec:
        raise ConfigError(
            f"{key}.family",
            f"is required ('{name}' is not a preset; presets: {', '.join(reranker_presets())}; "
            f"families: {', '.join(FAMILIES)})",
        )
    family = FAMILIES.get(spec["family"])
    if family is None:
        raise ConfigError(f"{key}.family", f"unknown family {spec['family']!r}; valid: {', '.join(FAMILIES)}")
    spec = family.resolve(coerce_strings({k: v for k, v in spec.items() if k != "family"}, family.schema()), key)
    folder = Path(spec["checkpoint"]).expanduser()
    if folder.is_dir() and not spec["checkpoint"].startswith(BUILT_CHECKPOINTS):
        try:
            check_checkpoint(folder)
            family.check_head(folder)
        except InputError as err:
            raise ConfigError(f"{key}.checkpoint", str(err)) from None
    return spec


def resolve_rerankers(rerankers: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: resolve_reranker(name, given) for name, given in rerankers.items()}
