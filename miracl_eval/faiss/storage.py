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
* ``float16``: the passages held in half precision, queries in float32, products summed in float32.

Memory per vector (:func:`bytes_per_vector`): float32 ``4 d`` bytes, float16 ``2 d``, int8 ``d``, binary
``ceil(d / 8)``. A block is held only in its storage (:meth:`Stored.allocate`, :meth:`Stored.put`).

How each storage is scored (every score float32; int8 and binary scores are exact integers):

* binary, on the CPU: Faiss's Hamming kernels on the packed bits (:func:`hamming_top`: ``knn_hamming``,
  and ``hamming_range_search`` where the ties of the last hit go beyond what it returned);
* int8, on the CPU and on a GPU: ``torch._int_mm`` (oneDNN on the CPU, cuBLASLt on a GPU), int8 x int8
  summed in int32. Exact: a code is at most 128 in magnitude, a product at most 2^14, and a sum over
  ``d`` dimensions at most ``d * 2^14 < 2^31`` for ``d < 131,072`` (:data:`INT8_MAX_DIM`). The int32
  sum becomes float32 exactly up to 2^24 (every ``d <= 1024``), beyond that rounded to nearest as
  float32 rounds any exact integer;
* binary, on a GPU: the bits unpacked a slab at a time to ±1 int8 codes (0 for the padding bits of
  the last byte) and multiplied by ``torch._int_mm``: the sum of ``d`` products ±1 is ``d - 2 H``,
  exact (at most ``d`` in magnitude);
* float16, on the CPU: slabs of :data:`SLAB` passages widened to float32 by torch and multiplied by
  its BLAS (float32 products and sums); on a GPU: multiplied natively in half precision with float32
  accumulation and output (``torch.mm(..., out_dtype=torch.float32)``), the float32 query split in
  two halves, ``hi = half(q)`` and ``lo = half((q - hi) * 2^11)``, so that ``hi . p + (lo . p) / 2^11``
  keeps the query's float32 precision: a half times a half is exact in float32 (11 + 11 significant
  bits), and ``q`` differs from ``hi + lo / 2^11`` by at most ``2^-22 |q|`` per component. Where torch
  lacks that product, slabs are widened to float32 on the GPU as on the CPU;
* float32 (and any storage, on a GPU): :class:`TorchScores` multiplies on the job's GPU, and the CPU
  path is numpy's BLAS (:mod:`.blocks`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from miracl_eval.errors import InputError, MiraclEvalError
from miracl_eval.types import PathLike

log = logging.getLogger(__name__)

#: passages unpacked or multiplied at a time by :class:`TorchScores` (a multiple of 8)
SLAB = 1 << 16
#: float16 passages widened to float32 at a time (32 MB at 1,024 dimensions: the widened slab stays in cache)
WIDEN_SLAB = 1 << 13
#: the widest int8 view whose int32 sums are exact (:class:`TorchScores`)
INT8_MAX_DIM = (1 << 31) // (128 * 128) - 1
#: the scale of a float32 query's low half-precision part (:class:`TorchScores`, float16 on a GPU)
LO_SCALE = float(1 << 11)
#: ``knn_hamming`` takes this many times the hits; ties of the last one beyond them are found by range search
HAMMING_SPARE = 2
STORAGES = ("float32", "float16", "int8", "binary")


@dataclass(frozen=True)
class View:
    """How a model's vectors are searched (its ``dimensions``, ``storage`` and normalisation)."""

    dimensions: int | None = None  #: the first N dimensions; None: all
    storage: str = "float32"
    normalize: bool = False  #: L2-normalise again after truncating (models that normalise)

    def truncate(self, vectors: np.ndarray) -> np.ndarray:
        """Vectors seen through the view's dimensions (:func:`truncate`)."""
        return truncate(vectors, self.dimensions, self.normalize)

    def check(self, width: int, path: PathLike, model: str = "") -> None:
        """InputError naming ``path`` (the vectors' file) and the model's setting when ``dimensions`` is wider
        than the vectors' ``width`` (known only once they are encoded)."""
        if self.dimensions is not None and self.dimensions > width:
            key = f"models.{model}.dimensions" if model else "dimensions"
            raise InputError(
                path,
                f"{key} is {self.dimensions}, more than the {width} dimensions of the vectors the model encoded: "
                f"set it to at most {width}",
            )

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


