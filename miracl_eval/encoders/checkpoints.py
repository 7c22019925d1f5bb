"""What a local checkpoint folder must hold (config, weights, tokenizer): checked without torch, so
that the config can be checked when the workflow starts and the encoders before their slow load."""

from __future__ import annotations

from pathlib import Path

from miracl_eval.errors import InputError

_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
_TOKENIZER_FILES = ("tokenizer.json", "sentencepiece.bpe.model", "tokenizer.model", "spiece.model", "vocab.txt")


def check_checkpoint(path: Path) -> None:
    """Raise :class:`InputError` naming ``path`` and the missing file when it lacks config, weights or tokenizer."""
    if not (path / "config.json").is_file():
        raise InputError(path, "missing config.json: not a transformers checkpoint folder")
    if not any((path / name).is_file() for name in _WEIGHT_FILES):
        raise InputError(path, f"missing the model weights: {_WEIGHT_FILES[0]} (or {', '.join(_WEIGHT_FILES[1:])})")
    if not any((path / name).is_file() for name in _TOKENIZER_FILES) and not (path / "vocab.json").is_file():
        raise InputError(
            path, f"missing the tokenizer: {_TOKENIZER_FILES[0]} (or {', '.join(_TOKENIZER_FILES[1:])}, vocab.json)"
        )
