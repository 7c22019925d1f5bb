"""The pace of an embeddings API job: at most its share of the provider's tokens and requests a minute,
and a pause whenever the provider says so.

* **Its share.** A model's ``tokens_per_minute`` and ``requests_per_minute`` are the provider's limits for
  its key; at most ``api_jobs`` of the model's encoding jobs run at once (a Snakemake resource,
  ``rules/encode.smk``), and each keeps to ``1 / api_jobs`` of both limits, with no state shared between
  jobs (so it holds on a cluster, with jobs on several nodes). A request is sent when both budgets hold
  what it costs, as a provider's do: a bucket of :data:`BURST_SECONDS` of the rate (or of one request, if
  larger), full at the start; no burst of a minute's worth, and no request sent ahead of its budget.
* **The provider's word.** After every answer, ``x-ratelimit-remaining-tokens`` below the last request's
  tokens (or ``x-ratelimit-remaining-requests`` at 0) pauses every request of the job until that many
  are back (at the rate of ``x-ratelimit-limit-*``, at most until ``x-ratelimit-reset-*``); a 429's
  ``Retry-After`` (or ``retry-after-ms``, or an HTTP date; however long: the caller bounds it by its
  patience) does too.

Waits are interruptible (``stop``): an error elsewhere in the job ends them at once.
"""

from __future__ import annotations

import email.utils
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping

#: seconds of its rate a bucket holds: what a job may send at once after a pause
BURST_SECONDS = 2.0

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def slot_resources(models: Iterable[str]) -> dict[str, str]:
    """Per API model (by name), the Snakemake resource that holds its encoding jobs to ``api_jobs`` at once:
    ``api_`` and its name, every character but a letter, digit or ``_`` as ``_``, and ``_`` more until it is
    no other model's (``openai-3-small`` -> ``api_openai_3_small``)."""
    names: dict[str, str] = {}
    for model in models:
        name = "api_" + re.sub(r"\W", "_", model)
        while name in names.values():
            name = f"{name}_"
        names[model] = name
    return names