def bytes_per_vector(storage: str, dim: int) -> int:
    """Bytes a vector of ``dim`` dimensions takes in ``storage``."""
    return {"float32": 4 * dim, "float16": 2 * dim, "int8": dim, "binary": -(-dim // 8)}[storage]


def _code_shape(storage: str, dim: int) -> tuple[type, int]:
    """The dtype and the width (columns) of a vector's codes in ``storage``."""
    return {"float32": (np.float32, dim), "float16": (np.float16, dim), "int8": (np.int8, dim),
            "binary": (np.uint8, -(-dim // 8))}[storage]  # fmt: skip


def encode(vectors: np.ndarray, storage: str, ranges: np.ndarray | None = None) -> np.ndarray:
    """Float vectors (passages or queries, in the view's dimensions) in ``storage``'s codes."""
    flat = np.asarray(vectors, dtype=np.float32)
    if storage == "float16":
        return flat.astype(np.float16)
    if storage == "int8":
        if ranges is None:
            raise ValueError("int8 storage needs the corpus's ranges")
        return quantize_int8(flat, ranges)
    if storage == "binary":
        return pack_binary(flat)
    if storage != "float32":
        raise ValueError(f"storage must be one of {', '.join(STORAGES)}, not {storage!r}")
    return flat


class Stored:
    """A block's passage vectors (seen through the view's dimensions: :meth:`View.truncate`) held in a
    storage's codes only (``data``: ``n`` rows)."""

    def __init__(self, vectors: np.ndarray, storage: str, ranges: np.ndarray | None = None) -> None:
        """The codes of float ``vectors`` (all at once: tests and benchmarks; a block is :meth:`allocate`\\ d
        and filled by :meth:`put`)."""
        self._settings(vectors.shape[1], storage, ranges)
        self.data = self.encode(vectors)

    def _settings(self, dim: int, storage: str, ranges: np.ndarray | None) -> None:
        if storage == "int8" and ranges is None:
            raise ValueError("int8 storage needs the corpus's ranges")
        if storage == "int8" and dim > INT8_MAX_DIM:
            raise ValueError(f"int8 views of more than {INT8_MAX_DIM} dimensions overflow int32 sums")
        _code_shape(storage, dim)  # an unknown storage fails here
        self.storage, self.ranges, self.dim = storage, ranges, dim

    @classmethod
    def allocate(cls, n: int, dim: int, storage: str, ranges: np.ndarray | None = None) -> Stored:
        """Room for ``n`` vectors of ``dim`` dimensions in ``storage``, filled by :meth:`put`."""
        dtype, width = _code_shape(storage, dim)
        return cls.of_codes(np.empty((n, width), dtype=dtype), dim, storage, ranges)

    @classmethod
    def of_codes(cls, codes: np.ndarray, dim: int, storage: str, ranges: np.ndarray | None = None) -> Stored:
        """A store of vectors already in the storage (``codes``; ``dim``: their dimensions)."""
        stored = cls.__new__(cls)
        stored._settings(dim, storage, ranges)
        stored.data = codes
        return stored

    @property
    def n(self) -> int:
        return len(self.data)

    def put(self, at: int, vectors: np.ndarray) -> None:
        """Store float ``vectors`` (in the view's dimensions) as rows ``at, at + 1, ...``."""
        self.data[at : at + len(vectors)] = self.encode(vectors)

    def encode(self, vectors: np.ndarray) -> np.ndarray:
        """Float vectors (passages or queries) in the storage (:func:`encode`)."""
        return encode(vectors, self.storage, self.ranges)

    @property
    def bytes_per_vector(self) -> int:
        return int(self.data.shape[1] * self.data.itemsize)


def hamming_top(
    codes: np.ndarray, queries: np.ndarray, dim: int, hits: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each query's ``hits`` passages of the smallest Hamming distance and every passage tied with the
    last of them, by Faiss's kernels on the packed bits (``codes``: the passages', ``queries``: the
    queries' :func:`pack_binary` codes): ``(query row, passage row, score)`` of each kept pair, sorted by
    query row and then passage row; scores ``dim - 2 * Hamming distance`` (float32).

    ``knn_hamming`` returns the :data:`HAMMING_SPARE` x ``hits`` nearest; a query whose last returned
    distance still equals its ``hits``-th (ties may go on beyond them) gets every passage within that
    distance from ``hamming_range_search``, queries of one radius together."""
    from miracl_eval.faiss.index import load_faiss

    faiss = load_faiss()
    codes, queries = np.ascontiguousarray(codes, np.uint8), np.ascontiguousarray(queries, np.uint8)
    n, nq = len(codes), len(queries)
    if nq == 0 or n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    k = min(n, HAMMING_SPARE * hits)
    dist, cols = faiss.knn_hamming(queries, codes, k)  # each row by distance, ascending
    last = dist[:, min(hits, n) - 1]
    cut = (dist[:, -1] <= last) if k < n else np.zeros(nq, bool)  # the ties may go on beyond the k returned
    keep = (dist <= last[:, None]) & ~cut[:, None]
    rows, pos = np.nonzero(keep)
    parts = [(rows, cols[rows, pos], dist[rows, pos].astype(np.int64))]
    for radius in np.unique(last[cut]):
        group = np.nonzero(cut & (last == radius))[0]
        found = faiss.RangeSearchResult(len(group))
        sub = np.ascontiguousarray(queries[group])
        faiss.hamming_range_search(
            faiss.swig_ptr(sub), faiss.swig_ptr(codes), len(group), n, int(radius) + 1, codes.shape[1], found
        )  # every passage at a distance below radius + 1
        lims = faiss.rev_swig_ptr(found.lims, len(group) + 1).astype(np.int64)
        total = int(lims[-1])
        within = faiss.rev_swig_ptr(found.labels, total).copy() if total else np.zeros(0, np.int64)
        hamming = faiss.rev_swig_ptr(found.distances, total).astype(np.int64) if total else np.zeros(0, np.int64)
        parts.append((np.repeat(group, np.diff(lims)), within, hamming))
    rows, cols_kept, hamming = (np.concatenate(x) for x in zip(*parts, strict=True))
    order = np.lexsort((cols_kept, rows))
    return (
        rows[order].astype(np.int64),
        cols_kept[order].astype(np.int64),
        (dim - 2 * hamming[order]).astype(np.float32),
    )


def _tensor(array: np.ndarray, dtype: type | None = None) -> Any:
    """A CPU tensor of ``array`` (its memory when it is contiguous and writable, else a copy)."""
    import torch

    array = np.ascontiguousarray(array, dtype)
    return torch.from_numpy(array) if array.flags.writeable else torch.tensor(array)


def _half_mm(a: Any, b: Any) -> Any:
    """``a @ b`` of half-precision matrices, accumulated and returned in float32 (torch's CUDA kernel)."""
    import torch

    return torch.mm(a, b, out_dtype=torch.float32)


def uses_tf32(mm: Any, torch: Any, device: Any) -> bool:
    """Whether ``mm`` (a float32 matrix product on ``device``) rounds its inputs to TF32's 10 mantissa bits: a
    GEMM-sized product (so that cuBLAS picks its tensor-core kernels where TF32 is allowed) of ``1 + 2^-12``
    summed 256 times, ``256 + 2^-4`` in float32 whatever the order of the sums, 256 in TF32."""
    a = torch.full((64, 256), 1 + 2.0**-12, dtype=torch.float32, device=device)
    b = torch.ones((256, 64), dtype=torch.float32, device=device)
    return bool((mm(a, b) != 256 + 2.0**-4).any())


def exact_float32_products(torch: Any, device: Any) -> None:
    """Float32 products on ``device`` without TF32, whatever the environment set when torch was imported
    (NVIDIA's NGC containers set ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1``, which torch reads then): torch told
    so, and checked by a product (:func:`uses_tf32`); where TF32 is still used, an error rather than rankings
    that are not the exact search's."""
    torch.backends.cuda.matmul.allow_tf32 = False
    if uses_tf32(torch.mm, torch, device):
        raise MiraclEvalError(
            f"float32 products on {device} use TF32 although torch was told not to "
            "(torch.backends.cuda.matmul.allow_tf32 = False): the exact search would not be exact; run the job "
            "with another torch or CUDA library, or search on the CPU (encoder.device: cpu)"
        )


class TorchScores:
    """A block's codes (a :class:`Stored`'s) on a torch device, a GPU or the CPU, and the float32 scores
    of queries against them there (see the module's docstring for each storage's kernel and why it is
    exact). Holds the codes only: the :class:`Stored` may be dropped once this is made."""

    def __init__(self, stored: Stored, device: str, slab: int = SLAB) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        if self.device.type == "cuda":  # exact float32 products, whatever TF32 default the environment sets
            exact_float32_products(torch, self.device)
        self.storage, self.dim, self.n, self.ranges = stored.storage, stored.dim, stored.n, stored.ranges
        self.slab = max(8, slab - slab % 8)
        codes = _tensor(stored.data).to(self.device)  # the CPU: the same memory, no copy
        if self.storage == "int8" and self.dim % 8:  # _int_mm multiplies rows of a multiple of 8 codes
            codes = torch.nn.functional.pad(codes, (0, -self.dim % 8))
        self.codes = codes
        self.half_native = False
        if self.storage == "float16" and self.device.type == "cuda":
            try:
                probe = torch.ones((2, 8), dtype=torch.float16, device=self.device)
                self.half_native = bool(_half_mm(probe, probe.T).dtype == torch.float32)
            except (TypeError, RuntimeError, NotImplementedError) as err:
                log.info("float16 on %s: no half-precision product with float32 output here (%s): widened", device, err)
        if self.storage == "binary":
            self.shifts = torch.arange(7, -1, -1, dtype=torch.uint8, device=self.device)

    def scores(self, queries: np.ndarray) -> Any:
        """float32 scores ``[len(queries), n]`` (a tensor on the device) of queries (float vectors in the
        view's dimensions, encoded here as the storage encodes them) against the block."""
        torch = self.torch
        out = torch.empty((len(queries), self.n), dtype=torch.float32, device=self.device)
        if len(queries) == 0 or self.n == 0:
            return out
        if self.storage == "float32":
            torch.mm(_tensor(queries, np.float32).to(self.device), self.codes.T, out=out)
        elif self.storage == "float16":
            self._half(queries, out)
        else:
            self._integer(queries, out)
        return out

    def _half(self, queries: np.ndarray, out: Any) -> None:
        torch = self.torch
        q = _tensor(queries, np.float32).to(self.device)
        if self.half_native:
            hi = q.to(torch.float16)
            lo = ((q - hi.to(torch.float32)) * LO_SCALE).to(torch.float16)
            for start in range(0, self.n, self.slab):
                part = self.codes[start : start + self.slab].T
                out[:, start : start + self.slab] = _half_mm(hi, part) + _half_mm(lo, part) / LO_SCALE
            return
        step = min(self.slab, WIDEN_SLAB)
        wide = torch.empty((min(step, self.n), self.dim), dtype=torch.float32, device=self.device)
        products = torch.empty((len(q), len(wide)), dtype=torch.float32, device=self.device)
        for start in range(0, self.n, step):
            part = self.codes[start : start + step]
            slab, product = wide[: len(part)], products[:, : len(part)]
            slab.copy_(part)
            torch.mm(q, slab.T, out=product)  # into a contiguous block: BLAS writes it directly
            out[:, start : start + len(part)] = product

    def _signs(self, bits: Any) -> Any:
        """Packed bits as ±1 int8 codes (``[rows, 8 * bytes]``; the last byte's padding bits 0)."""
        torch = self.torch
        unpacked = (bits.unsqueeze(-1) >> self.shifts) & 1
        signs = unpacked.reshape(len(bits), -1).to(torch.int8) * 2 - 1
        if self.dim % 8:
            signs[:, self.dim :] = 0
        return signs

    def _integer(self, queries: np.ndarray, out: Any) -> None:
        """int8 codes, or binary codes as ±1 int8 codes, multiplied by ``torch._int_mm`` (int32 sums)."""
        torch = self.torch
        codes = _tensor(encode(queries, self.storage, self.ranges)).to(self.device)
        if self.storage == "binary":
            q = self._signs(codes)
        else:
            q = torch.nn.functional.pad(codes, (0, -self.dim % 8)) if self.dim % 8 else codes
        b = len(q)
        rows = max(32, b + -b % 8)  # _int_mm wants more than 16 query rows (cuBLASLt)
        if rows != b:
            q = torch.nn.functional.pad(q, (0, 0, 0, rows - b))
        for start in range(0, self.n, self.slab):
            part = self.codes[start : start + self.slab]
            if self.storage == "binary":
                part = self._signs(part)
            m = len(part)
            if m % 8:  # and passage rows of a multiple of 8
                part = torch.nn.functional.pad(part, (0, 0, 0, -m % 8))
            out[:, start : start + m] = torch._int_mm(q, part.T)[:b, :m]  # part.T: column-major, as cuBLASLt wants
