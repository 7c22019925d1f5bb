"""How a dense model's vectors are searched: the first ``dimensions`` of them (Matryoshka truncation,
normalised again where the model normalises) and their ``storage`` (float32, float16, int8, binary).

The passages are encoded once, at full size and in float32 or float16 (``encoder.dense_dtype``); every
view here is derived from those encodings when a block is searched, so ``me5-small``, a 128-dimension
view and an int8 view of it are rows of one run from one encoding.

* ``int8``: per dimension, the range ``[min, max]`` of a sample of the corpus's passage vectors
  (:func:`int8_ranges`) is cut into 256 steps; a value becomes its step's number minus 128, as
  sentence-transformers' ``quantize_embeddings(precision="int8", ranges=...)`` does (values outside the
  range clipped). Queries are quantised with the same ranges and scored by the integer dot product.
* ``binary``: one bit per dimension, set when the value is positive, eight to a byte (``np.packbits``:
  ``quantize_embeddings(precision="ubinary")``); a pair's score is the number of agreeing bits minus the
  disagreeing ones (``dimensions - 2 * Hamming distance``: the dot product of the ±1 vectors).
* ``float16``: the vectors held in half precision, products summed in float32.

Memory per vector: float32 ``4 d`` bytes, float16 ``2 d``, int8 ``d``, binary ``d / 8``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

#: passages widened at a time when scoring int8 and float16 blocks
SLAB = 1 << 16


@dataclass(frozen=True)
class View:
    """How a model's vectors are searched (its ``dimensions``, ``storage`` and normalisation)."""

    dimensions: int | None = None  #: the first N dimensions; None: all
    storage: str = "float32"
    normalize: bool = False  #: L2-normalise again after truncating (models that normalise)

    def truncate(self, vectors: np.ndarray) -> np.ndarray:
        """Vectors seen through the view's dimensions (:func:`truncate`)."""
        return truncate(vectors, self.dimensions, self.normalize)

    @classmethod
    def of(cls, spec: dict[str, Any] | None) -> View:
        if not spec:
            return cls()
        return cls(spec.get("dimensions"), spec.get("storage") or "float32", bool(spec.get("normalize")))


def truncate(vectors: np.ndarray, dimensions: int | None, normalize: bool) -> np.ndarray:
    """The first ``dimensions`` of each vector (float32), L2-normalised again when ``normalize`` (the
    model normalises its vectors); the vectors themselves when nothing changes."""
    if dimensions is None:
        return np.asarray(vectors, dtype=np.float32)
    if dimensions > vectors.shape[1]:
        raise ValueError(f"dimensions {dimensions} > the vectors' {vectors.shape[1]}")
    out = np.ascontiguousarray(vectors[:, :dimensions], dtype=np.float32)
    if normalize:
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        out /= np.where(norms == 0, 1, norms)
    return out


def int8_ranges(samples: Iterable[np.ndarray]) -> np.ndarray:
    """``[[min...], [max...]]`` (float32, 2 x d) per dimension over the calibration vectors."""
    lo: np.ndarray | None = None
    hi: np.ndarray | None = None
    for batch in samples:
        if len(batch) == 0:
            continue
        bmin, bmax = batch.min(axis=0), batch.max(axis=0)
        lo = bmin if lo is None else np.minimum(lo, bmin)
        hi = bmax if hi is None else np.maximum(hi, bmax)
    if lo is None or hi is None:
        raise ValueError("no calibration vectors")
    return np.vstack([lo, hi]).astype(np.float32)


def quantize_int8(vectors: np.ndarray, ranges: np.ndarray) -> np.ndarray:
    """int8 codes of float32 ``vectors`` with per-dimension ``ranges`` (:func:`int8_ranges`)."""
    ranges = ranges.astype(np.float32, copy=False)
    starts = ranges[0]
    steps = (ranges[1] - starts) / np.float32(255)
    steps = np.where(steps == 0, np.float32(1), steps)
    codes = np.clip(np.floor((np.asarray(vectors, dtype=np.float32) - starts) / steps), 0, 255)
    return (codes - 128).astype(np.int8)


