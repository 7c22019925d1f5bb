"""Encoding jobs over blocks of shards: which shards a block holds, which of them are already done.

A corpus is encoded in shards of ``shard_size`` passages (one Parquet file per shard and output
kind, the unit that later stages read), and the shards in blocks of ``block_size`` passages: one
job per block, which loads its model once. A block is named by its first and last shard
(``00010-00019``), and its job writes a small manifest (JSON) when every shard of the block is done.

A shard's files carry the *fingerprint* of what made them (the model's encoding settings, dtype,
storage dtype and shard size) in their Parquet metadata. A block job skips a shard whose files all
exist with the job's fingerprint, the expected row count, and are newer than the corpus and the
checkpoint. Releases before the dtype the model ran in was recorded stamped ``encoder.dtype: auto`` as
``auto`` (:func:`earlier_fingerprint`): such shards are kept when their corpus's block manifests say they
were encoded on the device type the job runs on now (a CPU's ``auto`` is float32 on every machine), else
encoded again, said in one line before the model loads: a killed job, run again, goes on at the next unfinished shard, and a block size that
changes re-encodes nothing. The blocks a stage reads are the existing manifests when they cover the
corpus (whatever block size wrote them), so that a new block size changes no job either
(:func:`miracl_eval.shards.covering_blocks`, where the names and tilings live).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from miracl_eval.atomic import atomic_output, write_text_atomic
from miracl_eval.encoders.outputs import vector_dim
from miracl_eval.errors import InputError
from miracl_eval.types import PathLike

#: the Parquet metadata key of a shard file's fingerprint
FINGERPRINT_KEY = b"miracl_eval.encoding"


def fingerprint(spec: Mapping[str, Any], dtype: str, dense_dtype: str, shard_size: int) -> str:
    """What a shard's encodings depend on, as a short hash (its files' metadata); ``dtype`` is the one the
    model runs in (resolved: never ``auto``), so that a block re-encoded on another device re-encodes its shards."""
    settings = {"spec": dict(spec), "dtype": dtype, "dense_dtype": dense_dtype, "shard_size": shard_size}
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:32]


def earlier_fingerprint(spec: Mapping[str, Any], dtype: str, dense_dtype: str, shard_size: int) -> str | None:
    """The fingerprint that releases before the resolved dtype was recorded stamped on shards encoded with
    ``encoder.dtype: auto``: the setting, not what it became (None for another setting: its stamp is unchanged)."""
    return fingerprint(spec, dtype, dense_dtype, shard_size) if dtype == "auto" else None


#: a block manifest's record of the shards it kept from an earlier release: that release's fingerprint, the
#: device type they were encoded on, the shards
KEPT_KEY = "kept_from_earlier_release"


#: beside a corpus's block manifests, what its manifests of releases before the dtype was recorded said of the
#: devices their shards were encoded on (fingerprint -> device types): written before any job runs
#: (:func:`remember_earlier_devices`, the workflow's ``onstart``), since Snakemake removes a block's manifest
#: before it runs the block's job again
EARLIER_RECORD = ".earlier-releases.json"


def _manifest_devices(path: Path) -> dict[str, set[str]]:
    """fingerprint -> device types that one manifest says shards of an earlier release were encoded on."""
    try:
        data = read_manifest(path)
    except InputError:
        return {}
    kept = data.get(KEPT_KEY) or {}
    if data.get("fingerprint") and data.get("dtype") is None and data.get("device"):
        return {str(data["fingerprint"]): {str(data["device"]).split(":")[0]}}
    if isinstance(kept, dict) and kept.get("fingerprint") and kept.get("device"):
        return {str(kept["fingerprint"]): {str(kept["device"])}}
    return {}


def _read_record(folder: Path) -> dict[str, set[str]]:
    try:
        data = json.loads((folder / EARLIER_RECORD).read_text(encoding="utf-8"))
        return {str(k): {str(d) for d in v} for k, v in data.items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def remember_earlier_devices(folder: PathLike) -> dict[str, set[str]]:
    """Record, in a corpus's blocks ``folder`` (:data:`EARLIER_RECORD`), the devices its manifests of earlier
    releases say their shards were encoded on, merged with what the record holds; returns the record."""
    folder = Path(folder)
    record = _read_record(folder)
    found: dict[str, set[str]] = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        for mark, devices in _manifest_devices(path).items():
            found.setdefault(mark, set()).update(devices)
    if not found or all(devices <= record.get(mark, set()) for mark, devices in found.items()):
        return record
    for mark, devices in found.items():
        record.setdefault(mark, set()).update(devices)
    write_text_atomic(folder / EARLIER_RECORD, json.dumps({k: sorted(v) for k, v in record.items()}) + "\n")
    return record


def earlier_devices(folder: PathLike, mark: str) -> set[str]:
    """The device types (``cpu``, ``cuda``) that shards stamped with the earlier fingerprint ``mark`` were
    encoded on, as the model's block folders say (``folder`` is one corpus's: the model's other corpora count
    too, their shards made by the same settings): manifests of that release (with ``mark`` and no dtype), later
    ones that kept such shards (:data:`KEPT_KEY`), and :data:`EARLIER_RECORD`."""
    found: set[str] = set()
    for blocks in {Path(folder), *Path(folder).parent.parent.glob("*/blocks")}:
        found |= _read_record(blocks).get(mark, set())
        for path in blocks.glob("*.json"):
            found |= _manifest_devices(path).get(mark, set())
    return found


def newest_mtime(paths: Sequence[PathLike]) -> float:
    """The newest modification time of ``paths`` (a folder: of the files in it); 0 for none."""
    newest = 0.0
    for path in paths:
        p = Path(path)
        if p.is_dir():
            for root, _, files in os.walk(p):
                for name in files:
                    newest = max(newest, (Path(root) / name).stat().st_mtime)
        elif p.exists():
            newest = max(newest, p.stat().st_mtime)
    return newest


def shard_is_done(files: Iterable[PathLike], mark: str, rows: int, not_before: float) -> bool:
    """Whether every one of a shard's ``files`` exists with fingerprint ``mark``, ``rows`` rows, and
    is newer than ``not_before`` (the corpus's and the checkpoint's modification times)."""
    for path in files:
        try:
            if Path(path).stat().st_mtime < not_before:
                return False
            meta = pq.read_metadata(path)
        except (OSError, ValueError):
            return False
        stored = (meta.metadata or {}).get(FINGERPRINT_KEY)
        if stored is None or stored.decode() != mark or meta.num_rows != rows:
            return False
    return True


def write_manifest(path: PathLike, block: str, shards: Sequence[Mapping[str, Any]], **facts: Any) -> None:
    """The block's manifest: its shards (files, rows, whether encoded by this job) and ``facts``."""
    with atomic_output(path) as tmp:
        Path(tmp).write_text(json.dumps({"block": block, **facts, "shards": list(shards)}, indent=1) + "\n")


