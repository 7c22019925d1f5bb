"""The ledger of an API model's requests (every run, every job, failed ones too) and the budget a job keeps to
against it: a job stops before the request that would take recorded spend plus the rest of the plan over
max_usd, over real HTTP against the loopback stub."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from miracl_eval.config.models import resolve_model
from miracl_eval.encoders import openai as api
from miracl_eval.encoders.api_ledger import Ledger, read_ledger
from miracl_eval.errors import ConfigError
from miracl_eval.offline.embeddings_server import EmbeddingsServer, StubModel

KEY_ENV, KEY = "MIRACL_EVAL_TEST_API_KEY", "sk-ledger-0123456789"


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)


def test_lines_are_appended_whole_and_a_torn_one_is_left_out(tmp_path: Path) -> None:
    folder = tmp_path / "ledger"
    first = Ledger(folder, "corpus-sw-00000-00003", "abc", 0.13)
    first.record(1, "ok", 10, 500, 510, 0, 0.5)
    first.close()
    with open(folder / "corpus-sw-00000-00003.jsonl", "ab") as f:
        f.write(b'{"run": "killed mid-write", "tokens": 99')  # a job killed while writing
    again = Ledger(folder, "corpus-sw-00000-00003", "abc", 0.13)  # its next run
    again.record(1, "failed", 10, 500, 0, 3, 9.0, "429 x 3")
    Ledger(folder, "queries-sw", "abc", 0.13).record(1, "ok", 4, 40, 41, 1, 0.1)
    totals = read_ledger(folder)
    assert (totals.requests, totals.failed, totals.retries, totals.inputs, totals.tokens) == (3, 1, 4, 14, 551)
    assert totals.usd == pytest.approx(551 * 0.13 / 1e6) and totals.unreadable == 1
    assert len(totals.jobs) == 2 and len(totals.runs) == 3 and totals.done == {"abc": 540}
    assert read_ledger(tmp_path / "none").requests == 0


def _paid(server: EmbeddingsServer, tmp_path: Path, job: str, plan_tokens: int, **settings) -> api.ApiEncoder:
    plan = tmp_path / "cost_plan.json"
    plan.write_text(json.dumps({"tokens": plan_tokens, "settings": "plan-a"}))
    given = {"family": "openai", "model": "m", "base_url": server.base_url, "api_key_env": KEY_ENV,
             "inputs_per_request": 2, "concurrency": 1, "price_per_million_tokens": 10_000.0, **settings}  # fmt: skip
    run = {"model": "paid", "job": job, "ledger": str(tmp_path / "ledger"), "plan": str(plan)}
    return api.load({**resolve_model("paid", given), "api_run": run})


def test_max_usd_stops_a_job_before_the_request_that_would_pass_it(tmp_path: Path) -> None:
    """$0.01 a token, requests of 10 tokens. An earlier run of another job spent $0.40 (its ledger) and the
    plan has 100 tokens left ($1.00). With max_usd $1.45 the job sends while recorded spend plus the rest of
    the plan stays within it: the plan's 100 tokens, then not the request that would take $1.40 to $1.50.
    With $1.20, nothing is sent."""
    texts = ["www www www www www"] * 40  # 5 tokens each, counted and billed alike
    Ledger(tmp_path / "ledger", "queries-sw", "plan-a", 10_000.0).record(1, "ok", 8, 40, 40, 0, 1.0)
    with EmbeddingsServer(StubModel(8), key=KEY) as server:
        encoder = _paid(server, tmp_path, "corpus-sw-00000-00000", plan_tokens=40 + 100, max_usd=1.45)
        with pytest.raises(ConfigError) as err:
            encoder.encode(texts, "passage")
        assert server.count == 10
        assert err.value.key == "models.paid.max_usd"
        assert ("recorded spend $1.4000 (ledger " in str(err.value) and "$0.1000 for request 11 of "
                "corpus-sw-00000-00000 (2 inputs: text 21 to text 22) and $0.0000 for the rest of the plan (0 of its "
                "140 tokens) would pass max_usd $1.45: stopped before sending it" in str(err.value))  # fmt: skip
        assert read_ledger(tmp_path / "ledger").usd == pytest.approx(1.4)
        # the job run again (its own earlier run's lines count too) with a smaller budget
        tight = _paid(server, tmp_path, "corpus-sw-00000-00000", plan_tokens=40 + 100, max_usd=1.2)
        with pytest.raises(ConfigError, match=r"recorded spend \$1.4000 .* would pass max_usd \$1.2"):
            tight.encode(texts, "passage")
        assert server.count == 10  # not one more


def test_max_usd_is_checked_again_before_a_lost_try_is_sent_again(tmp_path: Path) -> None:
    """$0.01 a token, a plan of two requests of 10 tokens ($0.20) under max_usd $0.25. The first request's
    answer is cut short: its try is charged ($0.10), and sending it again would reach $0.30 with the plan's
    rest, so the job stops there naming the key, the resend and the spend, after one request, not 1 + max_retries."""
    texts = ["www www www www www"] * 4
    with EmbeddingsServer(StubModel(8), key=KEY, faults={1: "cut"}) as server:
        encoder = _paid(server, tmp_path, "corpus-sw-00000-00000", plan_tokens=20, max_usd=0.25)
        with pytest.raises(ConfigError) as err:
            encoder.encode(texts, "passage")
        assert server.count == 1
    assert err.value.key == "models.paid.max_usd"
    assert ("recorded spend $0.1000 (ledger " in str(err.value) and "$0.1000 for request 1 of corpus-sw-00000-00000 "
            "(2 inputs: text 1 to text 2), sent again and $0.1000 for the rest of the plan" in str(err.value))  # fmt: skip
    totals = read_ledger(tmp_path / "ledger")
    assert (totals.requests, totals.failed, totals.charged, totals.unended) == (1, 1, 10, 0)
    assert totals.usd == pytest.approx(0.1)
    # the job's budget agrees with its ledger, nothing left in flight by the check that stopped it
    assert encoder.budget is not None and encoder.budget.in_flight == 0
    assert encoder.budget.own_usd == pytest.approx(totals.usd)


@pytest.mark.parametrize("cut", ["cut", "interrupt"])
def test_the_budget_counts_a_lost_try_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut: str) -> None:
    """A lost try (an answer cut short; an interrupt while the request is out, the job then run again) is
    charged once: the job's budget equals its ledger's dollars, and a budget of exactly the plan plus the lost
    try sends the whole plan (a try counted twice would stop it before its last request)."""
    texts = ["www www www www www"] * 4  # two requests of 10 tokens, $0.10 each
    with EmbeddingsServer(StubModel(8), key=KEY, faults={1: "cut"} if cut == "cut" else {}) as server:
        encoder = _paid(server, tmp_path, "corpus-sw-00000-00000", plan_tokens=20, max_usd=0.30)
        assert encoder.budget is not None
        if cut == "cut":
            assert encoder.encode(texts, "passage").dense.shape == (4, 8)
            assert server.count == 3
        else:
            post = encoder._post

            class Interrupt(BaseException):  # as KeyboardInterrupt is (pytest's own handling of it left out)
                pass

            def interrupted(*args):
                monkeypatch.setattr(encoder, "_post", post)
                raise Interrupt

            monkeypatch.setattr(encoder, "_post", interrupted)
            with pytest.raises(Interrupt):
                encoder.encode(texts[:2], "passage")
            assert encoder.budget.in_flight == 0 and encoder.budget.own_usd == pytest.approx(0.1)
            again = _paid(server, tmp_path, "corpus-sw-00000-00000", plan_tokens=20, max_usd=0.30)  # run again
            assert again.encode(texts, "passage").dense.shape == (4, 8)
            assert again.budget is not None and again.budget.own_usd == pytest.approx(0.2)  # its own run's
    totals = read_ledger(tmp_path / "ledger")
    assert (totals.charged, totals.tokens, totals.usd) == (10, 20, pytest.approx(0.3))
    if cut == "cut":
        assert encoder.budget.in_flight == 0 and encoder.budget.own_usd == pytest.approx(totals.usd)


def test_a_budget_that_covers_the_plan_sends_everything(tmp_path: Path) -> None:
    texts = ["www www www www www"] * 10
    with EmbeddingsServer(StubModel(8), key=KEY) as server:
        encoder = _paid(server, tmp_path, "queries-sw", plan_tokens=50, max_usd=0.5)
        assert encoder.encode(texts, "passage").dense.shape == (10, 8)
    assert read_ledger(tmp_path / "ledger").usd == pytest.approx(0.5)


def test_a_reservation_is_charged_until_its_end_line_settles_it(tmp_path: Path) -> None:
    """A request's reservation (written before it goes out) counts at its counted tokens; its end line replaces
    it with what was billed and charged; a reservation of another run or request is not settled by it."""
    folder = tmp_path / "ledger"
    ledger = Ledger(folder, "corpus-sw-00000-00000", "abc", 1e6)  # $1 a token
    ledger.reserve(1, 100)
    ledger.reserve(2, 40)
    totals = read_ledger(folder)
    assert (totals.requests, totals.unended, totals.usd) == (0, 2, pytest.approx(140.0))
    ledger.record(1, "ok", 3, 100, 90, 0, 0.2)
    totals = read_ledger(folder)
    assert (totals.requests, totals.unended, totals.tokens, totals.usd) == (1, 1, 90, pytest.approx(130.0))
    later = Ledger(folder, "corpus-sw-00000-00000", "abc", 1e6)  # the job's next run: its request 2 is another
    later.reserve(2, 40)
    later.record(2, "failed", 3, 40, 0, 1, 5.0, "a timeout", charged=40)
    totals = read_ledger(folder)  # the first run's request 2 stays charged (its job was killed while it was out)
    assert (totals.requests, totals.unended, totals.charged, totals.usd) == (2, 1, 40, pytest.approx(170.0))


JOB = """
import os, sys
from miracl_eval.config.models import resolve_model
from miracl_eval.encoders import openai as api
url, ledger = sys.argv[1:3]
given = {"family": "openai", "model": "m", "base_url": url, "api_key_env": "MIRACL_EVAL_TEST_API_KEY",
         "inputs_per_request": 2, "concurrency": 1, "price_per_million_tokens": 10_000.0}
