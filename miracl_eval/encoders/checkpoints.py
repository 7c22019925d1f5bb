"""Checkpoints without torch: what a local folder must hold (config, weights, tokenizer), checked when
the workflow starts and by the encoders before their slow load; and hub models fetched once per run
(the ``fetch_model`` rule), so that every job that runs a model loads a local folder, offline.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from miracl_eval.atomic import atomic_output
from miracl_eval.errors import DownloadError, InputError
from miracl_eval.types import PathLike

#: a Hugging Face hub model id (``org/name`` or ``name``)
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
#: files of a hub repository that no family loads
HUB_IGNORE = ["onnx/*", "imgs/*", "*.onnx", "*.onnx_data", "flax_model.msgpack", "rust_model.ot", "tf_model.h5"]
#: the record a fetched checkpoint folder holds (repository, requested revision, commit, time)
FETCH_RECORD = "miracl-eval-fetch.json"
HUB_LOGIN = (
    "if the model is gated, log in (set HF_TOKEN, or run `hf auth login`) and accept its terms on its "
    "page on huggingface.co; or point the model's `checkpoint` setting at a local folder holding it"
)


def is_hub_id(checkpoint: str) -> bool:
    """Whether ``checkpoint`` names a hub model rather than a local folder (one that does not exist)."""
    return bool(HUB_ID.match(checkpoint)) and not Path(checkpoint).expanduser().exists()


def hub_folder_name(repo_id: str) -> str:
    """The folder name of a fetched hub model (``BAAI/bge-m3`` -> ``BAAI--bge-m3``)."""
    return repo_id.replace("/", "--")


def hub_error(repo_id: str, err: BaseException) -> DownloadError:
    """One sentence for a failed hub download: the model, what the hub said, and what to do."""
    reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return DownloadError(
        f"cannot fetch the model '{repo_id}' from the Hugging Face hub ({type(err).__name__}"
        f"{': ' + reason[:200] if reason else ''}): {HUB_LOGIN}"
    )


def fetch_checkpoint(repo_id: str, folder: PathLike, revision: str = "main") -> dict[str, Any]:
    """Download hub model ``repo_id`` at ``revision`` into ``folder`` (atomically), pinned to the
    commit the revision names then; the folder's :data:`FETCH_RECORD` says which. Raises
    :class:`DownloadError` (:func:`hub_error`) when the hub cannot give it, :class:`InputError` when
    what it gave is not a checkpoint."""
    from huggingface_hub import HfApi, snapshot_download

    try:
        commit = HfApi().model_info(repo_id, revision=revision).sha or revision
        with atomic_output(folder, directory=True) as tmp:
            snapshot_download(repo_id=repo_id, revision=commit, local_dir=tmp, ignore_patterns=HUB_IGNORE)
            check_checkpoint(Path(tmp))
            record = {
                "repo_id": repo_id,
                "revision": revision,
                "commit": commit,
                "fetched": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            (Path(tmp) / FETCH_RECORD).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    except (InputError, DownloadError):
        raise
    except Exception as err:  # noqa: BLE001 - offline, unknown, gated: all mean "cannot fetch" here
        raise hub_error(repo_id, err) from err
    return record


_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
_TOKENIZER_FILES = ("tokenizer.json", "sentencepiece.bpe.model", "tokenizer.model", "spiece.model", "vocab.txt")


def remote_code(config_json: Path) -> str:
    """The classes a checkpoint's ``config.json`` maps to its own code (``auto_map``), joined; empty when none."""
    import json

    try:
        config = json.loads(config_json.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    mapped = config.get("auto_map") if isinstance(config, dict) else None
    if not isinstance(mapped, dict) or not mapped:
        return ""
    return ", ".join(f"{k}: {v}" for k, v in mapped.items())


def check_checkpoint(path: Path) -> None:
    """Raise :class:`InputError` naming ``path`` and the missing file when it lacks config, weights or tokenizer."""
    if not (path / "config.json").is_file():
        raise InputError(path, "missing config.json: not a transformers checkpoint folder")
    needs = remote_code(path / "config.json")
    if needs:
        raise InputError(
            path / "config.json",
            f"the checkpoint needs its own code ({needs}); this project never runs a checkpoint's code",
        )
    if not any((path / name).is_file() for name in _WEIGHT_FILES):
        raise InputError(path, f"missing the model weights: {_WEIGHT_FILES[0]} (or {', '.join(_WEIGHT_FILES[1:])})")
    if not any((path / name).is_file() for name in _TOKENIZER_FILES) and not (path / "vocab.json").is_file():
        raise InputError(
            path, f"missing the tokenizer: {_TOKENIZER_FILES[0]} (or {', '.join(_TOKENIZER_FILES[1:])}, vocab.json)"
        )


def insecure_url(url: str) -> bool:
    """Whether an API's ``url`` is neither ``https://`` nor a loopback address (a key would travel in clear)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme == "https":
        return False
    return not (parts.scheme == "http" and (parts.hostname or "") in ("localhost", "127.0.0.1", "::1"))
