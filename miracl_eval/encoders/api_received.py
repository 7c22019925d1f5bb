"""Vectors an embeddings API returned, kept as they arrive: what a failed or killed job had been billed for is
not asked for again when it runs again.

While an API job writes an output (a shard's or a partition's queries' vectors, published only whole),
each answered request's vectors are appended to ``{output}.received`` beside it, keyed by a digest of
what was sent (the server, model and ``dimensions``, and the text as sent: prefix, cut), as one record:
``MAGIC``, the count, the dimension, a CRC-32 of the rest, the digests and the float32 vectors. A run of
the job reads the records back (up to the first torn or damaged one, where the file is cut), sends only
the texts whose digest is not there, and removes the file once the output is published.
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
import struct
import threading
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from miracl_eval.types import PathLike

log = logging.getLogger(__name__)

MAGIC = b"MEV1"
_HEADER = struct.Struct("<4sIII")  # magic, count, dimension, crc32 of the body
DIGEST_BYTES = 16
SUFFIX = ".received"


def received_path(output: PathLike) -> Path:
    """The file of received vectors of ``output``."""
    out = Path(output)
    return out.with_name(out.name + SUFFIX)


def text_digest(settings: str, text: str) -> bytes:
    """What a text's vector depends on beyond the server's model: ``settings`` (server, model, dimensions) and
    the text as sent."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=DIGEST_BYTES,
                           key=hashlib.sha256(settings.encode()).digest()[:32]).digest()  # fmt: skip


class Received:
    """The received vectors of one output: :attr:`vectors` (digest → vector) read at opening, :meth:`append`
    as answers come (thread-safe), :meth:`discard` once the output is published."""

    def __init__(self, output: PathLike) -> None:
        self.path = received_path(output)
        self.vectors: dict[bytes, np.ndarray] = {}
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        kept = self._read()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(self._fd).st_size > kept:  # a torn or damaged tail goes (never the mapped records)
            os.ftruncate(self._fd, kept)
        os.lseek(self._fd, 0, os.SEEK_END)
        if self.vectors:
            log.info("%s: %d vectors received by an earlier run of this job, not asked for again", self.path,
                     len(self.vectors))  # fmt: skip

    def _read(self) -> int:
        """Map the good records (their vectors are read from the file only when used: a shard's worth of
        3,072 dimensions is over a gigabyte); the offset after the last one."""
        try:
            with open(self.path, "rb") as f:
                data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (FileNotFoundError, ValueError):  # none, or empty
            return 0
        pos = 0
        while pos + _HEADER.size <= len(data):
            magic, n, dim, crc = _HEADER.unpack_from(data, pos)
            size = n * DIGEST_BYTES + n * dim * 4
            start = pos + _HEADER.size
            if magic != MAGIC or start + size > len(data) or zlib.crc32(data[start : start + size]) != crc:
                log.warning("%s: a torn or damaged record at byte %d: the rest is dropped", self.path, pos)
                break
            vectors = np.frombuffer(data, dtype="<f4", count=n * dim, offset=start + n * DIGEST_BYTES).reshape(n, dim)
            for i in range(n):
                self.vectors[data[start + i * DIGEST_BYTES : start + (i + 1) * DIGEST_BYTES]] = vectors[i]
            pos = start + size
        return pos

    def append(self, digests: Sequence[bytes], vectors: np.ndarray) -> None:
        """Keep one answer's vectors (one ``write``: a kill leaves a record whole or torn, never mixed)."""
        values = np.ascontiguousarray(vectors, dtype="<f4")
        body = b"".join(digests) + values.tobytes()
        record = _HEADER.pack(MAGIC, len(digests), values.shape[1], zlib.crc32(body)) + body
        with self._lock:
            written = os.write(self._fd, record)
            while written < len(record):  # pragma: no cover - a full disk
                written += os.write(self._fd, record[written:])

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def discard(self) -> None:
        """The output is published: its received vectors are no longer needed."""
        self.close()
        self.path.unlink(missing_ok=True)
