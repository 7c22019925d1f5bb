"""A dense model's settings read from its checkpoint's sentence-transformers files.

Most embedding checkpoints ship how sentence-transformers runs them: ``modules.json`` (the module
chain: Transformer, Pooling, optionally Normalize), ``1_Pooling/config.json`` (which pooling) and
``config_sentence_transformers.json`` (named prompts: ``query``, and the first of ``document``,
``passage`` and ``corpus`` in the file, the order in which ``SentenceTransformer.encode_document`` looks
for them; sentence-transformers 6 also fills in an empty ``document`` prompt when it loads a checkpoint
that names none, which is not read here: a checkpoint saved with ``passage: `` keeps it). A ``dense`` model whose
``pooling``, ``normalize``, ``query_prefix`` or ``passage_prefix`` is left out takes it from there;
a setting given in the config wins. Without the files, a missing ``pooling`` or ``normalize`` is an
error naming it (a missing prompt is no prompt).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from miracl_eval.errors import ConfigError, InputError

log = logging.getLogger(__name__)

#: the settings that may be read from the checkpoint, and the ones that must then be found there
FROM_CHECKPOINT = ("pooling", "normalize", "query_prefix", "passage_prefix")
REQUIRED = ("pooling", "normalize")
#: sentence-transformers' pooling modes (``pooling_mode``, or the ``pooling_mode_*`` flags of earlier releases)
_POOLING_MODES = {"cls": "cls", "cls_token": "cls", "mean": "mean", "mean_tokens": "mean", "lasttoken": "last"}


class MissingSettings(ConfigError):
    """Settings left out of the config that the checkpoint's sentence-transformers files do not give."""

    def __init__(self, key: str, names: list[str], folder: str | Path, has_files: bool) -> None:
        self.names, self.folder, self.has_files, self.model_key = names, str(folder), has_files, key
        why = "names none of them in its" if has_files else "has no"
        super().__init__(
            ", ".join(f"{key}.{n}" for n in names),
            f"is not set, and the checkpoint {folder} {why} sentence-transformers files (modules.json, "
            "1_Pooling/config.json) to read it from: set it in the config",
        )

    def __reduce__(self) -> tuple[type, tuple[str, list[str], str, bool]]:  # type: ignore[override]
        return type(self), (self.model_key, self.names, self.folder, self.has_files)


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise InputError(path, f"cannot read sentence-transformers file ({err})") from err


def read_st_settings(folder: str | Path) -> dict[str, Any] | None:
    """``pooling``, ``normalize`` and the prompts (``query_prefix``, ``passage_prefix``) that the
    checkpoint's sentence-transformers files give; None when it has no ``modules.json``."""
    root = Path(folder)
    if not (root / "modules.json").is_file():
        return None
    modules = _json(root / "modules.json")
    types = [str(m.get("type", "")) for m in modules] if isinstance(modules, list) else []
    out: dict[str, Any] = {"normalize": any(t.endswith(".Normalize") for t in types)}
    pooling = next((m for m in modules if str(m.get("type", "")).endswith(".Pooling")), None)
    if pooling is not None:
        path = root / str(pooling.get("path") or "1_Pooling") / "config.json"
        config = _json(path)
        if isinstance(config.get("pooling_mode"), str):  # sentence-transformers 6: one name
            modes = [config["pooling_mode"]]
        else:  # earlier releases: one flag per mode
            modes = [k.removeprefix("pooling_mode_") for k, v in config.items() if k.startswith("pooling_mode_") and v]
        if len(modes) != 1 or modes[0] not in _POOLING_MODES:
            raise InputError(path, f"pooling {', '.join(modes) or 'none'} is not one of cls, mean, last (lasttoken)")
        if config.get("include_prompt") is False:
            raise InputError(
                path, "pooling that leaves the prompt's tokens out (include_prompt: false) is not supported"
            )
        out["pooling"] = _POOLING_MODES[modes[0]]
    st_config = root / "config_sentence_transformers.json"
    prompts = _json(st_config).get("prompts", {}) if st_config.is_file() else {}
    if "query" in prompts:
        out["query_prefix"] = prompts["query"]
    for name in ("document", "passage", "corpus"):  # as SentenceTransformer.encode_document looks for them
        if name in prompts:
            out["passage_prefix"] = prompts[name]
            break
    return out


def fill_from_checkpoint(spec: Mapping[str, Any], folder: str | Path, key: str) -> tuple[dict[str, Any], list[str]]:
    """``spec`` with its missing (None) settings of :data:`FROM_CHECKPOINT` read from ``folder``'s
    sentence-transformers files (a prompt the files do not name: none), and the names of the settings
    it filled. Raises :class:`ConfigError` naming
    ``key.<setting>`` for a missing ``pooling`` or ``normalize`` that the checkpoint cannot give."""
    out = dict(spec)
    missing = [k for k in FROM_CHECKPOINT if out.get(k) is None]
    if not missing:
        return out, []
    found = read_st_settings(folder) or {}
    unresolved = [k for k in REQUIRED if k in missing and k not in found]
    if unresolved:
        raise MissingSettings(key, unresolved, folder, bool(found))
    read = [k for k in missing if k in found]
    for k in missing:
        out[k] = found.get(k, "")  # a prompt the checkpoint does not name: none
    if read:
        log.info("%s: %s read from the checkpoint's sentence-transformers files (%s)", key,
                 ", ".join(f"{k}={out[k]!r}" for k in read), folder)  # fmt: skip
    return out, missing
