"""What an embeddings API model's jobs sent and spent, request by request: the model's *ledger*, and the
budget (``max_usd``) that a job checks against it before each request.

The ledger is a folder beside the model's encodings (``PATHS["api_ledger"]``) holding one append-only
JSON-lines file per job (``corpus-sw-00000-00003.jsonl``, ``queries-sw.jsonl``): one writer per file, so
that it holds on any file system a cluster shares (appends from several nodes to one file do not).
Each line is one ``write`` (a line torn by a kill is ended before the next one is appended, and left out
by the readers). Before a request goes out, its job appends a *reservation* (``status`` ``sent``): the
request's number and the tokens it counted, charged in ``usd`` until the request ends. When it ends,
answered or not, the job appends its *end line*: when, which run and job, the request's number, its
``status`` (``ok``; ``refused``: a 400; ``failed``: no answer; ``bad answer``), ``inputs``, ``counted``
(the tokens the client counted, as the plan counts them), ``tokens`` (the API's own count of what it
billed; the client's count when it gives none), ``charged`` (tokens of the tries whose answer was lost:
a timeout, a dropped connection, a body cut short, a 408 or a gateway's 5xx, each charged at the counted
tokens, since the provider may have billed it), ``usd`` (``tokens + charged`` at the price), the
``retries`` the request took, its seconds, and the plan's ``settings`` (a digest of what is sent). An end line settles the
request's reservations; a reservation never settled (a job killed, SIGKILL or a node lost, while the
request was out) stays charged at its counted tokens. So the recorded spend is never less than what was
billed, whenever a job stops, when the tokens are counted as the provider counts them (the model's
tokenizer; characters / 4 without one can be less). Each line is ``fsync``-ed before the request goes out. Never the key, nor the base URL. Re-runs append; nothing is truncated.

**The budget.** Before each request a job checks that the model's recorded spend (every line of every
job's file, every run, failed ones too), plus what it has in flight, plus this request, plus what the
plan says is still to send (the plan's tokens less those of the answered requests of the plan's
settings) stays within ``max_usd``; if not, it stops there with a :class:`ConfigError` naming
``models.<name>.max_usd``, the spend so far and the plan. A try whose answer was lost is charged at once,
and the check is made again before it is sent again. Other jobs' lines are read again every
:data:`REFRESH_SECONDS` (only what was appended).
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from miracl_eval.errors import ConfigError
from miracl_eval.types import PathLike

#: seconds between two readings of the other jobs' ledger files by a job's budget
REFRESH_SECONDS = 30.0
SUFFIX = ".jsonl"
#: the status of a reservation line (written before a request is sent)
SENT = "sent"


def job_name(wildcards: Mapping[str, str]) -> str:
    """The name in the ledger of the encoding job of ``wildcards``: a corpus block's (``corpus-sw-00000-00003``)
    or a partition's queries' (``queries-sw``)."""
    if "block" in wildcards:
        return f"corpus-{wildcards['corpus']}-{wildcards['block']}"
    return f"queries-{wildcards['part']}"


def job_file(folder: PathLike, job: str) -> Path:
    """The ledger file of ``job`` in ``folder``."""
    return Path(folder) / (re.sub(r"[^A-Za-z0-9._-]+", "_", job) + SUFFIX)


class Ledger:
    """A job's ledger file, appended to line by line (thread-safe)."""

    def __init__(self, folder: PathLike, job: str, settings: str, price_per_million: float) -> None:
        self.path = job_file(folder, job)
        self.job, self.settings, self.price = job, settings, price_per_million
        self.run = f"{socket.gethostname()}:{os.getpid()}:{time.strftime('%Y%m%dT%H%M%S')}:{uuid.uuid4().hex[:6]}"
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        size = os.fstat(self._fd).st_size
        if size:  # a line torn by a kill: end it, so that the next line stands alone
            with open(self.path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    os.write(self._fd, b"\n")

    def _usd(self, tokens: int) -> float:
        return round(tokens * self.price / 1e6, 9)

    def reserve(self, request: int, counted: int) -> dict[str, Any]:
        """Append request ``request``'s reservation (before it is sent): ``counted`` tokens charged until
        its end line settles them."""
        return self._append(request, SENT, counted=counted, usd=self._usd(counted))

    def record(
        self,
        request: int,
        status: str,
        inputs: int,
        counted: int,
        tokens: int,
        retries: int,
        seconds: float,
        note: str = "",
        charged: int = 0,
    ) -> dict[str, Any]:
        """Append one request's end line (settling its reservations); returns it."""
        fields: dict[str, Any] = {
            "inputs": inputs,
            "counted": counted,
            "tokens": tokens,
            "charged": charged,
            "usd": self._usd(tokens + charged),
            "retries": retries,
            "seconds": round(seconds, 3),
        }
        return self._append(request, status, **fields, **({"note": note} if note else {}))

    def _append(self, request: int, status: str, **fields: Any) -> dict[str, Any]:
        """One line: when, which run and job, the request and its status, ``fields``, the plan's settings."""
        line = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "run": self.run, "job": self.job,
                "request": request, "status": status, **fields, "settings": self.settings}  # fmt: skip
        self._write(line)
        return line

    def _write(self, line: Mapping[str, Any]) -> None:
        data = (json.dumps(line, ensure_ascii=True) + "\n").encode()
        with self._lock:
            written = os.write(self._fd, data)
            while written < len(data):  # pragma: no cover - a full disk
                written += os.write(self._fd, data[written:])
        os.fsync(self._fd)  # on the file server before the request goes out (a node lost loses no line)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