run = {"model": "paid", "job": "corpus-sw-00000-00000", "ledger": ledger}
api.load({**resolve_model("paid", given), "api_run": run}).encode(["www www www www www"] * 6, "passage")
"""


@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGTERM"])
def test_a_job_killed_while_a_request_is_out_is_charged_for_it(tmp_path: Path, signal_name: str) -> None:
    """The server holds the second request; the job is killed (SIGTERM: a cluster's time limit or Snakemake
    stopping; SIGKILL: a lost node, an out-of-memory kill): the request, which the provider may bill, stays in
    the ledger at its counted tokens, and the next run of any job counts it against max_usd."""
    import os
    import signal
    import subprocess
    import sys
    import time

    folder = tmp_path / "ledger"
    with EmbeddingsServer(StubModel(8), key=KEY, faults={2: "hang"}) as server:
        env = {**os.environ, KEY_ENV: KEY}
        proc = subprocess.Popen([sys.executable, "-c", JOB, server.base_url, str(folder)], env=env)
        deadline = time.monotonic() + 60
        while server.count < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert server.count == 2, proc.poll()
        time.sleep(0.2)  # the request is out, its reservation written before it was sent
        proc.send_signal(getattr(signal, signal_name))
        assert proc.wait(timeout=30) != 0
        totals = read_ledger(folder)
        # request 1: 10 tokens billed; request 2: its 10 counted tokens reserved, never settled
        assert totals.usd == pytest.approx(0.2) and totals.tokens == server.billed == 10
        assert (totals.requests, totals.unended) == (1, 1)
        encoder = _paid(server, tmp_path, "queries-sw", plan_tokens=10, max_usd=0.25)
        with pytest.raises(ConfigError, match=r"recorded spend \$0\.2000 .* would pass max_usd \$0\.25"):
            encoder.encode(["www www www www www"] * 2, "passage")
        assert server.count == 2
