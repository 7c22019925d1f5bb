"""The model families (temporary stub with the agreed interface; replaced by the encoders branch)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

COMMON_SETTINGS: Mapping[str, Any] = {
    "checkpoint": {"type": "string", "minLength": 1, "description": "hub id or local folder"},
    "query_max_length": {"type": "integer", "minimum": 8, "default": 512, "description": "query tokens"},
    "passage_max_length": {"type": "integer", "minimum": 8, "default": 512, "description": "passage tokens"},
    "title_join": {"type": ["string", "null"], "default": None, "description": "null = the dataset's"},
}


@dataclass(frozen=True)
class Family:
    name: str
    methods: tuple[str, ...]
    outputs: tuple[str, ...]
    settings: Mapping[str, Any]
    module: str
    defaults: Mapping[str, Any]
    retrieval_settings: tuple[str, ...] = ()  #: settings that do not change the encodings

    def load(self, spec: Mapping[str, Any], device: str = "auto", dtype: str = "auto") -> Any:
        return importlib.import_module(self.module).load(spec, device, dtype)


FAMILIES: Mapping[str, Family] = {
    "bge-m3": Family(
        "bge-m3",
        ("dense", "sparse", "multivec", "dense+sparse", "all"),
        ("dense", "sparse"),
        {
            "weights": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "dense": {"type": "number", "default": 1.0},
                    "sparse": {"type": "number", "default": 0.3},
                    "multivec": {"type": "number", "default": 1.0},
                },
                "default": {},
            },
            "rerank_depth": {"type": "integer", "minimum": 1, "default": 200},
            "quantization": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "scale": {"type": "number", "exclusiveMinimum": 0, "default": 100},
                    "rounding": {"type": "string", "enum": ["ceil", "round"], "default": "ceil"},
                },
                "default": {},
            },
        },
        "miracl_eval.encoders.bge_m3",
        {"query_max_length": 256, "passage_max_length": 512},
        ("weights", "rerank_depth", "quantization"),
    ),
    "dense": Family(
        "dense",
        ("dense",),
        ("dense",),
        {
            "pooling": {"type": "string", "enum": ["cls", "mean", "last"], "default": "mean"},
            "normalize": {"type": "boolean", "default": True},
            "query_prefix": {"type": "string", "default": ""},
            "passage_prefix": {"type": "string", "default": ""},
            "query_template": {"type": ["string", "null"], "default": None},
        },
        "miracl_eval.encoders.dense",
        {},
    ),
    "splade": Family(
        "splade",
        ("sparse",),
        ("sparse",),
        {
            "quantization": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "scale": {"type": "number", "exclusiveMinimum": 0, "default": 51.2},
                    "rounding": {"type": "string", "enum": ["ceil", "round"], "default": "round"},
                },
                "default": {},
            },
        },
        "miracl_eval.encoders.splade",
        {},
        ("quantization",),
    ),
}


def get_family(name: str) -> Family:
    return FAMILIES[name]
