"""A job's pace (its share of the provider's limits, the provider's headers and Retry-After), on a clock of
the test's own: when each request may go, not how long anything took."""

from __future__ import annotations

import threading

import pytest

from miracl_eval.encoders.api_pace import BURST_SECONDS, Pace, TooLong, duration_seconds, retry_after


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_share_of_the_limit_spreads_requests_at_its_rate() -> None:
    """60,000 tokens a minute shared by 2 jobs: 500 tokens a second each. The bucket holds BURST_SECONDS of
    it (1,000 tokens): a request of 1,000 goes at once, then one every 2 s; one of 5,000 waits until 5,000
    have come (10 s), never sent ahead of its budget."""
    clock = Clock()
    pace = Pace(60_000, None, share=2, clock=clock)
    assert BURST_SECONDS * 500 == 1000
    starts = [pace.reserve(1000) - clock.now for _ in range(4)]
    assert starts == pytest.approx([0.0, 2.0, 4.0, 6.0])
    assert pace.reserve(5000) - clock.now == pytest.approx(16.0)
    clock.now += 100  # idle: the bucket is full again, and holds no more than BURST_SECONDS
    assert [pace.reserve(1000) - clock.now for _ in range(2)] == pytest.approx([0.0, 2.0])
    assert pace.describe() == "30,000 tokens a minute"


def test_tokens_and_requests_both_bind() -> None:
    clock = Clock()
    pace = Pace(6_000_000, 60, clock=clock)  # tokens plenty, one request a second
    starts = [pace.reserve(10) - clock.now for _ in range(5)]
    assert starts[-1] - starts[-2] == pytest.approx(1.0)


def test_the_providers_headers_pause_every_request() -> None:
    """Fewer tokens left than the last request took: a pause until that many are back at the limit's rate,
    or until the reset when the limit is not said."""
    clock = Clock()
    pace = Pace(None, None, clock=clock)
    assert pace.observe({"x-ratelimit-remaining-tokens": "5000", "x-ratelimit-reset-tokens": "2s"}, 1000) == 0
    assert pace.observe({"x-ratelimit-remaining-tokens": "500", "x-ratelimit-reset-tokens": "1m30s"}, 1000) == 90
    assert pace.reserve(10) == clock.now + 90
    said = {
        "x-ratelimit-limit-tokens": "60000",
        "x-ratelimit-remaining-tokens": "500",
        "x-ratelimit-reset-tokens": "59s",
    }
    assert pace.observe(said, 1500) == pytest.approx(1.0)  # 1,000 more at 1,000 a second
    assert pace.observe({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "120ms"}, 1) == 0.12


def test_a_pause_past_the_deadline_is_refused_at_once() -> None:
    clock = Clock()
    pace = Pace(None, None, clock=clock)
    pace.hold(86_400)
    with pytest.raises(TooLong) as err:
        pace.wait_turn(10, threading.Event(), deadline=clock.now + 1800)
    assert err.value.why == "the provider asked for a pause" and err.value.seconds == 86_400
    slow = Pace(1000, None, clock=clock)  # a request of 300,000 tokens at 1,000 a minute: 5 hours
    slow.reserve(300_000)
    with pytest.raises(TooLong, match=r"the pace \(1,000 tokens a minute\)"):
        slow.wait_turn(10, threading.Event(), deadline=clock.now + 1800)


def test_a_pause_moves_the_whole_schedule() -> None:
    """Paused for 10 s: the requests after it keep their order and spacing, 10 s later (no burst of what was
    held back), and the budget gains nothing meanwhile."""
    clock = Clock()
    pace = Pace(30_000, None, clock=clock)  # 500 tokens a second, 1,000 held
    assert [pace.reserve(1000) - clock.now for _ in range(2)] == pytest.approx([0.0, 2.0])
    pace.hold(10)
    assert [pace.reserve(1000) - clock.now for _ in range(2)] == pytest.approx([14.0, 16.0])
    assert pace.held == 10


def test_a_request_sent_again_takes_no_more_budget() -> None:
    clock = Clock()
    pace = Pace(60_000, None, clock=clock)  # 1,000 tokens a second, 2,000 held
    assert pace.reserve(2000) == clock.now
    assert pace.wait_turn(2000, threading.Event(), again=True)  # the same request after a 429: at once
    assert pace.reserve(1000) == clock.now + 1


def test_a_stop_ends_a_wait() -> None:
    pace = Pace(None, None)
    pace.hold(3600)
    stop = threading.Event()
    stop.set()
    assert pace.wait_turn(1, stop) is False


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("6m0s", 360),
        ("1.5s", 1.5),
        ("120ms", 0.12),
        ("1h2m", 3720),
        ("20", 20),
        ("2.5", 2.5),
        ("soon", None),
        ("-1", None),
        ("nan", None),
        (None, None),
    ],  # fmt: skip
)
def test_durations_as_providers_write_them(value, seconds) -> None:
    assert duration_seconds(value) == (pytest.approx(seconds) if seconds is not None else None)


def test_retry_after_in_its_three_forms() -> None:
    assert retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after({"retry-after": "86400"}) == 86_400
    assert retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=lambda: 1445412480.0 - 60) == 60
    assert retry_after({}) is None and retry_after({"retry-after": "later"}) is None
