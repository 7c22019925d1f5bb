"""The ``hybrids`` section of the config: its schema, defaults and cross-field checks.

The fusing itself is :mod:`miracl_eval.fusion.hybrids` (pyserini's fusion code); this module
imports neither pyserini nor pyarrow, so that validating the config at start-up stays light.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema

from miracl_eval.errors import ConfigError

HYBRID_METHODS: tuple[str, ...] = ("interpolation", "rrf", "normalize", "average")

#: rrf by default: it is pyserini's default, and it uses ranks only, so systems whose scores live on
#: different scales (BM25's unbounded sums, dense cosines) fuse sensibly without tuning; it also takes
#: any number of systems. Interpolation of raw scores (pyserini's MIRACL BM25+mDPR hybrid) has to be
#: asked for.
DEFAULT_METHOD = "rrf"

DEFAULT_ALPHA = 0.5

DEFAULT_RRF_K = 60

DEFAULT_DEPTH = 1000

DEFAULT_K = 1000

#: the setting that only one method reads; another method requires it to keep its default
_METHOD_OF_SETTING: Mapping[str, str] = {"alpha": "interpolation", "rrf_k": "rrf"}


def hybrid_options(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` with every missing setting at its default (from :data:`HYBRID_SCHEMA`)."""
    defaults = {key: prop["default"] for key, prop in HYBRID_SCHEMA["properties"].items() if "default" in prop}
    return {**defaults, **settings}


HYBRID_SCHEMA: Mapping[str, Any] = {
    "description": "a fusion of the runs of two or more systems, computed with pyserini.fusion",
    "type": "object",
    "additionalProperties": False,
    "required": ["systems"],
    "properties": {
        "systems": {
            "description": "the methods whose runs are fused, in order (interpolation weights the first by alpha)",
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "minItems": 2,
            "uniqueItems": True,
        },
        "method": {
            "description": (
                "interpolation (alpha * first + (1 - alpha) * second raw score, exactly two systems), "
                "rrf (sum of 1 / (rrf_k + rank)), normalize (sum of per-query min-max normalised scores) "
                "or average (mean score, a missing score counting 0)"
            ),
            "enum": list(HYBRID_METHODS),
            "default": DEFAULT_METHOD,
        },
        "alpha": {
            "description": "interpolation only: the weight of the first system's score (the second gets 1 - alpha)",
            "type": "number",
            "minimum": 0,
            "maximum": 1,
            "default": DEFAULT_ALPHA,
        },
        "rrf_k": {
            "description": "rrf only: the constant added to each rank (pyserini's --rrf.k)",
            "type": "integer",
            "minimum": 1,
            "default": DEFAULT_RRF_K,
        },
        "depth": {
            "description": "how many hits of each system's run are read per query (pyserini's --depth)",
            "type": "integer",
            "minimum": 1,
            "default": DEFAULT_DEPTH,
        },
        "k": {
            "description": "how many fused hits are kept per query (pyserini's --k)",
            "type": "integer",
            "minimum": 1,
            "default": DEFAULT_K,
        },
    },
}


def check_hybrid(name: str, settings: Mapping[str, Any]) -> None:
    """Check one hybrid's settings (``hybrids.<name>``) against the schema and across fields.

    Raises :class:`ConfigError` naming the key: ``interpolation`` fuses exactly two systems; a
    hybrid cannot list itself; ``alpha`` and ``rrf_k`` may differ from their default only for the
    method that reads them (a setting that would be silently ignored is an error).
    """
    key = f"hybrids.{name}"
    errors = sorted(
        jsonschema.Draft202012Validator(HYBRID_SCHEMA).iter_errors(dict(settings)),
        key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))),
    )
    if errors:
        err = errors[0]
        path = [str(p) for p in err.absolute_path]
        if err.validator == "required":
            path = [*path, "systems"]
        raise ConfigError(".".join([key, *path]), err.message)
    opts = hybrid_options(settings)
    systems, method = opts["systems"], opts["method"]
    if name in systems:
        raise ConfigError(f"{key}.systems", f"a hybrid cannot fuse its own run ({name!r})")
    if method == "interpolation" and len(systems) != 2:
        raise ConfigError(f"{key}.systems", f"interpolation fuses exactly two systems, found {len(systems)}")
    for setting, reader in _METHOD_OF_SETTING.items():
        default = HYBRID_SCHEMA["properties"][setting]["default"]
        if method != reader and opts[setting] != default:
            raise ConfigError(f"{key}.{setting}", f"applies to method {reader} only, not {method}")