def pack_binary(vectors: np.ndarray) -> np.ndarray:
    """Sign bits, eight dimensions to a byte (uint8, ``ceil(d / 8)`` per vector)."""
    return np.packbits(np.asarray(vectors) > 0, axis=-1)


class Stored:
    """A block's passage vectors (already seen through the view's dimensions: :meth:`View.truncate`) in a
    storage, and the scores of queries (likewise) against them."""

    def __init__(self, vectors: np.ndarray, storage: str, ranges: np.ndarray | None = None) -> None:
        if storage == "int8" and ranges is None:
            raise ValueError("int8 storage needs the corpus's ranges")
        self.storage, self.ranges, self.dim = storage, ranges, vectors.shape[1]
        self._hold(self.encode(vectors))

    @classmethod
    def of_codes(cls, codes: np.ndarray, dim: int, storage: str, ranges: np.ndarray | None = None) -> Stored:
        """A store of vectors already in the storage (``codes``; ``dim``: their dimensions)."""
        stored = cls(np.zeros((0, dim), np.float32), storage, ranges)
        stored._hold(codes)
        return stored

    def _hold(self, data: np.ndarray) -> None:
        self.data, self.n = data, len(data)
        self._words = _words(data) if self.storage == "binary" else None

    def encode(self, vectors: np.ndarray) -> np.ndarray:
        """Float vectors (passages or queries) in the storage."""
        flat = np.asarray(vectors, dtype=np.float32)
        if self.storage == "float16":
            return flat.astype(np.float16)
        if self.storage == "int8":
            assert self.ranges is not None
            return quantize_int8(flat, self.ranges)
        if self.storage == "binary":
            return pack_binary(flat)
        return flat

    @property
    def bytes_per_vector(self) -> int:
        return int(self.data.shape[1] * self.data.itemsize)

    def scores(self, queries: np.ndarray) -> np.ndarray:
        """float32 scores ``[len(queries), n]`` of queries (float vectors in the view's dimensions, encoded
        here) against the block."""
        storage = self.storage
        # float16 holds the passages only: queries stay float32
        q = np.asarray(queries, dtype=np.float32) if storage == "float16" else self.encode(queries)
        if storage == "binary":
            return self._binary_scores(q)
        if storage == "float32":
            return q @ self.data.T
        # int8: the integer dot product, exact (float32 holds every integer up to 2^24: d <= 1024; else float64);
        # float16: float32 products. The block is widened a slab at a time, never whole.
        wide = np.float32 if storage == "float16" or 128 * 128 * self.dim <= 1 << 24 else np.float64
        qw: np.ndarray = q.astype(wide)
        out = np.empty((len(q), self.n), dtype=np.float32)
        for start in range(0, self.n, SLAB):
            slab: np.ndarray = self.data[start : start + SLAB].astype(wide)
            out[:, start : start + SLAB] = np.matmul(qw, slab.T)
        return out

    def _binary_scores(self, q: np.ndarray) -> np.ndarray:
        """``dimensions - 2 * Hamming distance``, the bits compared 64 at a time."""
        assert self._words is not None
        words, qwords = self._words, _words(q)
        scores = np.empty((len(q), self.n), dtype=np.float32)
        for i, row in enumerate(qwords):
            hamming = np.bitwise_count(np.bitwise_xor(words, row)).sum(axis=1, dtype=np.int64)
            scores[i] = self.dim - 2 * hamming
        return scores


def _words(bits: np.ndarray) -> np.ndarray:
    """Packed bits as 64-bit words (zero bytes added to a multiple of 8: they agree, changing no distance)."""
    pad = -bits.shape[1] % 8
    if pad:
        bits = np.concatenate([bits, np.zeros((len(bits), pad), np.uint8)], axis=1)
    return np.ascontiguousarray(bits).view(np.uint64)