def read_manifest(path: PathLike) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise InputError(path, f"cannot read the block manifest ({err})") from err
    if not isinstance(data, dict) or "shards" not in data:
        raise InputError(path, "not a block manifest (no 'shards')")
    return data


def manifest_dim(path: PathLike) -> int | None:
    """The dense dimension a block manifest records (None without dense output)."""
    dim = read_manifest(path).get("dim")
    return int(dim) if dim else None


def written_blocks(folder: PathLike) -> list[str]:
    """The blocks whose manifests ``folder`` holds (any block size), by name; none when it does not exist."""
    return [f[: -len(".json")] for f in os.listdir(folder) if f.endswith(".json")] if os.path.isdir(folder) else []


def planned_dim(spec: Mapping[str, Any], default: int) -> int:
    """The dense dimension a model's vectors will have, known before any is written (a dry run's requests):
    an embeddings API model's ``dimensions`` (what it asks the API for) or published size, a local checkpoint's
    last sentence-transformers ``Dense`` head's ``out_features`` or its ``hidden_size``; else ``default``. A
    local model's ``dimensions``, and a view's (``view_of``), truncate what is searched, not what is stored."""
    if spec.get("family") == "openai":
        from miracl_eval.encoders.openai import KNOWN_DIMS

        if spec.get("dimensions") and not spec.get("view_of"):
            return int(spec["dimensions"])
        return KNOWN_DIMS.get(str(spec.get("checkpoint")), default)
    folder = Path(str(spec.get("checkpoint") or "")).expanduser()
    if spec.get("family") == "dense":  # its module chain's projection heads (the encoder runs them)
        from miracl_eval.encoders.st_settings import read_st_chain

        try:
            chain = read_st_chain(folder)
        except (OSError, InputError):  # refused where the model is loaded, naming the file
            chain = None
        if chain is not None and chain.dense_modules:
            return chain.dense_modules[-1].out_features
    config = folder / "config.json"
    try:
        size = json.loads(config.read_text(encoding="utf-8")).get("hidden_size")
    except (OSError, ValueError, AttributeError):
        return default
    return int(size) if isinstance(size, int) and size > 0 else default


def encoded_dim(path: PathLike, default: int) -> int:
    """The dense dimension of a vector file or of the block a manifest (``.json``) records; ``default`` when it
    is not there yet (a dry run: a pending job's output stands in for it) or records none."""
    try:
        if str(path).endswith(".json"):
            return manifest_dim(path) or default
        return vector_dim(path)[1]
    except (OSError, InputError):
        return default
