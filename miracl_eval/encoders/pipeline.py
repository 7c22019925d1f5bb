"""The host side of encoding, arranged so that a GPU never waits for it.

Three kinds of threads work on a stream of *windows* (chunks of texts, each with a key the caller
gets back):

* the **planner** (one thread) prepares each window's texts and tokenizes them, slice by slice,
  each slice on ``workers`` threads of the tokenizers library's own (Rust, without the GIL: its
  ``TOKENIZERS_PARALLELISM`` and ``RAYON_NUM_THREADS``, set when the pipeline starts; Python threads
  calling the tokenizer would contend for the GIL with the rest of the pipeline), sorts the window's
  texts by length and cuts them into batches by a *token budget*: a batch holds as many of the longest remaining texts as fit ``token_budget`` padded
  tokens (at most ``max_rows``), so short queries come in large batches and 8,000-token passages
  in small ones. On CUDA it also pins each batch's ids. It runs ahead of the model by a bounded
  number of batches, across window boundaries;
* the **model thread** moves each batch to the device, runs the family's forward pass and starts
  the copy of its outputs back to pinned host memory, then goes on with the next batch: it never
  waits for a window to be finished or written;
* the **caller's thread** takes the batches' outputs, turns them into arrays and per-text rows
  (BGE-M3's lexical weights, vectorised), places them in their window's input order, and gets each
  window back as soon as its last batch is done, to write it (Parquet) while the model runs on.

An error in any thread stops the others and is raised in the caller's thread. The outputs do not
depend on the budget, the row cap or the number of workers beyond float rounding of batch shapes
(the same token ids, the same texts in the same order).
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from miracl_eval.encoders.kinds import DENSE, Role

if TYPE_CHECKING:  # torch is imported by the threads that use it (the encoders import it anyway)
    import torch

K = TypeVar("K")

#: texts tokenized per call of a tokenizer thread (bounds the tokenizer's own peak memory)
TOKENIZE_SLICE = 256
#: batches the planner may be ahead of the model; batches whose outputs may wait for the caller
PLANNED_AHEAD, DONE_AHEAD = 64, 8
#: seconds between checks for a stopped pipeline while a queue is full or empty
_POLL = 0.1


@dataclass(frozen=True)
class HostSettings:
    """How texts are batched and tokenized (documented in the config schema's ``encoder`` section)."""

    #: padded tokens per batch: rows x the longest row's tokens
    token_budget: int = 32768
    #: texts per batch at most
    max_rows: int = 256
    #: tokenizer threads (the tokenizers library's, per call)
    workers: int = 1
    #: texts tokenized, sorted and batched together (a window; the caller's chunks are cut to it)
    window: int = 4096

    def __post_init__(self) -> None:
        for name in ("token_budget", "max_rows", "workers", "window"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be positive, not {getattr(self, name)}")


@dataclass
class Batch:
    """One encoded batch, in the batch's (length-sorted) order; tensors stay on the model's device."""

    positions: np.ndarray  # the batch rows' indices in the encoded text list
    input_ids: np.ndarray  # int64 [B, L], right-padded
    lengths: np.ndarray  # int64 [B], tokens including special ones
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # float32 outputs of the family's forward
    ready: Any = None  # a CUDA event marking the end of the copies started by the encoder's start_host_copy

    def wait(self) -> None:
        """Block until the batch's tensors have reached the host (no-op when they were computed there)."""
        if self.ready is not None:
            self.ready.synchronize()
            self.ready = None


class BatchEncoder(Protocol):
    """What the pipeline asks of an encoder (:class:`miracl_eval.encoders.base.TransformerEncoder` is one):
    its texts prepared, tokenized and padded, a batch run on its device and copied back, the rows of a
    non-dense output."""

    dim: int | None
    suffix_ids: tuple[int, ...]
    device: torch.device

    def max_length(self, role: Role) -> int: ...

    def prime_tokenizer(self, max_length: int) -> None: ...

    def token_ids(self, texts: list[str], max_length: int) -> list[list[int]]: ...

    def prepare(self, texts: Sequence[str], role: Role) -> list[str]: ...

    def pad(self, lists: Sequence[list[int]]) -> tuple[np.ndarray, np.ndarray]: ...

    def run_batch(
        self, positions: np.ndarray, ids: torch.Tensor, lengths: np.ndarray, kinds: Sequence[str]
    ) -> Batch: ...

    def start_host_copy(self, batch: Batch) -> None: ...

    def rows(self, kind: str, batch: Batch) -> list[Any]: ...


@dataclass
class Timings:
    """Seconds each part of the pipeline was busy (for benchmarks and the job's log): tokenizing (the
    wall time of the tokenizer's calls, each on ``workers`` threads), the planner's other work
    (preparing, padding, batching, pinning), the model thread's, and the caller's (placing outputs,
    and whatever it does with a window before it asks for the next, such as writing it)."""

    tokenize: float = 0.0
    plan: float = 0.0
    model: float = 0.0
    caller: float = 0.0
    texts: int = 0
    batches: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_tokenize(self, seconds: float) -> None:
        with self._lock:
            self.tokenize += seconds

    def per_text_ms(self) -> dict[str, float]:
        n = max(1, self.texts)
        return {k: 1000 * getattr(self, k) / n for k in ("tokenize", "plan", "model", "caller")}


def plan_batches(lengths: np.ndarray, token_budget: int, max_rows: int) -> list[np.ndarray]:
    """The batches of a window: positions, longest texts first (stable), each batch as many rows as
    fit ``token_budget`` padded tokens (at least one, at most ``max_rows``)."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    batches = []
    start = 0
    while start < len(order):
        width = max(1, int(lengths[order[start]]))
        rows = max(1, min(max_rows, token_budget // width))
        batches.append(order[start : start + rows])
        start += rows
    return batches


@dataclass
class _Window[K]:
    key: K
    size: int


@dataclass
class _End:
    pass


@dataclass
class _Failed:
    error: BaseException


class _Stopped(Exception):
    """The pipeline was stopped: a thread leaves quietly."""


class _Pipeline:
    def __init__(self) -> None:
        self.stop = threading.Event()

    def put(self, q: queue.Queue, item: Any) -> None:
        while True:
            if self.stop.is_set():
                raise _Stopped
            try:
                q.put(item, timeout=_POLL)
                return
            except queue.Full:
                continue

    def get(self, q: queue.Queue) -> Any:
        while True:
            if self.stop.is_set():
                raise _Stopped
            try:
                return q.get(timeout=_POLL)
            except queue.Empty:
                continue


def _window_source[K](
    chunks: Iterable[tuple[K, Sequence[str]]], window: int
) -> Iterator[tuple[K, Sequence[str], bool]]:
    """The caller's chunks cut to at most ``window`` texts: (key, texts, last piece of its chunk)."""
    for key, texts in chunks:
        if len(texts) == 0:
            yield key, texts, True
        for start in range(0, len(texts), window):
            yield key, texts[start : start + window], start + window >= len(texts)


def encode_stream[K](
    encoder: BatchEncoder,
    chunks: Iterable[tuple[K, Sequence[str]]],
    role: Role,
    kinds: Sequence[str],
    settings: HostSettings,
    timings: Timings | None = None,
    progress: Callable[[int], None] | None = None,
) -> Iterator[tuple[K, dict[str, Any]]]:
    """Encode the texts of each ``(key, texts)`` chunk as ``role``; yields ``(key, outputs)`` in
    chunk order, ``outputs`` as :meth:`miracl_eval.encoders.base.TransformerEncoder.encode_outputs` gives them (a float32 array
    for dense, a list per text otherwise). ``chunks`` is read in the planner thread, so reading and
    checking input happens there too (its errors reach the caller). ``timings``: filled in as it runs;
    ``progress``: called with each batch's number of texts once its outputs are in."""
    max_length = encoder.max_length(role)
    cut = max_length - len(encoder.suffix_ids)
    encoder.prime_tokenizer(cut)  # the one-time probe of the tokenizer's fast path, before threads share it
    cuda = encoder.device.type == "cuda"
    clock = Timings() if timings is None else timings
    pipe = _Pipeline()

    def tokenize(texts: list[str]) -> list[list[int]]:
        started = time.perf_counter()
        ids = encoder.token_ids(texts, cut)
        clock.add_tokenize(time.perf_counter() - started)
        return ids

    planned: queue.Queue = queue.Queue(PLANNED_AHEAD)
    done: queue.Queue = queue.Queue(DONE_AHEAD)

    def plan() -> None:
        import torch

        for key, texts, last in _window_source(chunks, settings.window):
            started = time.perf_counter()
            prepared = encoder.prepare(texts, role)
            slices = [prepared[s : s + TOKENIZE_SLICE] for s in range(0, len(prepared), TOKENIZE_SLICE)]
            tokenizing = time.perf_counter()
            lists = [ids for part in slices for ids in tokenize(part)]
            busy = time.perf_counter() - tokenizing
            ids, lengths = encoder.pad(lists)
            window = [(pos, lengths[pos]) for pos in plan_batches(lengths, settings.token_budget, settings.max_rows)]
            batches = []
            for pos, blen in window:
                bids = torch.from_numpy(np.ascontiguousarray(ids[pos, : int(blen.max())]))
                batches.append((pos, bids.pin_memory() if cuda else bids, blen))
            clock.plan += time.perf_counter() - started - busy
            clock.texts += len(prepared)
            clock.batches += len(batches)
            pipe.put(planned, _Window(key, len(prepared)))
            for batch in batches:
                pipe.put(planned, batch)
            if last:
                pipe.put(planned, _End())
        pipe.put(planned, None)

    def run_model() -> None:
        import torch

        with torch.inference_mode():
            while True:
                item = pipe.get(planned)
                if item is None or isinstance(item, (_Window, _End)):
                    pipe.put(done, item)
                    if item is None:
                        return
                    continue
                pos, bids, blen = item
                started = time.perf_counter()
                batch = encoder.run_batch(pos, bids, blen, kinds)
                encoder.start_host_copy(batch)
                clock.model += time.perf_counter() - started
                pipe.put(done, batch)

    threads = [
        threading.Thread(target=_guarded(pipe, done, plan), name="encode-planner", daemon=True),
        threading.Thread(target=_guarded(pipe, done, run_model), name="encode-model", daemon=True),
    ]
    # the tokenizer's threads: its pool is made at its first parallel call, of RAYON_NUM_THREADS threads
    # (a value set before, by the user or an earlier call in this process, stays)
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if settings.workers > 1 else "false"
    os.environ.setdefault("RAYON_NUM_THREADS", str(settings.workers))
    for thread in threads:
        thread.start()
    try:
        pieces: dict[str, list[Any]] = {kind: [] for kind in kinds}
        out: dict[str, Any] = {}
        key: Any = None
        size = filled = 0
        while True:
            item = _take(done, threads[1])
            started = time.perf_counter()
            if isinstance(item, _Failed):
                raise item.error
            if item is None:
                return
            if isinstance(item, _Window):
                key, size, filled = item.key, item.size, 0
                out = {kind: np.zeros((size, encoder.dim or 0), dtype=np.float32) if kind == DENSE else [None] * size
                       for kind in kinds}  # fmt: skip
            elif isinstance(item, _End):
                joined = _joined(pieces, kinds, encoder.dim)
                clock.caller += time.perf_counter() - started
                handed = time.perf_counter()
                yield key, joined
                clock.caller += time.perf_counter() - handed  # the caller's own work on the window
                pieces = {kind: [] for kind in kinds}
                continue
            else:
                item.wait()
                for kind in kinds:
                    if kind == DENSE:
                        out[kind][item.positions] = item.tensors[kind].cpu().numpy()
                    else:
                        for p, row in zip(item.positions, encoder.rows(kind, item), strict=True):
                            out[kind][p] = row
                filled += len(item.positions)
                if progress is not None:
                    progress(len(item.positions))
            if filled == size:  # the window is complete (an empty one at once)
                for kind in kinds:
                    pieces[kind].append(out[kind])
                size = -1
            clock.caller += time.perf_counter() - started
    finally:
        pipe.stop.set()
        for thread in threads:
            thread.join()


def _guarded(pipe: _Pipeline, done: queue.Queue, work: Any) -> Any:
    """``work`` for a pipeline thread: a stopped pipeline ends it quietly; an error stops the pipeline
    and goes to the caller's thread."""

    def run() -> None:
        try:
            work()
        except _Stopped:
            return
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
            pipe.stop.set()
            _hand_over(done, _Failed(err))

    return run


def _hand_over(q: queue.Queue, item: Any) -> None:
    """Put an error for the caller even when the queue is full (dropping what it holds)."""
    while True:
        try:
            q.put_nowait(item)
            return
        except queue.Full:
            with contextlib.suppress(queue.Empty):
                q.get_nowait()


def _take(q: queue.Queue, model_thread: threading.Thread) -> Any:
    """The next item for the caller; the model thread puts the last one (or an error) before it ends."""
    while True:
        try:
            return q.get(timeout=_POLL)
        except queue.Empty:
            if not model_thread.is_alive() and q.empty():
                raise RuntimeError("the encoding pipeline stopped without a result") from None


def _joined(pieces: dict[str, list[Any]], kinds: Sequence[str], dim: int | None) -> dict[str, Any]:
    joined: dict[str, Any] = {}
    for kind in kinds:
        if kind == DENSE:
            parts = pieces[kind]
            joined[kind] = np.concatenate(parts) if parts else np.zeros((0, dim or 0), dtype=np.float32)
        else:
            joined[kind] = [row for part in pieces[kind] for row in part]
    return joined


def collect(
    encoder: BatchEncoder, texts: Sequence[str], role: Role, kinds: Sequence[str], settings: HostSettings
) -> dict[str, Any]:
    """The outputs of one list of texts (:func:`encode_stream` over a single chunk)."""
    for _, outputs in encode_stream(encoder, [(None, texts)], role, kinds, settings):
        return outputs
    raise AssertionError("unreachable: one chunk gives one result")
