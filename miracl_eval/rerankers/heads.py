"""What a reranker family needs of a checkpoint's head, read from its ``config.json`` (no torch).

Checked when the config is validated (a local folder) and again when a job loads the checkpoint
(a fetched hub model), so that a checkpoint without the family's head stops with one clear error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from miracl_eval.errors import InputError


def _config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise InputError(path / "config.json", f"cannot read the model's config ({err})") from err
    if not isinstance(config, dict):
        raise InputError(path / "config.json", "is not a JSON object")
    return config


def _architectures(config: dict[str, Any]) -> list[str]:
    return [str(a) for a in config.get("architectures") or []]


def check_classifier(path: Path) -> None:
    """A cross-encoder checkpoint has a sequence-classification head with one label."""
    config = _config(path)
    archs = _architectures(config)
    if not any(a.endswith("ForSequenceClassification") for a in archs):
        raise InputError(
            path,
            f"not a cross-encoder: its architectures ({', '.join(archs) or 'none'}) have no sequence-classification "
            "head (family cross-encoder needs one, as a *ForSequenceClassification checkpoint)",
        )
    labels = len(config.get("id2label") or {}) or int(config.get("num_labels", 1))
    if labels != 1:
        raise InputError(path, f"the classification head has {labels} labels; a reranker's has one (its score)")


def check_causal_lm(path: Path) -> None:
    """An llm reranker's checkpoint is a causal language model with its head (the logit of "Yes")."""
    archs = _architectures(_config(path))
    if archs and not any(a.endswith(("ForCausalLM", "ForConditionalGeneration")) for a in archs):
        raise InputError(
            path,
            f"not a causal language model: its architectures ({', '.join(archs)}) have no language-model head "
            "(family llm reads the logit of 'Yes' from one, as a *ForCausalLM checkpoint)",
        )
