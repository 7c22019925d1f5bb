"""The names of encoding shards and blocks, and which blocks cover a corpus (no engine imported).

A corpus of ``rows`` passages has ``ceil(rows / shard_size)`` shards (5-digit names, ``00012``), and
its shards are encoded in blocks of consecutive shards, each named by its first and last shard
(``00010-00019``); see :mod:`miracl_eval.encoders.blocks`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: a block's name: its first and last shard (the pattern also constrains the workflow's wildcard)
BLOCK_PATTERN = r"\d{5}-\d{5}"
BLOCK = re.compile(r"^(\d{5})-(\d{5})$")
SHARD_DIGITS = 5


def shard_name(shard: int) -> str:
    return f"{shard:0{SHARD_DIGITS}d}"


def block_name(first: int, last: int) -> str:
    return f"{shard_name(first)}-{shard_name(last)}"


def block_shards(name: str) -> range:
    """The shards of block ``name`` (``00010-00019``: 10 to 19)."""
    m = BLOCK.match(name)
    if not m or int(m[1]) > int(m[2]):
        raise ValueError(f"not a block name (first-last shard): {name!r}")
    return range(int(m[1]), int(m[2]) + 1)


def shards_per_block(block_size: int, shard_size: int) -> int:
    """Shards in a block of ``block_size`` passages: rounded down to whole shards, at least one."""
    return max(1, block_size // shard_size)


def block_rows(name: str, rows: int, shard_size: int) -> int:
    """Passages of block ``name`` in a corpus of ``rows`` passages."""
    shards = block_shards(name)
    return max(0, min(rows, shards.stop * shard_size) - shards.start * shard_size)


def tiling(n_shards: int, per_block: int) -> list[str]:
    """The blocks of ``n_shards`` shards at ``per_block`` shards each (the last one may be shorter)."""
    n_shards = max(1, n_shards)
    return [block_name(s, min(s + per_block, n_shards) - 1) for s in range(0, n_shards, per_block)]


def covering_blocks(existing: Iterable[str], n_shards: int, per_block: int) -> list[str]:
    """The blocks a stage reads: ``existing`` manifests (block names) that tile shards 0 to
    ``n_shards - 1`` exactly, or else the tiling at ``per_block``. Among existing ones, a longer
    block is preferred at each step; a gap or an overlap falls back to the configured tiling."""
    starts: dict[int, list[range]] = {}
    for name in existing:
        try:
            shards = block_shards(name)
        except ValueError:
            continue
        starts.setdefault(shards.start, []).append(shards)
    chosen: list[str] = []
    at = 0
    while at < n_shards:
        options = [r for r in starts.get(at, []) if r.stop <= n_shards]
        if not options:
            return tiling(n_shards, per_block)
        best = max(options, key=len)
        chosen.append(block_name(best.start, best.stop - 1))
        at = best.stop
    return chosen if chosen else tiling(n_shards, per_block)
