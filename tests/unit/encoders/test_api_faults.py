"""An OpenAI-compatible server that misbehaves, over real HTTP on the loopback (the stub of
miracl_eval.offline.embeddings_server with a model that costs nothing: each text's vector drawn from its
hash): every case ends in the right vectors or in one error that names the server and the request (or the
config key); the ledger has a line for every request, failed ones too; billed vectors are kept; the key is
written nowhere."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from miracl_eval.config.models import resolve_model
from miracl_eval.encoders import openai as api
from miracl_eval.encoders.api_ledger import read_ledger
from miracl_eval.encoders.api_received import received_path
from miracl_eval.errors import ConfigError, InputError, MiraclEvalError
from miracl_eval.offline.embeddings_server import EmbeddingsServer, StubModel

KEY_ENV, KEY = "MIRACL_EVAL_TEST_API_KEY", "sk-faults-0123456789abcdef"
MODEL = StubModel(16)
BOUND = 30.0  # seconds: no wait without a bound


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)


def _texts(n: int = 12) -> list[str]:
    return [f"passage {i} about the river and the town number {i}" for i in range(n)]


def _expected(texts: list[str], prefix: str = "") -> np.ndarray:
    return np.stack([MODEL.vector(prefix + t) for t in texts])


def _encoder(server: EmbeddingsServer, run: dict | None = None, **settings) -> api.ApiEncoder:
    given = {"family": "openai", "model": "stub-model", "base_url": server.base_url, "api_key_env": KEY_ENV,
             "inputs_per_request": 3, "concurrency": 2, "max_retries": 2, **settings}  # fmt: skip
    spec = resolve_model("stub", given)
    return api.load({**spec, **({"api_run": run} if run else {})})


def _run(tmp_path: Path, job: str = "corpus-sw-00000-00000") -> dict:
    return {"model": "stub", "job": job, "ledger": str(tmp_path / "ledger")}


@pytest.mark.parametrize("fault", ["shuffled", "no-usage"])
def test_an_unusual_but_right_answer_gives_the_right_vectors(tmp_path, fault, caplog) -> None:
    """data items in another order (each with its index), or no usage (the client's own count is billed)."""
    texts = _texts()
    with EmbeddingsServer(MODEL, key=KEY, faults={"*": fault}) as server:
        encoder = _encoder(server, _run(tmp_path))
        got = encoder.encode(texts, "passage").dense
    np.testing.assert_array_equal(got, _expected(texts))
    totals = read_ledger(tmp_path / "ledger")
    assert totals.requests == 4 and totals.failed == 0 and totals.inputs == len(texts)
    if fault == "no-usage":  # characters / 4 without a tokenizer
        assert totals.tokens == sum(max(1, round(len(t) / 4)) for t in texts)
    else:
        assert totals.tokens == server.billed


@pytest.mark.parametrize(
    ("fault", "says"),
    [
        ("html", r"not JSON \(text/html, \d+ bytes, beginning '<!DOCTYPE html>"),
        ("not-json", r"not JSON \(application/json"),
        ("fewer", r"2 embeddings for 3 inputs"),
        ("more", r"4 embeddings for 3 inputs"),
        ("no-index", r"data\[2\] has no integer 'index'"),
        ("repeated-index", r"index 0 twice"),
        ("short-vector", r"input 1's vector has 15 values, not 16"),
        ("nan", r"input 3's vector holds NaN or infinity"),
        ("inf", r"input 3's vector holds NaN or infinity"),
        ("zero", r"input 3's vector is all zeros"),
    ],
)
def test_a_wrong_answer_is_one_error_naming_the_server_and_the_request(tmp_path, fault, says) -> None:
    """The third request (its inputs named by their ids) is answered wrongly: the job ends there, naming the
    server and the request; what the other requests brought back is kept, and the ledger has the bad answer."""
    texts = _texts()
    ids = [f"doc-{i}" for i in range(len(texts))]
    with EmbeddingsServer(MODEL, key=KEY, faults={3: fault}) as server:
        encoder = _encoder(server, _run(tmp_path))
        with pytest.raises(api.ApiError) as err, encoder.receiving(tmp_path / "out.parquet"):
            list(encoder.encode_stream([(ids, texts)], "passage"))
    message = str(err.value)
    wrong = [ids[texts.index(t)] for t in server.received[2]["input"]]  # the server's third request
    assert re.search(rf"the embeddings API at {re.escape(server.base_url)} answered request \d of "
                     rf"corpus-sw-00000-00000 \(3 inputs: {wrong[0]} to {wrong[-1]}\) wrongly: {says}", message), message  # fmt: skip
    written = [json.loads(x) for x in (tmp_path / "ledger/corpus-sw-00000-00000.jsonl").read_text().splitlines()]
    lines = [x for x in written if x["status"] != "sent"]  # end lines; each request reserved before it went out
    assert sorted(x["request"] for x in written if x["status"] == "sent") == sorted(x["request"] for x in lines)
    bad = [x["request"] for x in lines if x["status"] == "bad answer"]
    # answered, so billed: what the answer said, else (not JSON, no usage) the request's counted tokens
    said = fault not in ("html", "not-json")
    assert all(x["tokens"] > 0 and (said or x["tokens"] == x["counted"]) for x in lines if x["request"] in bad)
    assert len(lines) == server.count and bad == [int(message.split("answered request ")[1].split()[0])]
    assert all(x["status"] == "ok" for x in lines if x["request"] not in bad)
    kept = received_path(tmp_path / "out.parquet")
    assert kept.exists() and not (tmp_path / "out.parquet").exists()


def test_answers_kept_are_not_asked_for_again(tmp_path) -> None:
    """A job that fails keeps every vector it was billed for; run again, it sends only the others, and its
    output equals an uninterrupted run's."""
    texts = _texts(15)
    ids = [f"doc-{i}" for i in range(len(texts))]
    out = tmp_path / "out.parquet"
    with EmbeddingsServer(MODEL, key=KEY, faults={2: "html"}) as server:
        encoder = _encoder(server, _run(tmp_path), concurrency=1)
        with pytest.raises(api.ApiError), encoder.receiving(out):
            list(encoder.encode_stream([(ids, texts)], "passage"))
        first = [t for body in server.received for t in body["input"]]
        port = server.httpd.server_address[1]
    answered = first[:3]  # request 1 (request 2's answer was wrong; concurrency 1: nothing after it)
    with open(received_path(out), "ab") as f:  # a record torn by a kill: dropped, the rest kept
        f.write(b"MEV1\x05\x00")
    with EmbeddingsServer(MODEL, key=KEY, port=port) as server:  # the same base_url: the same vectors
        encoder = _encoder(server, _run(tmp_path))
        with encoder.receiving(out):
            got = np.concatenate([o["dense"] for _, o in encoder.encode_stream([(ids, texts)], "passage")])
        again = [t for body in server.received for t in body["input"]]
    np.testing.assert_array_equal(got, _expected(texts))
    assert sorted(again) == sorted(set(texts) - set(answered)) and encoder.usage.cached == len(answered)
    assert not received_path(out).exists()  # published: dropped


def test_an_error_stops_the_other_requests_of_the_chunk(tmp_path) -> None:
    """40 requests of one text; the fifth is answered wrongly: at most the requests already in flight (two
    at a time) are sent after it, not the other 35."""
    texts = _texts(40)
    with EmbeddingsServer(MODEL, key=KEY, faults={5: "not-json"}, latency=0.05) as server:
        encoder = _encoder(server, _run(tmp_path), inputs_per_request=1, concurrency=2)
        with pytest.raises(api.ApiError, match="request 5 of"):
            encoder.encode(texts, "passage")
    assert server.count <= 5 + 2
    lines = read_ledger(tmp_path / "ledger")
    assert lines.requests == server.count  # every request sent has its line


def test_a_body_cut_short_is_sent_again_and_a_server_that_always_cuts_is_named(tmp_path) -> None:
    texts = _texts(6)
    with EmbeddingsServer(MODEL, key=KEY, faults={2: "cut"}) as server:
        got = _encoder(server, _run(tmp_path)).encode(texts, "passage").dense
    np.testing.assert_array_equal(got, _expected(texts))
    assert read_ledger(tmp_path / "ledger").retries == 1
    with EmbeddingsServer(MODEL, key=KEY, faults={"*": "cut"}) as server:
        with pytest.raises(api.ApiError, match=r"failed request 1 of .* after 2 retries \(max_retries\): the answer "
                                               r"was cut short .* x 3"):  # fmt: skip
            _encoder(server).encode(texts, "passage")
        assert server.count == 3


@pytest.mark.parametrize(("fault", "settings"), [("cut", {}), ("slow:1.5", {"timeout": 0.5})])
def test_a_try_whose_answer_was_lost_is_charged(tmp_path, fault, settings) -> None:
    """A body cut short, or an answer later than the timeout: the server billed the try though the client has
    no answer; the ledger charges it at its counted tokens, so what it records covers what was billed."""
    texts = ["www www www www www"] * 6  # 5 tokens each, counted and billed alike
    with EmbeddingsServer(MODEL, key=KEY, faults={2: fault}) as server:
        got = _encoder(server, _run(tmp_path), **settings).encode(texts, "passage").dense
        deadline = time.monotonic() + BOUND
        while len(server.answers) < server.count and time.monotonic() < deadline:  # the late answer, billed
            time.sleep(0.05)
        billed = server.billed
    np.testing.assert_array_equal(got, _expected(texts))
    totals = read_ledger(tmp_path / "ledger")
    assert (totals.requests, totals.retries, totals.charged, totals.unended) == (2, 1, 15, 0)
    assert billed == 45 and totals.tokens + totals.charged == billed


@pytest.mark.parametrize(("status", "charged"), [(502, 15), (504, 15), (520, 15), (524, 15), (408, 15), (503, 0)])
def test_a_gateways_error_is_charged_as_possibly_billed_and_a_servers_is_not(tmp_path, status, charged) -> None:
    """A 502, 504, 520 or 524 (a gateway: the model behind it may have embedded and billed the request) or a
    408 (a proxy's upstream timeout) is charged at the try's counted tokens, like a timeout; a 503 (the
    server's own) is sent again on its reservation, uncharged."""
    texts = ["www www www www www"] * 6  # 5 tokens each: requests of 15 counted tokens
    with EmbeddingsServer(MODEL, key=KEY, faults={2: f"status:{status}"}) as server:
        got = _encoder(server, _run(tmp_path)).encode(texts, "passage").dense
    np.testing.assert_array_equal(got, _expected(texts))
    totals = read_ledger(tmp_path / "ledger")
    assert (totals.requests, totals.retries, totals.charged, totals.unended) == (2, 1, charged, 0)


def test_5xx_without_end_fails_after_max_retries_naming_the_key(tmp_path) -> None:
    says = r"failed request 1 .* after 2 retries \(models\.stub\.max_retries\): 503: The server had an error\. x 3"
    with (
        EmbeddingsServer(MODEL, key=KEY, faults={"*": "status:503"}) as server,
        pytest.raises(api.ApiError, match=says),
    ):
        _encoder(server, _run(tmp_path)).encode(_texts(3), "passage")
    lines = read_ledger(tmp_path / "ledger")
    assert (lines.requests, lines.failed, lines.retries, lines.usd) == (1, 1, 2, 0.0)


def test_a_retry_after_beyond_patience_fails_at_once(tmp_path) -> None:
    """A 429 asking for a day: no waiting, one error naming the pause, patience and the server."""
    with EmbeddingsServer(MODEL, key=KEY, faults={"*": "429:86400"}) as server:
        with pytest.raises(api.ApiError) as err:
            _encoder(server, _run(tmp_path), patience=600).encode(_texts(3), "passage")
        assert server.count == 1
    assert f"the embeddings API at {server.base_url} has answered no request" in str(err.value)
    assert "longer than models.stub.patience (600 s): 429 (Rate limit reached.); asked to wait 86,400 s" in str(
        err.value
    )


def test_rate_limit_headers_asking_for_a_day_end_the_job_at_once(tmp_path) -> None:
    """An answer whose headers say no tokens are left for 100,000 s: the next request is not sent, and the
    job ends at once naming the pause and its patience."""
    with EmbeddingsServer(MODEL, key=KEY, faults={1: "exhausted"}) as server:
        with pytest.raises(api.ApiError, match=r"longer than patience \(600 s\): the provider asked for a pause"):
            _encoder(server, patience=600).encode(_texts(6), "passage")
        assert server.count == 1


def test_a_server_that_goes_away_or_refuses_the_key_mid_run_is_named(tmp_path) -> None:
    """Nothing listening at the base URL: retried, then one error naming it, and nothing charged (no try was
    sent); a key refused after answers were given: the variable named, never the key."""
    with EmbeddingsServer(MODEL, key=KEY) as server:
        gone = server.base_url
    with pytest.raises(api.ApiError, match=rf"the embeddings API at {re.escape(gone)} failed request 1 .* after 2 "
                                           r"retries \(models\.stub\.max_retries\): no connection \(.*refused.*\) x 3"):  # fmt: skip
        _encoder(type("S", (), {"base_url": gone})(), _run(tmp_path / "gone")).encode(_texts(3), "passage")
    totals = read_ledger(tmp_path / "gone" / "ledger")
    assert (totals.requests, totals.failed, totals.retries, totals.charged, totals.unended) == (1, 1, 2, 0, 0)
    refused = rf"refused the key in \${KEY_ENV} \(401"
    with (
        EmbeddingsServer(MODEL, key=KEY, faults={3: "status:401"}) as server,
        pytest.raises(ConfigError, match=refused) as err,
    ):
        _encoder(server, _run(tmp_path), concurrency=1).encode(_texts(9), "passage")
    assert err.value.key == "models.stub.api_key_env" and KEY not in str(err.value)


def test_429s_without_end_fail_after_patience(tmp_path) -> None:
    """Retry-After 1 s again and again: the job waits each out until `patience` (2 s here) has passed with no
    answer, then fails naming it; never before (more than one try)."""
    with EmbeddingsServer(MODEL, key=KEY, faults={"*": "429"}) as server:
        with pytest.raises(api.ApiError, match=r"longer than patience \(2 s\)"):
            _encoder(server, patience=2).encode(_texts(3), "passage")
        assert server.count >= 2


def test_429s_do_not_count_against_max_retries(tmp_path) -> None:
    """Two 429s, then a 500, with max_retries 1: the 429s were waited out (they count toward no limit), the 500
    is the one retry allowed, and the request is answered."""
    faults = {1: "429", 2: "429", 3: "status:500"}
    with EmbeddingsServer(MODEL, key=KEY, faults=faults) as server:
        got = _encoder(server, _run(tmp_path), concurrency=1, max_retries=1).encode(_texts(3), "passage").dense
        assert [a["status"] for a in server.answers] == [429, 429, 500, 200]
    np.testing.assert_array_equal(got, _expected(_texts(3)))
    assert read_ledger(tmp_path / "ledger").retries == 3


def test_429s_slow_a_job_down_and_never_fail_it(tmp_path) -> None:
    """A server with a token limit and a client with no pace of its own: the 429s (Retry-After) and the
    x-ratelimit headers pace it; every vector comes back, and the ledger counts the retries."""
    texts = [f"word {i} " * 30 for i in range(24)]  # 60 tokens each: 1,440 in all, 3 s of the rate
    with EmbeddingsServer(MODEL, key=KEY, tokens_per_minute=30_000, burst_seconds=0.5) as server:
        encoder = _encoder(server, _run(tmp_path), inputs_per_request=2, concurrency=4)
        got = encoder.encode(texts, "passage").dense
    np.testing.assert_array_equal(got, _expected(texts))
    statuses = [a["status"] for a in server.answers]
    lines = read_ledger(tmp_path / "ledger")
    assert statuses.count(429) == lines.retries > 0 and lines.failed == 0 and lines.tokens == server.billed


def test_paced_jobs_together_keep_under_the_limit(tmp_path) -> None:
    """Two jobs of one model (api_jobs 2), each paced to half the server's limit: 7,680 tokens against a server
    of 1,000 a second that holds 4 s of them (unpaced, the two would send them all at once): no 429."""
    texts = [f"word {i} " * 30 for i in range(64)]  # 60 tokens each
    limit = 60_000
    with EmbeddingsServer(MODEL, key=KEY, tokens_per_minute=limit, burst_seconds=4) as server:
        jobs = [_encoder(server, _run(tmp_path, f"queries-{p}"), inputs_per_request=2, concurrency=4,
                         tokens_per_minute=limit, api_jobs=2) for p in ("sw", "yo")]  # fmt: skip
        threads = [threading.Thread(target=job.encode, args=(texts, "passage")) for job in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert all(job.usage.inputs == len(texts) and job.usage.requests == 32 for job in jobs)
    assert [a["status"] for a in server.answers].count(429) == 0 and server.billed == 2 * 64 * 60


def test_a_redirect_is_not_followed(tmp_path) -> None:
    says = r"redirected request 1 .*\(302 to http://10\.0\.0\.9/v1/embeddings\): not followed"
    with EmbeddingsServer(MODEL, key=KEY, faults={1: "redirect"}) as server, pytest.raises(api.ApiError, match=says):
        _encoder(server).encode(_texts(3), "passage")


def test_a_request_wide_400_is_named_as_such_not_as_an_input(tmp_path) -> None:
    """`dimensions` the server does not take: every request is refused, a one-word probe too: the error
    names the request's settings, not a passage."""
    ids = [f"doc-{i}" for i in range(6)]
    with EmbeddingsServer(MODEL, key=KEY, dimensions=False) as server:
        encoder = _encoder(server, _run(tmp_path), dimensions=8)
        with pytest.raises(ConfigError) as err:
            list(encoder.encode_stream([(ids, _texts(6))], "passage"))
    assert err.value.key == "models.stub.model"
    assert "refuses every request for model 'stub-model' with dimensions 8" in str(err.value)
    assert "does not support specifying dimensions" in str(err.value) and "doc-" not in str(err.value)
    assert server.count == 2  # the request, then the probe


def test_an_input_refused_alone_is_still_named_by_its_id(tmp_path) -> None:
    texts = _texts(6)
    texts[4] += " NOT-THIS-ONE"
    ids = [f"doc-{i}" for i in range(6)]
    with EmbeddingsServer(MODEL, key=KEY, reject_marker="NOT-THIS-ONE") as server:
        encoder = _encoder(server, _run(tmp_path), inputs_per_request=6)
        with pytest.raises(InputError, match=r"doc-4: the embeddings API refused this input \(400"):
            list(encoder.encode_stream([(ids, texts)], "passage"))
    lines = read_ledger(tmp_path / "ledger")
    assert lines.requests == server.count and lines.failed == 4  # refused: all 6, then 3 of them, 2, and doc-4


def test_a_server_that_repeats_the_key_never_gets_it_written(tmp_path, caplog) -> None:
    with (
        EmbeddingsServer(MODEL, key=KEY, faults={"*": "echo-key"}) as server,
        caplog.at_level(logging.DEBUG),
        pytest.raises(MiraclEvalError) as err,
    ):
        _encoder(server, _run(tmp_path)).encode(_texts(3), "passage")
    assert "Bad header" in str(err.value) and "***" in str(err.value)
    assert KEY not in str(err.value) and KEY not in caplog.text
    assert KEY not in "".join(p.read_text() for p in (tmp_path / "ledger").iterdir())


@pytest.mark.parametrize(("value", "says"), [(None, "is not set"), ("", "is empty"), ("  ", "is empty"),
                                             ("sk-abc\n", "a line break"), ("sk abc", "a space")])  # fmt: skip
def test_a_key_variable_unset_empty_or_unsendable_is_named_never_shown(monkeypatch, value, says) -> None:
    if value is None:
        monkeypatch.delenv(KEY_ENV)
    else:
        monkeypatch.setenv(KEY_ENV, value)
    with EmbeddingsServer(MODEL, key=KEY) as server:
        with pytest.raises(ConfigError, match=says) as err:
            _encoder(server, {"model": "stub", "job": "x"})
        assert server.count == 0
    assert err.value.key == "models.stub.api_key_env" and KEY_ENV in str(err.value)
    assert not (value or "").strip() or value.strip() not in str(err.value)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://user:secret@127.0.0.1:8000/v1", "holds credentials"),
        ("https://api.example.com/v1?api-key=secret", "query or fragment"),
        ("https:///v1", "no host"),
        ("http://192.168.1.5:8000/v1", "neither https:// nor a loopback address"),
        ("http://localhost.example.com/v1", "neither https:// nor a loopback address"),
    ],
)
def test_a_base_url_that_would_leak_the_key_is_refused(url, says) -> None:
    with pytest.raises(ConfigError, match=says) as err:
        resolve_model("remote", {"family": "openai", "model": "m", "base_url": url})
    assert err.value.key == "models.remote.base_url" and "secret" not in str(err.value)


def test_a_loopback_address_takes_a_key_over_http() -> None:
    for url in ("http://127.0.0.2:8000/v1", "http://[::1]:8000/v1", "http://LOCALHOST/v1"):
        assert resolve_model("x", {"family": "openai", "model": "m", "base_url": url})["base_url"] == url
