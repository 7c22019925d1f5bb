"""What both ends of a preloaded job share: the frames they exchange, waits that are always bounded,
and what ``/proc`` says of the process at the other end.

A frame is a length (8 bytes, network order) and a pickled value. Every wait for a frame is a
:class:`Wait`: it counts only the time its own process was running (a gap longer than a slice, when
this process was stopped or starved, counts as one slice), and after each ``seconds`` of silence it
asks its ``check`` whether to go on: the check looks at the peer (:func:`progress`) and raises to
stop waiting. Nothing in a job, its server or a server's child blocks on the other end without one.
"""

from __future__ import annotations

import os
import pickle
import select
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from miracl_eval.errors import MiraclEvalError

HEADER = struct.Struct("!Q")
#: seconds of one ``select`` in a wait: how often a wait notices that its own process was stopped
SLICE = 0.25
#: clock ticks a second (``/proc/{pid}/stat`` counts CPU time in them)
_TICKS = os.sysconf("SC_CLK_TCK")


class WorkerError(RuntimeError):
    """An unexpected error in a preloaded child, with the child's traceback as its message."""


class Silent(Exception):
    """The other end said nothing within a wait's bound (the message says what was awaited)."""


class Frozen(Silent):
    """The process at the other end is stopped or makes no progress (``pid``, ``state`` from ``/proc``)."""

    def __init__(self, pid: int, state: str) -> None:
        super().__init__(f"process {pid} is frozen (state {state!r}: stopped, or wedged)")
        self.pid, self.state = pid, state


@dataclass(frozen=True)
class Progress:
    """A process's state letter (``R``, ``S``, ``D``, ``T`` stopped, ``t`` traced, ``Z``) and CPU ticks."""

    state: str
    ticks: int

    @property
    def stopped(self) -> bool:
        return self.state in ("T", "t")


def progress(pid: int) -> Progress | None:
    """What ``/proc/{pid}/stat`` says of a process; None when it is gone (or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    state = fields[0]
    if state in ("Z", "X"):
        return None
    return Progress(state, int(fields[11]) + int(fields[12]))  # utime + stime


def frozen_check(pid: int) -> Callable[[], None]:
    """A :class:`Wait` check that raises :class:`Frozen` when ``pid`` is stopped, or used no CPU since the
    previous check while not running (a stopped, wedged or swapped-out process); :class:`Silent` when it
    is gone. A busy process passes."""
    last = progress(pid)

    def check() -> None:
        nonlocal last
        now = progress(pid)
        if now is None:
            raise Silent(f"process {pid} has ended")
        if now.stopped or (last is not None and now.ticks == last.ticks and now.state != "R"):
            raise Frozen(pid, now.state)
        last = now

    return check


def stopped_check(pid: int) -> Callable[[], None]:
    """A :class:`Wait` check that raises :class:`Frozen` only when ``pid`` is stopped (``T``, ``t``): a
    job's process may use no CPU for long while its children work (Anserini's JVM)."""

    def check() -> None:
        now = progress(pid)
        if now is not None and now.stopped:
            raise Frozen(pid, now.state)

    return check


class Wait:
    """Waits on a socket: every ``seconds`` of this process's running time without data, ``check()``
    (which raises to give up); after ``limit`` such seconds in all, :class:`Silent` with ``what``."""

    def __init__(
        self, seconds: float, check: Callable[[], None] | None = None, limit: float | None = None, what: str = ""
    ) -> None:
        self.seconds, self.check, self.limit, self.what = seconds, check, limit, what
        self.counted = 0.0

    def readable(self, conn: socket.socket) -> None:
        self._until(conn, write=False)

    def writable(self, conn: socket.socket) -> None:
        self._until(conn, write=True)

    def _until(self, conn: socket.socket, write: bool) -> None:
        since_check = 0.0
        while True:
            started = time.monotonic()
            read, written, _ = select.select([] if write else [conn], [conn] if write else [], [], SLICE)
            if read or written:
                return
            waited = min(time.monotonic() - started, SLICE)  # longer: this process was not running
            since_check += waited
            self.counted += waited
            if since_check >= self.seconds:
                since_check = 0.0
                if self.check is not None:
                    self.check()
            if self.limit is not None and self.counted >= self.limit:
                raise Silent(f"{self.what} within {self.limit:g} s" if self.what else f"nothing in {self.limit:g} s")


def send(conn: socket.socket, value: Any, wait: Wait | None = None) -> None:
    """Send a frame. ``wait``: how long to wait while the other end takes none of it (a frame larger than
    the socket's buffer, such as a job's request with a large environment, waits on its reader), and what to
    check meanwhile; None: the socket's own timeout, if any."""
    data = memoryview(HEADER.pack(len(payload := pickle.dumps(value))) + payload)
    if wait is None:
        conn.sendall(data)
        return
    while data:
        try:
            sent = conn.send(data, socket.MSG_DONTWAIT)
        except BlockingIOError:
            wait.writable(conn)
            continue
        data = data[sent:]


def _exact(conn: socket.socket, n: int, wait: Wait | None) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        if wait is not None:
            wait.readable(conn)
        try:
            chunk = conn.recv(min(n - got, 1 << 20))
        except ConnectionError:
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def receive(conn: socket.socket, wait: Wait | None = None) -> Any:
    """The next frame's value; None when the other end closed. ``wait``: how long to wait and what to
    check meanwhile (None: the socket's own timeout, if any)."""
    header = _exact(conn, HEADER.size, wait)
    if header is None:
        return None
    body = _exact(conn, HEADER.unpack(header)[0], wait)
    return None if body is None else pickle.loads(body)


def peer(conn: socket.socket) -> tuple[int, int]:
    """``(pid, uid)`` of the process at the other end of a Unix socket (``SO_PEERCRED``; for a client, the
    process that called ``listen``)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return pid, uid


def portable(err: BaseException) -> BaseException:
    """What goes back to the job: a known error as itself (or its text, if it cannot be pickled), any
    other as a :class:`WorkerError` that carries the child's traceback."""
    import traceback

    if isinstance(err, MiraclEvalError):
        try:
            pickle.loads(pickle.dumps(err))
        except Exception:  # noqa: BLE001
            return MiraclEvalError(str(err))
        return err
    text = "".join(traceback.format_exception(err)).rstrip()
    return WorkerError(f"in the preloaded process:\n{text}")
