"""Encoding jobs over blocks of shards: which shards a block holds, which of them are already done.

A corpus is encoded in shards of ``shard_size`` passages (one Parquet file per shard and output
kind, the unit that later stages read), and the shards in blocks of ``block_size`` passages: one
job per block, which loads its model once. A block is named by its first and last shard
(``00010-00019``), and its job writes a small manifest (JSON) when every shard of the block is done.

A shard's files carry the *fingerprint* of what made them (the model's encoding settings, dtype,
storage dtype and shard size) in their Parquet metadata. A block job skips a shard whose files all
exist with the job's fingerprint, the expected row count, and are newer than the corpus and the
checkpoint: a killed job, run again, goes on at the next unfinished shard, and a block size that
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

from miracl_eval.atomic import atomic_output
from miracl_eval.errors import InputError
from miracl_eval.types import PathLike

#: the Parquet metadata key of a shard file's fingerprint
FINGERPRINT_KEY = b"miracl_eval.encoding"


def fingerprint(spec: Mapping[str, Any], dtype: str, dense_dtype: str, shard_size: int) -> str:
    """What a shard's encodings depend on, as a short hash (its files' metadata); ``dtype`` is the one the
    model runs in (resolved: never ``auto``), so that a block re-encoded on another device re-encodes its shards."""
    settings = {"spec": dict(spec), "dtype": dtype, "dense_dtype": dense_dtype, "shard_size": shard_size}
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:32]


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