@dataclass
class Totals:
    """A ledger summed: requests (end lines), those not answered ``ok``, retries, inputs and tokens of the
    answered ones, tokens charged for lost answers, dollars of all (the reservations not settled too), the
    jobs and runs seen, and the lines that could not be read."""

    requests: int = 0
    failed: int = 0
    retries: int = 0
    inputs: int = 0
    tokens: int = 0
    charged: int = 0
    ended_usd: float = 0.0
    jobs: set[str] = field(default_factory=set)
    runs: set[str] = field(default_factory=set)
    unreadable: int = 0
    done: dict[str, int] = field(default_factory=dict)  # counted tokens answered, per plan settings
    #: reservations not settled by an end line: (run, job, request) -> dollars (requests out, or cut off by a kill)
    open: dict[tuple[str, str, int], float] = field(default_factory=dict)

    @property
    def usd(self) -> float:
        """Every end line's dollars, and the reservations no end line settled."""
        return self.ended_usd + sum(self.open.values())

    @property
    def unended(self) -> int:
        """Requests sent whose end is not recorded (in flight, or their job killed while they were out)."""
        return len(self.open)

    def add(self, line: Mapping[str, Any]) -> None:
        key = (str(line.get("run")), str(line.get("job")), int(line.get("request") or 0))
        self.jobs.add(str(line.get("job")))
        self.runs.add(str(line.get("run")))
        if line.get("status") == SENT:
            self.open[key] = self.open.get(key, 0.0) + float(line.get("usd") or 0.0)
            return
        self.open.pop(key, None)
        self.requests += 1
        self.retries += int(line.get("retries") or 0)
        self.ended_usd += float(line.get("usd") or 0.0)
        self.charged += int(line.get("charged") or 0)
        if line.get("status") == "ok":
            self.inputs += int(line.get("inputs") or 0)
            self.tokens += int(line.get("tokens") or 0)
            plan = str(line.get("settings") or "")
            self.done[plan] = self.done.get(plan, 0) + int(line.get("counted") or 0)
        else:
            self.failed += 1
            self.tokens += int(line.get("tokens") or 0)  # a bad answer that said what it billed


