"""Named rerankers: the config's ``rerankers`` mapping resolved into full specs (presets, overrides, defaults).

A key of ``rerankers`` is the reranker's name, its cache key and the right-hand side of a
``{row}>>{reranker}`` row. A name that is a shipped preset (``data/reranker_presets.yaml``) needs
no settings; settings given override the preset's. Any other name must say its ``family`` and
``checkpoint``. A local checkpoint folder is checked now for the family's head (a cross-encoder's
one-label classification head), so that a wrong checkpoint stops the run before any job starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from miracl_eval.config.models import BUILT_CHECKPOINTS, Preset, check_revision, load_presets, preset_spec
from miracl_eval.config.schema_tools import coerce_strings, first_error
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
    spec = preset_spec("rerankers", name, given, reranker_presets(), FAMILIES)
    family = FAMILIES[spec["family"]]
    spec = coerce_strings(spec, family.schema())
    err = first_error(spec, family.schema())
    if err is not None:
        raise ConfigError(f"{key}.{err[0]}" if err[0] else key, err[1])
    spec = family.resolve(spec, key)
    check_revision(spec, key)
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