def duration_seconds(value: str | None) -> float | None:
    """A rate-limit header's duration in seconds: ``6m0s``, ``1.5s``, ``120ms``, ``1h2m``, or a plain number of
    seconds; None when absent or not a duration."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        parts = _DURATION.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            return None
        seconds = sum(float(n) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[u] for n, u in parts)
    return seconds if seconds >= 0 and seconds == seconds and seconds != float("inf") else None


def retry_after(headers: Mapping[str, str], now: Callable[[], float] = time.time) -> float | None:
    """Seconds a 429 (or 503) asks to wait: ``retry-after-ms``, else ``Retry-After`` in seconds or as an HTTP
    date; None when neither says."""
    ms = duration_seconds(headers.get("retry-after-ms"))
    if ms is not None:
        return ms / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = duration_seconds(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now())


class _Bucket:
    """A budget of ``rate`` units a second, holding :data:`BURST_SECONDS` of them (or one request's, if larger),
    full at ``since``; a request waits until the bucket holds all it costs, as a provider's does."""

    def __init__(self, rate: float, since: float) -> None:
        self.rate, self.level, self.at = rate, rate * BURST_SECONDS, since

    def level_at(self, t: float, cost: float) -> float:
        return min(max(self.rate * BURST_SECONDS, cost), self.level + (t - self.at) * self.rate)

    def ready(self, cost: float, not_before: float) -> float:
        """The first time from ``not_before`` at which the bucket holds ``cost``."""
        t = max(not_before, self.at)
        return t + max(0.0, cost - self.level_at(t, cost)) / self.rate

    def take(self, cost: float, t: float) -> None:
        self.level, self.at = self.level_at(t, cost) - cost, t


class TooLong(Exception):
    """The next request could be sent only after the caller's deadline (``seconds`` from now; ``why``)."""

    def __init__(self, seconds: float, why: str) -> None:
        super().__init__(f"{why}: {seconds:,.0f} s from now")
        self.seconds, self.why = seconds, why


class Pace:
    """A job's pace (thread-safe): :meth:`wait_turn` before each request, :meth:`observe` after each answer,
    :meth:`hold` on a 429."""

    def __init__(
        self,
        tokens_per_minute: float | None,
        requests_per_minute: float | None,
        share: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        now = clock()
        self._tokens = _Bucket(tokens_per_minute / 60 / share, now) if tokens_per_minute else None
        self._requests = _Bucket(requests_per_minute / 60 / share, now) if requests_per_minute else None
        self._hold_until = 0.0
        self.held = 0.0  # seconds the job's schedule was paused as the provider asked (headers, 429s), summed

    def reserve(self, tokens: int) -> float:
        """When (``clock()`` time, if nothing is paused meanwhile) a request of ``tokens`` may be sent; its
        budget is taken now (requests reserved one after another are sent in that order)."""
        return self._reserve(tokens)[0]

    def _reserve(self, tokens: int) -> tuple[float, float]:
        with self._lock:
            at = max(self.clock(), self._hold_until)
            costs = [(b, n) for b, n in ((self._tokens, tokens), (self._requests, 1)) if b is not None]
            for bucket, n in costs:  # a bucket only fills with time: the latest of these suits them all
                at = max(at, bucket.ready(n, at))
            for bucket, n in costs:
                bucket.take(n, at)
            return at, self.held

    def wait_turn(
        self, tokens: int, stop: threading.Event, deadline: float = float("inf"), again: bool = False
    ) -> bool:
        """Wait until a request of ``tokens`` may be sent (and any pause the provider asked for is over);
        False when ``stop`` was set meanwhile. Raises :class:`TooLong` at once when that is after
        ``deadline`` (``clock()`` time), or becomes so while waiting (a longer pause asked for). ``again``:
        the request was refused (a 429, a 5xx) and is sent again on the budget it took the first time."""
        at, held = (self.clock(), self.held) if again else self._reserve(tokens)
        while True:
            now = self.clock()
            hold = self._hold_until
            if self.held != held:  # the schedule moved by the pauses since
                at, held = at + self.held - held, self.held
            if max(at, hold) > deadline:
                why = "the provider asked for a pause" if hold + 1e-6 >= at else f"the pace ({self.describe()})"
                raise TooLong(max(at, hold) - now, why)
            left = max(at, hold) - now
            if left <= 0:
                return not stop.is_set()
            if stop.wait(min(left, 1.0)):
                return False

    def describe(self) -> str:
        parts = [f"{b.rate * 60:,.0f} {what} a minute" for b, what in ((self._tokens, "tokens"),
                 (self._requests, "requests")) if b is not None]  # fmt: skip
        return " and ".join(parts) or "no limit"

    def hold(self, seconds: float) -> None:
        """Send nothing for ``seconds`` (from now): the job's whole schedule pauses (requests reserved go that
        much later, in the same order and spacing; its budgets gain nothing meanwhile), so that it does not
        send all it held back at once when the pause ends."""
        with self._lock:
            now = self.clock()
            until = now + seconds
            if until > self._hold_until:
                delta = until - max(self._hold_until, now)
                self._hold_until = until
                self.held += delta
                for bucket in (self._tokens, self._requests):
                    if bucket is not None:
                        bucket.at += delta

    def observe(self, headers: Mapping[str, str], last_tokens: int) -> float:
        """Pause as the provider's ``x-ratelimit-*`` headers say (the seconds paused, 0 for none): when fewer
        tokens remain than the last request took (or no request remains), until there are enough again at
        the rate ``x-ratelimit-limit-*`` says, at most until ``x-ratelimit-reset-*`` (when all are back)."""
        pause = 0.0
        for what, need in (("tokens", max(1, last_tokens)), ("requests", 1)):
            remaining = _number(headers.get(f"x-ratelimit-remaining-{what}"))
            if remaining is None or remaining >= need:
                continue
            wait = duration_seconds(headers.get(f"x-ratelimit-reset-{what}")) or 0.0
            limit = _number(headers.get(f"x-ratelimit-limit-{what}"))
            if limit and limit > 0:
                wait = min(wait, (need - remaining) / (limit / 60))
            pause = max(pause, wait)
        if pause > 0:
            self.hold(pause)
        return pause


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
