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
#: a hub revision a model may name (``revision``): a commit, a tag or a branch (``refs/pr/1``), no ``..``
REVISION_PATTERN = r"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9_./-]*$"
#: the revision fetched when a model names none: the hub's ``main`` when it is fetched (the commit is recorded)
DEFAULT_REVISION = "main"
#: a commit id as the hub gives it (40 hex digits)
COMMIT = re.compile(r"^[0-9a-f]{40}$")
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


def pinned_revision(revision: str | None) -> str | None:
    """The revision a model pins, None when it takes the default (left out, or ``main``)."""
    return None if revision in (None, DEFAULT_REVISION) else revision


def hub_folder_name(repo_id: str, revision: str | None = None) -> str:
    """The folder name of a fetched hub model (``BAAI/bge-m3`` -> ``BAAI--bge-m3``; at a revision other
    than ``main``: ``BAAI--bge-m3@v2``, ``BAAI--bge-m3@refs--pr--1``), so that each revision has its own."""
    name = repo_id.replace("/", "--")
    pinned = pinned_revision(revision)
    return name if pinned is None else f"{name}@{pinned.replace('/', '--')}"


def fetch_record(folder: PathLike) -> dict[str, Any] | None:
    """A fetched folder's :data:`FETCH_RECORD` (repository, requested revision, commit, time); None without one."""
    try:
        record = json.loads((Path(folder) / FETCH_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def fetched_commit(folder: PathLike | None) -> str | None:
    """The 40-hex commit a hub model's folder was fetched at (its :data:`FETCH_RECORD`); None when not known."""
    record = fetch_record(folder) if folder is not None else None
    commit = str(record.get("commit", "")) if record else ""
    return commit if COMMIT.match(commit) else None


def stale_fetch(folder: PathLike) -> str | None:
    """One line when a fetched folder does not say which commit it holds (fetched by an earlier release, or
    copied in by hand): what is unknown and how to fetch it again; None when it says."""
    if not Path(folder).is_dir() or fetched_commit(folder) is not None:
        return None
    what = "has no" if fetch_record(folder) is None else "names no 40-hex commit in its"
    return (
        f"{folder} {what} {FETCH_RECORD}: the commit it holds is unknown (the settings page and the MTEB "
        f"export say so); delete the folder to fetch it again"
    )


def hub_error(repo_id: str, err: BaseException) -> DownloadError:
    """One sentence for a failed hub download: the model, what the hub said, and what to do."""
    reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return DownloadError(
        f"cannot fetch the model '{repo_id}' from the Hugging Face hub ({type(err).__name__}"
        f"{': ' + reason[:200] if reason else ''}): {HUB_LOGIN}"
    )


def fetch_checkpoint(repo_id: str, folder: PathLike, revision: str = DEFAULT_REVISION) -> dict[str, Any]:
    """Download hub model ``repo_id`` at ``revision`` (a commit, tag or branch) into ``folder`` (atomically),
    pinned to the 40-hex commit the revision names then; the folder's :data:`FETCH_RECORD` says which.
    Raises :class:`DownloadError` (:func:`hub_error`) when the hub cannot give it or names no commit,
    :class:`InputError` when what it gave is not a checkpoint."""
    from huggingface_hub import HfApi, snapshot_download

    try:
        commit = str(HfApi().model_info(repo_id, revision=revision).sha or "")
        if not COMMIT.match(commit):
            if not COMMIT.match(revision):
                raise DownloadError(
                    f"the Hugging Face hub names no commit for revision '{revision}' of '{repo_id}' "
                    f"(it gave {commit or 'none'}): name a commit as the model's `revision`"
                )
            commit = revision
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
    import ipaddress
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme.lower() == "https":
        return False
    host = (parts.hostname or "").lower()
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    return not (parts.scheme.lower() == "http" and loopback)


def leaky_url(url: str) -> str | None:
    """Why an API's ``url`` cannot be used as a base URL without writing a secret or sending the key nowhere:
    credentials in it, a query or fragment (a key there would be logged with the URL), no host; else None."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        return "holds credentials (user:password@): give the key through api_key_env, never in the URL"
    if parts.query or parts.fragment or url.rstrip().endswith(("?", "#")):
        return "has a query or fragment: a key there would be written wherever the URL is (logs, plans)"
    if not parts.hostname:
        return "has no host"
    return None
