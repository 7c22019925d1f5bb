"""Hybrids of runs (temporary stub with the agreed interface; replaced by the hybrids branch)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import ConfigError

HYBRID_METHODS: tuple[str, ...] = ("interpolation", "rrf", "normalize", "average")
HYBRID_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "systems": {"type": "array", "items": {"type": "string"}, "minItems": 2, "uniqueItems": True},
        "method": {"type": "string", "enum": list(HYBRID_METHODS), "default": "rrf"},
        "alpha": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.5},
        "rrf_k": {"type": "integer", "minimum": 1, "default": 60},
        "depth": {"type": "integer", "minimum": 1, "default": 1000},
        "k": {"type": "integer", "minimum": 1, "default": 1000},
    },
    "required": ["systems"],
}


def check_hybrid(name: str, settings: Mapping[str, Any]) -> None:
    if settings["method"] == "interpolation" and len(settings["systems"]) != 2:
        raise ConfigError(f"hybrids.{name}.systems", "interpolation fuses exactly two systems")
