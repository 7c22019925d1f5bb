"""Progress a user can see in a job's log: items done of the total, items a second and the time left, at
least every :data:`EVERY` seconds whatever a stage's batches take (a thread of its own says it when no
batch ended in time), and a progress bar on a terminal that moves by batch.

    with Progress(total, "encode shard 3", "passages", log) as progress:
        for batch in ...:
            progress.update(len(batch))
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

#: seconds between two progress lines at most
EVERY = 30.0


def duration(seconds: float) -> str:
    """Seconds in words: ``45 s``, ``16 min``, ``3.2 h``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Progress:
    """Counts a stage's items and logs where it stands (see the module's docstring)."""

    def __init__(
        self,
        total: int | None,
        what: str,
        unit: str,
        logger: logging.Logger,
        every: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total, self.what, self.unit, self.log, self.clock = total, what, unit, logger, clock
        self.every = EVERY if every is None else every
        self.done = 0
        self.started = clock()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar: Any = None

    def __enter__(self) -> Progress:
        self.started = self.clock()
        if sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total, desc=self.what, unit=f" {self.unit}", file=sys.stderr, dynamic_ncols=True
            )
        self._thread = threading.Thread(target=self._beat, name="progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._bar is not None:
            self._bar.close()

    def update(self, n: int) -> None:
        """``n`` more items done (a batch)."""
        with self._lock:
            self.done += n
        if self._bar is not None:
            self._bar.update(n)

    def set(self, done: int) -> None:
        """``done`` items done in all (a count the stage reads from elsewhere, e.g. Anserini's log)."""
        with self._lock:
            step, self.done = done - self.done, done
        if self._bar is not None and step > 0:
            self._bar.update(step)

    def line(self) -> str:
        """Where the stage stands, in words."""
        with self._lock:
            done = self.done
        seconds = max(self.clock() - self.started, 1e-9)
        rate = done / seconds
        text = f"{self.what}: {done:,}"
        if self.total:
            text += f" of {self.total:,} {self.unit} ({100 * done / self.total:.1f} %)"
        else:
            text += f" {self.unit}"
        text += f", {rate:,.1f} {self.unit}/s"
        if self.total and done:
            text += f", about {duration((self.total - done) / rate)} left" if rate > 0 else ""
        elif self.total:
            text += ", time left unknown (no batch done yet)"
        return text

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            self.log.info("%s", self.line())