class Reader:
    """Reads a ledger folder's files, each only from where the last reading stopped (whole lines)."""

    def __init__(self, folder: PathLike, skip: Iterable[PathLike] = (), only: PathLike | None = None) -> None:
        self.folder = Path(folder)
        self.skip = {Path(p).name for p in skip}
        self.only = Path(only).name if only is not None else None
        self.offsets: dict[str, int] = {}
        self.totals = Totals()

    def refresh(self) -> Totals:
        if not self.folder.is_dir():
            return self.totals
        for path in sorted(self.folder.glob(f"*{SUFFIX}")):
            if path.name in self.skip or (self.only is not None and path.name != self.only):
                continue
            start = self.offsets.get(path.name, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(start)
                    data = f.read()
            except OSError:
                continue
            end = data.rfind(b"\n") + 1  # a line still being written is read next time
            for raw in data[:end].splitlines():
                if not raw.strip():
                    continue
                try:
                    line = json.loads(raw)
                    if not isinstance(line, dict):
                        raise ValueError("not an object")
                    self.totals.add(line)
                except (ValueError, TypeError):
                    self.totals.unreadable += 1
            self.offsets[path.name] = start + end
        return self.totals


def read_ledger(folder: PathLike) -> Totals:
    """Every line of every job's file in a ledger folder, summed (a missing folder: nothing)."""
    return Reader(folder).refresh()


class Budget:
    """A job's check of ``max_usd`` before each request (thread-safe): :meth:`reserve` before sending,
    :meth:`charge` and :meth:`check` when a try's answer is lost and it is sent again, :meth:`settle` when the
    request ends (with what was billed; lost tries were charged)."""

    def __init__(
        self,
        key: str,
        max_usd: float,
        price_per_million: float,
        plan_tokens: int,
        ledger: Ledger,
        clock: Any = time.monotonic,
    ) -> None:
        self.key, self.max_usd, self.price, self.plan_tokens = key, max_usd, price_per_million, plan_tokens
        self.ledger, self.clock = ledger, clock
        self._lock = threading.Lock()
        mine = Reader(ledger.path.parent, only=ledger.path).refresh()  # this job's earlier runs
        self._mine_then, self._mine_done_then = mine.usd, mine.done.get(ledger.settings, 0)
        self._others = Reader(ledger.path.parent, skip=[ledger.path])
        self._others.refresh()
        self._read_at = clock()
        self.own_usd = 0.0
        self.own_done = 0
        self.in_flight = 0

    def _usd(self, tokens: float) -> float:
        return tokens * self.price / 1e6

    def reserve(self, counted: int, what: str) -> None:
        """Take ``counted`` tokens in flight, or raise :class:`ConfigError` when the recorded spend, what is
        in flight, this request and the rest of the plan would pass ``max_usd`` (nothing is sent then)."""
        with self._lock:
            self._check(counted, what)
            self.in_flight += counted

    def charge(self, tokens: int) -> None:
        """A try of a request in flight went out and its answer was lost: its ``tokens`` are spent now (the
        provider may have billed them)."""
        with self._lock:
            self.own_usd += self._usd(tokens)

    def check(self, counted: int, what: str) -> None:
        """Raise :class:`ConfigError` when sending again a request in flight of ``counted`` tokens would pass
        ``max_usd`` (its lost tries already charged)."""
        with self._lock:
            self.in_flight -= counted
            try:
                self._check(counted, what)
            finally:
                self.in_flight += counted

    def _check(self, counted: int, what: str) -> None:
        if self.clock() - self._read_at >= REFRESH_SECONDS:
            self._others.refresh()
            self._read_at = self.clock()
        others = self._others.totals
        spent = others.usd + self._mine_then + self.own_usd
        done = others.done.get(self.ledger.settings, 0) + self._mine_done_then + self.own_done
        rest = max(0, self.plan_tokens - done - self.in_flight - counted)
        projected = spent + self._usd(self.in_flight + counted + rest)
        if projected > self.max_usd + 1e-9:
            raise ConfigError(
                self.key,
                f"recorded spend ${spent:,.4f} (ledger {self.ledger.path.parent}), ${self._usd(self.in_flight):,.4f}"
                f" in flight, ${self._usd(counted):,.4f} for {what} and ${self._usd(rest):,.4f} for the rest of the "
                f"plan ({rest:,} of its {self.plan_tokens:,} tokens) would pass max_usd ${self.max_usd:g}: stopped "
                "before sending it (raise max_usd to go on; what was received is kept)",
            )

    def settle(self, counted: int, tokens: int, answered: bool) -> None:
        """The request of ``counted`` tokens ended: ``tokens`` billed, its texts embedded if ``answered``."""
        with self._lock:
            self.in_flight -= counted
            self.own_usd += self._usd(tokens)
            if answered:
                self.own_done += counted
