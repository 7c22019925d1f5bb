"""The reranker families and their settings: the one place where a reranker family is registered.

Imported when the Snakefile is parsed, so it imports neither torch nor transformers: a family
names the module that loads it (:attr:`RerankerFamily.module`, with ``load(spec, device, dtype)``).

A reranker's settings are :data:`COMMON_SETTINGS` plus its family's own, JSON-schema
``properties`` (:meth:`RerankerFamily.schema`, which the config validates them against);
:meth:`RerankerFamily.resolve` fills in every default and checks settings across, giving the *spec*
the scoring jobs take. Some settings change no score (:data:`ROW_SETTINGS`: which hits are
reranked, the batch size, what is known of the training): :func:`scoring_settings` leaves them out
of what the stored scores depend on.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from miracl_eval.encoders.checkpoints import pinned_revision
from miracl_eval.encoders.registry import REVISION_SETTING
from miracl_eval.errors import ConfigError
from miracl_eval.inputs.preprocess import check_template
from miracl_eval.rerankers.heads import check_causal_lm, check_classifier

if TYPE_CHECKING:
    from miracl_eval.rerankers.base import Reranker

#: the depth FlagEmbedding's evaluation reranks (``rerank_top_k``) and MTEB's reranking tasks keep
DEFAULT_DEPTH = 100

COMMON_SETTINGS: Mapping[str, Any] = {
    "checkpoint": {
        "type": "string",
        "minLength": 1,
        "description": "the reranker: a Hugging Face hub id or a local checkpoint folder",
    },
    "max_length": {
        "type": "integer",
        "minimum": 8,
        "default": 512,
        "description": "tokens of a (query, passage) input; the passage is cut to fit (FlagEmbedding's max_length)",
    },
    "query_max_length": {
        "type": ["integer", "null"],
        "minimum": 1,
        "default": None,
        "description": "tokens kept of the query; null = three quarters of max_length (FlagEmbedding's default)",
    },
    "depth": {
        "type": "integer",
        "minimum": 1,
        "default": DEFAULT_DEPTH,
        "description": "how many top hits of the first stage are reranked; the rest are dropped",
    },
    "batch_size": {
        "type": "integer",
        "minimum": 1,
        "default": 64,
        "description": "pairs per forward pass (pairs of similar length batched together); changes no score",
    },
    "title_join": {
        "type": "string",
        "default": "{title} {text}",
        "description": (
            "how a passage's title and text become the passage the reranker reads (FlagEmbedding's evaluation: "
            "'{title} {text}'; a passage without a title keeps its text)"
        ),
    },
    "trained_on": {
        "type": ["array", "null"],
        "items": {"type": "string", "enum": ["miracl", "messirve"]},
        "uniqueItems": True,
        "default": None,
        "description": "the datasets whose training split the reranker was trained on; [] = none; null = unknown",
    },
    **REVISION_SETTING,
}

#: settings that change no stored score: which hits a row keeps, throughput, what is known of the training
ROW_SETTINGS: tuple[str, ...] = ("depth", "batch_size", "trained_on")


@dataclass(frozen=True)
class RerankerFamily:
    """A reranker family: its own settings and the module that loads it."""

    name: str
    #: JSON-schema properties of the family's own settings, each with a default and a description
    settings: Mapping[str, Any]
    #: import path of the module that defines ``load(spec, device, dtype) -> Reranker``
    module: str
    #: what the family's score is, in words (the report's settings page)
    score: str
    #: raises InputError when a checkpoint folder lacks the family's head (read from its config.json)
    check_head: Callable[[Path], None]

    def properties(self) -> dict[str, Any]:
        return {**copy.deepcopy(dict(COMMON_SETTINGS)), **copy.deepcopy(dict(self.settings))}

    def schema(self) -> dict[str, Any]:
        """The JSON schema of a reranker's settings (``family`` may be given; ``checkpoint`` must be)."""
        return {
            "type": "object",
            "additionalProperties": False,
            "required": ["checkpoint"],
            "properties": {"family": {"const": self.name, "description": "the reranker family"}, **self.properties()},
        }

    def resolve(self, settings: Mapping[str, Any], key: str) -> dict[str, Any]:
        """The spec of a reranker with these settings (valid against :meth:`schema`: the config checks them,
        :mod:`miracl_eval.config.rerankers`), every default filled in and the settings checked across;
        :class:`ConfigError` names ``key`` and the setting (``rerankers.my-ce.query_max_length``)."""
        spec = copy.deepcopy({"family": self.name, **settings})
        for name, prop in self.properties().items():
            spec.setdefault(name, copy.deepcopy(prop.get("default")))
        try:
            check_template(spec["title_join"])
        except ValueError as err:
            raise ConfigError(f"{key}.title_join", str(err)) from None
        if spec["query_max_length"] is not None and spec["query_max_length"] >= spec["max_length"]:
            raise ConfigError(
                f"{key}.query_max_length",
                f"{spec['query_max_length']} leaves no token of max_length ({spec['max_length']}) for the passage",
            )
        return spec

    def load(self, spec: Mapping[str, Any], device: str = "auto", dtype: str = "auto") -> Reranker:
        """Load the reranker of a resolved ``spec`` (imports the family's module, and so torch)."""
        if spec.get("family") != self.name:
            raise ValueError(f"spec of family {spec.get('family')!r} given to the {self.name!r} family")
        module = importlib.import_module(self.module)
        reranker: Reranker = module.load(spec, device=device, dtype=dtype)
        return reranker


#: FlagEmbedding's default prompt for its LLM rerankers (FlagLLMReranker)
DEFAULT_PROMPT = (
    "Given a query A and a passage B, determine whether the passage contains an answer to the query by "
    "providing a prediction of either 'Yes' or 'No'."
)

FAMILIES: Mapping[str, RerankerFamily] = {
    "cross-encoder": RerankerFamily(
        name="cross-encoder",
        settings={
            "sigmoid": {
                "type": "boolean",
                "default": False,
                "description": "map the logit through a sigmoid to (0, 1) (the order, and so every measure, is unchanged)",
            },
        },
        module="miracl_eval.rerankers.cross_encoder",
        score="the classification head's logit over the (query, passage) pair",
        check_head=check_classifier,
    ),
    "llm": RerankerFamily(
        name="llm",
        settings={
            "prompt": {
                "type": "string",
                "minLength": 1,
                "default": DEFAULT_PROMPT,
                "description": "the instruction after the query and passage (FlagLLMReranker's prompt)",
            },
            "query_instruction": {
                "type": "string",
                "default": "A: ",
                "description": "put before the query (FlagLLMReranker's query_instruction_for_rerank)",
            },
            "passage_instruction": {
                "type": "string",
                "default": "B: ",
                "description": "put before the passage (FlagLLMReranker's passage_instruction_for_rerank)",
            },
        },
        module="miracl_eval.rerankers.llm",
        score="the logit of 'Yes' at the last position of the prompted (query, passage) input",
        check_head=check_causal_lm,
    ),
}


def scoring_settings(spec: Mapping[str, Any]) -> dict[str, Any]:
    """What a reranker's stored scores depend on: its spec without :data:`ROW_SETTINGS` (and without the
    ``revision`` unless pinned, so that the scores of a reranker fetched before it was a setting stay theirs)."""
    return {
        k: v for k, v in spec.items() if k not in ROW_SETTINGS and not (k == "revision" and pinned_revision(v) is None)
    }
