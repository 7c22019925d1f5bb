"""SentencePiece "precompiled charsmap" blobs: a string-to-string map that ``tokenizers.normalizers.Precompiled`` runs.

The blob is what SentencePiece stores in a model's ``normalizer_spec.precompiled_charsmap``: a little-endian
``uint32`` byte size of a double-array trie, the trie's ``uint32`` units, then the replacement strings, each
UTF-8 and NUL-terminated. A key's trie value is the byte offset of its replacement in that string blob.

Trie units (the double-array layout that ``tokenizers`` reads): bits 0-7 hold the label (the byte that leads
to the unit), bit 8 says that the node ends a key, bits 10-30 hold the offset to the node's children (bit 9
would scale it by 256; unused here: the trie stays below 2**21 units); a value unit has bit 31 set and the
value in bits 0-30. From a node at position ``p`` with offset ``o``, the child for byte ``c`` sits at
``p ^ o ^ c`` and the end-of-key value at ``p ^ o``.

Keys must be non-empty and NUL-free. The build is deterministic: keys are placed in sorted order.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Mapping

import numpy as np

_HAS_LEAF = 1 << 8
_IS_VALUE = 1 << 31
_MAX_UNITS = 1 << 21  # offsets below this need no scaling bit


class _Node:
    __slots__ = ("children", "value")

    def __init__(self) -> None:
        self.children: dict[int, _Node] = {}
        self.value: int | None = None


def _trie(keys: Mapping[bytes, int]) -> _Node:
    root = _Node()
    for key, value in sorted(keys.items()):
        if not key or 0 in key:
            raise ValueError(f"charsmap key {key!r} is empty or holds a NUL byte")
        node = root
        for byte in key:
            node = node.children.setdefault(byte, _Node())
        node.value = value
    return root


def double_array(keys: Mapping[bytes, int]) -> np.ndarray:
    """The double-array trie of ``keys`` (byte strings to values below 2**31) as ``uint32`` units."""
    units = [0] * _MAX_UNITS
    used = bytearray(_MAX_UNITS + 256)  # 1 where a unit is placed (position 0: the root); slack for base ^ 255
    used[0] = 1
    bases: set[int] = set()  # each node needs its own base, or a lookup could reach another node's child
    queue: deque[tuple[int, _Node]] = deque([(0, _trie(keys))])
    first_free = 1
    end = 0
    while queue:
        pos, node = queue.popleft()
        labels = ([0] if node.value is not None else []) + sorted(node.children)
        if not labels:
            continue
        first_free = used.find(0, first_free)
        candidate = first_free
        while True:  # a free position for the first label, then check the others
            base = candidate ^ labels[0]
            if base not in bases and all(base ^ lab and not used[base ^ lab] for lab in labels):
                break
            candidate = used.find(0, candidate + 1)
        if (base | 0xFF) >= _MAX_UNITS:
            raise ValueError(f"charsmap trie needs more than {_MAX_UNITS} units")
        end = max(end, base | 0xFF)  # every lookup from this node stays inside base's 256-unit block
        bases.add(base)
        units[pos] |= ((pos ^ base) << 10) | (_HAS_LEAF if node.value is not None else 0)
        for lab in labels:
            used[base ^ lab] = 1
        if node.value is not None:
            if not 0 <= node.value < _IS_VALUE:
                raise ValueError(f"charsmap value {node.value} out of range")
            units[base] = _IS_VALUE | node.value
        for lab in sorted(node.children):
            units[base ^ lab] = lab
            queue.append((base ^ lab, node.children[lab]))
    return np.array(units[: end + 1], dtype=np.uint32)


def lookup(units: np.ndarray, key: bytes) -> list[int]:
    """The values of every key that is a prefix of ``key``, shortest first (the trie's common-prefix search)."""
    out: list[int] = []
    unit = int(units[0])
    pos = _offset(unit)
    for byte in key:
        pos ^= byte
        if pos >= len(units):
            return out
        unit = int(units[pos])
        if unit & (_IS_VALUE | 0xFF) != byte:
            return out
        pos ^= _offset(unit)
        if unit & _HAS_LEAF:
            out.append(int(units[pos]) & (_IS_VALUE - 1))
    return out


def _offset(unit: int) -> int:
    return (unit >> 10) << ((unit & (1 << 9)) >> 6)


def precompiled_charsmap(mapping: Mapping[str, str]) -> bytes:
    """The charsmap blob replacing each key of ``mapping`` (a non-empty string) by its value (maybe empty)."""
    blob = bytearray()
    where: dict[str, int] = {}
    keys: dict[bytes, int] = {}
    for key, value in sorted(mapping.items()):
        if "\0" in value:
            raise ValueError(f"charsmap value for {key!r} holds a NUL")
        if value not in where:
            where[value] = len(blob)
            blob += value.encode("utf-8") + b"\0"
        keys[key.encode("utf-8")] = where[value]
    units = double_array(keys)
    return struct.pack("<I", 4 * len(units)) + units.astype("<u4").tobytes() + bytes(blob)
