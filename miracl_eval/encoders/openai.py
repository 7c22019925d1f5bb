"""The openai family: dense vectors from an embeddings API that speaks OpenAI's (``POST {base_url}/embeddings``):
OpenAI's text-embedding-3 models, or an open model served by vLLM, Hugging Face TEI, infinity, Ollama or
a LiteLLM proxy.

* **Requests** hold at most ``inputs_per_request`` texts and ``tokens_per_request`` tokens, each text at
  most ``passage_max_length`` / ``query_max_length`` tokens, cut with the model's tokenizer (tiktoken's
  for OpenAI's models; ``tokenizer`` names another: ``tiktoken:ENCODING``, or a Hugging Face tokenizer,
  a folder or hub id) by its token ids, and the cut text counted again (a decoded cut can tokenize
  longer: it is cut shorter until it fits). OpenAI's limits (:data:`miracl_eval.encoders.registry.MAX_INPUTS`
  and beside it, the settings' defaults): at most 2,048 inputs, 8,192 tokens per input and 300,000 tokens
  summed over a request's inputs, no empty string (an empty text is sent as one space). Without a
  tokenizer nothing is cut, tokens are estimated as characters / 4, and a server's refusal of a long input
  names the passage.
* **Pace.** ``concurrency`` requests are in flight at once, paced by :mod:`~miracl_eval.encoders.api_pace`
  (the job's share of ``tokens_per_minute`` and ``requests_per_minute``, the provider's ``x-ratelimit-*``
  headers). A 429 pauses the job's requests for its ``Retry-After``; 5xx answers (``max_retries``; a
  408 and a gateway's 502, 504, 520 or 524 are charged as possibly billed),
  timeouts and dropped connections are retried with backoff; neither ends the job before ``patience``
  seconds have passed without an answer (a pause asked for beyond that ends it at once). A job's first
  request goes alone, and a 401 or 403 stops it there, naming the variable that holds the key
  (``api_key_env``), never the key. A 400 is narrowed down to the input the server refused, named by
  its docid, unless a request of one short text is refused too: then the request itself (the model or
  ``dimensions``) is named. Any error stops the job's other requests; those in flight are waited for.
* **Answers** are checked: JSON with one finite vector of the expected dimension per input, each
  ``index`` once; anything else ends the job with an error naming the server and the request. Vectors come
  back as float32 in input order (``dimensions`` is passed on when set).
* **Nothing billed is lost.** Each answer's vectors are kept as they arrive
  (:mod:`~miracl_eval.encoders.api_received`): a failed or killed job, run again, sends only texts not
  answered before. Each request is written to the model's ledger (:mod:`~miracl_eval.encoders.api_ledger`)
  with what it billed, and ``max_usd`` is checked before each one and before each resend of a try whose
  answer was lost.

The key is read from the environment when a job starts and goes nowhere else: not into a spec, a log,
a ledger, a Parquet file or a report; a server's message that repeats it is written with the key masked.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from miracl_eval.encoders.api_ledger import Budget, Ledger
from miracl_eval.encoders.api_pace import Pace, TooLong, retry_after
from miracl_eval.encoders.api_received import Received, text_digest
from miracl_eval.encoders.checkpoints import insecure_url
from miracl_eval.errors import ConfigError, InputError, MiraclEvalError

log = logging.getLogger(__name__)

#: the vectors' dimension of OpenAI's models when ``dimensions`` is not set (their model pages)
KNOWN_DIMS = {"text-embedding-3-large": 3072, "text-embedding-3-small": 1536, "text-embedding-ada-002": 1536}
#: texts read ahead of the requests in flight (as many windows as it takes to keep ``concurrency`` busy)
WINDOW = 4096
#: seconds of the first retry's backoff after a 5xx or a dropped connection (doubled each time, at most
#: :data:`MAX_BACKOFF`), and after a 429 without ``Retry-After``
FIRST_BACKOFF, MAX_BACKOFF = 0.5, 60.0
#: bytes of an answer beyond what its vectors need as JSON (a server that sends without end is cut off)
ANSWER_SLACK = 1 << 20
#: what a request-wide refusal is told apart with: a request of this one short text
PROBE_TEXT = "hello"
#: statuses retried as a server's error (OpenAI's client retries these too)
_SERVER_STATUSES = {409}
#: a timeout or a gateway's error (408, which proxies such as LiteLLM answer for an upstream timeout; 502, 504;
#: Cloudflare's 520 and 524): the request may have reached the model and been billed though its answer was
#: lost, so the try is charged like a timeout (charging too much is the safe side of a budget)
_GATEWAY_STATUSES = {408, 502, 504, 520, 524}
#: statuses that refuse an input (OpenAI: 400; TEI: 413 too many tokens, 422 validation)
_REFUSED_STATUSES = {400, 413, 422}


class Tokenizer:
    """Counts and cuts texts as the model's tokenizer does (``encode`` / ``decode`` of token lists)."""

    def __init__(self, name: str, encode: Callable[[list[str]], list[list[int]]], decode: Callable[[list[int]], str]):
        self.name, self.encode, self.decode = name, encode, decode


def load_tokenizer(spec: Mapping[str, Any]) -> Tokenizer | None:
    """The tokenizer of a resolved spec: ``tokenizer``, else tiktoken's for an OpenAI model, else None."""
    given = spec.get("tokenizer")
    model = spec["checkpoint"]
    if given is None and model not in KNOWN_DIMS:
        return None
    if given is None or given.startswith("tiktoken:"):
        import tiktoken

        try:
            enc = tiktoken.encoding_for_model(model) if given is None else tiktoken.get_encoding(given.split(":", 1)[1])
        except Exception as err:  # noqa: BLE001 - unknown name, or no copy of the encoding offline
            raise ConfigError(
                "tokenizer",
                f"cannot load tiktoken's encoding for {given or model} ({type(err).__name__}: {err}); offline, put "
                "its file in TIKTOKEN_CACHE_DIR",
            ) from err
        return Tokenizer(
            f"tiktoken {enc.name}",
            lambda texts: enc.encode_ordinary_batch(texts),
            lambda ids: enc.decode(ids),
        )
    from transformers import AutoTokenizer

    from miracl_eval.encoders.base import resolve_model_dir

    hf = AutoTokenizer.from_pretrained(resolve_model_dir(given))
    return Tokenizer(
        f"{given}",
        lambda texts: hf(texts, add_special_tokens=False)["input_ids"],
        lambda ids: str(hf.decode(ids)),
    )


@dataclass
class Usage:
    """What a job sent: requests answered, inputs (``cached``: answered in an earlier run, not sent again),
    inputs cut, tokens (the API's count when it gives one), retries, and requests refused or failed."""

    requests: int = 0
    inputs: int = 0
    cut: int = 0
    tokens: int = 0
    seconds: float = 0.0
    cached: int = 0
    retries: int = 0
    failed: int = 0

    def usd(self, price_per_million: float) -> float:
        return self.tokens * price_per_million / 1e6

    def facts(self, price_per_million: float) -> dict[str, Any]:
        """What a block manifest records of it: requests, inputs, inputs cut, tokens and dollars."""
        return {"requests": self.requests, "inputs": self.inputs, "cut": self.cut, "tokens": self.tokens,
                "usd": round(self.usd(price_per_million), 6), "cached": self.cached, "retries": self.retries,
                "failed": self.failed}  # fmt: skip


class ApiError(MiraclEvalError):
    """The embeddings API failed a request, or answered it wrongly: the message names the server and the request."""


class _Retry(Exception):
    """A request to send again: ``kind`` ``rate`` (a 429: the whole job pauses), ``server`` (5xx, 409),
    ``connect`` (no connection made: nothing was sent) or ``transport`` (a timeout, a dropped connection, an
    answer cut short, a 408 or a gateway's error: sent, its answer lost)."""

    def __init__(self, kind: str, what: str, wait: float | None = None) -> None:
        super().__init__(what)
        self.kind, self.what, self.wait = kind, what, wait


class _Refused(Exception):
    """A 400 (413, 422): the server refused the request."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class _BadAnswer(Exception):
    """A 2xx answer that is not what was asked for (``tokens``: what it said it billed; None if it did not
    say, when the ledger charges the request's counted tokens)."""

    def __init__(self, what: str, tokens: int | None = None) -> None:
        super().__init__(what)
        self.what, self.tokens = what, tokens


class _Stopped(Exception):
    """Not sent: another request of the job failed."""


@dataclass
class _Chunk:
    """A chunk's texts: those answered before (``cached``, by position) and its requests (positions, future)."""

    n: int
    cached: dict[int, np.ndarray] = field(default_factory=dict)
    parts: list[tuple[list[int], Future]] = field(default_factory=list)


class ApiEncoder:
    """An embeddings API as an encoder: use :func:`load`.

    ``run`` (a job's; None outside the workflow): ``model`` (its config name), ``job`` (a name for the
    ledger), ``ledger`` (the model's ledger folder), ``plan`` (its cost plan file) and ``settings`` (the
    plan's digest of what is sent)."""

    outputs = ("dense",)
    precision = "api"  # what the model runs in, as the shards record it
    device = "api"

    def __init__(
        self, spec: Mapping[str, Any], client: Any, tokenizer: Tokenizer | None, run: Mapping[str, Any] | None = None
    ) -> None:
        self.spec, self.client, self.tokenizer = dict(spec), client, tokenizer
        self.model = spec["checkpoint"]
        self.url = str(spec.get("base_url", ""))
        self.usage = Usage()
        self.dim: int | None = spec.get("dimensions") or KNOWN_DIMS.get(self.model)
        self._answered = False  # whether the API has answered a request of this job yet
        self.run = dict(run or {})
        self.job = str(self.run.get("job") or "this job")
        self.pace = Pace(spec.get("tokens_per_minute"), spec.get("requests_per_minute"), int(spec.get("api_jobs") or 1))
        self.patience = float(spec.get("patience") or 1800)
        self.max_retries = int(spec.get("max_retries", 8))
        self.timeout = float(spec.get("timeout") or 120)
        self._secret = str(getattr(client, "api_key", "") or "")
        # what a text's vector depends on beside the text as sent
        self._vector_key = json.dumps([self.url, self.model, spec.get("dimensions")])
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self._probe_lock = threading.Lock()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._last_answer = time.monotonic()
        self._probe: str | None | bool = None  # None: not tried; True: a short text is accepted; str: refused
        self.received: Received | None = None
        self.ledger: Ledger | None = None
        self.budget: Budget | None = None
        if self.run.get("ledger"):
            price = float(spec.get("price_per_million_tokens") or 0)
            self.ledger = Ledger(self.run["ledger"], self.job, str(self.run.get("settings") or ""), price)
            if price > 0 and self.run.get("plan_tokens") is not None:
                self.budget = Budget(self.key("max_usd"), float(spec.get("max_usd") or 0), price,
                                     int(self.run["plan_tokens"]), self.ledger)  # fmt: skip

    def key(self, setting: str) -> str:
        """A setting's config key (``models.<name>.<setting>`` in a run)."""
        return f"models.{self.run['model']}.{setting}" if self.run.get("model") else setting

    def ensure_dim(self) -> int:
        """The vectors' dimension: ``dimensions``, an OpenAI model's, or one request of one short text."""
        if self.dim is None:
            vectors = self._request([PROBE_TEXT], [_estimate(PROBE_TEXT)], ["(the dimension probe)"], None)
            self._answered = True
            self.dim = int(vectors.shape[1])
        return self.dim

    # ------------------------------------------------------------------ texts

    def prepare(self, texts: Sequence[str], role: str) -> list[str]:
        prefix = self.spec[f"{role}_prefix"] or ""
        return [prefix + t for t in texts]

    def cut(self, texts: list[str], role: str) -> tuple[list[str], list[int]]:
        """The texts cut to the role's token limit, and their token counts (characters / 4 without a
        tokenizer, which cuts nothing). A text is cut by its token ids, and the cut text counted again: one
        that tokenizes longer once decoded (a character split, an unknown token spelt out) is cut shorter
        until it fits, so that no cut text is over the limit as the tokenizer counts it."""
        if self.tokenizer is None:
            return [t or " " for t in texts], [_estimate(t) for t in texts]
        limit = int(self.spec[f"{role}_max_length"])
        ids = self.tokenizer.encode(texts)
        out = [t or " " for t in texts]
        counts = [max(1, len(tokens)) for tokens in ids]
        keep = {i: limit for i, tokens in enumerate(ids) if len(tokens) > limit}
        self.usage.cut += len(keep)
        while keep:
            order = list(keep)
            cut = [self.tokenizer.decode(ids[i][: keep[i]]) for i in order]
            again = self.tokenizer.encode(cut)
            longer: dict[int, int] = {}
            for i, text, tokens in zip(order, cut, again, strict=True):
                if len(tokens) <= limit or keep[i] == 0:
                    out[i], counts[i] = text or " ", max(1, len(tokens))
                else:  # shorter by what it is over, at least one token
                    longer[i] = max(0, keep[i] - max(1, len(tokens) - limit))
            keep = longer
        return out, counts

    def requests(self, counts: Sequence[int]) -> list[slice]:
        """Consecutive runs of texts within the per-request limits."""
        most, budget = int(self.spec["inputs_per_request"]), int(self.spec["tokens_per_request"])
        out, start, tokens = [], 0, 0
        for i, n in enumerate(counts):
            if i > start and (i - start >= most or tokens + n > budget):
                out.append(slice(start, i))
                start, tokens = i, 0
            tokens += n
        if len(counts):
            out.append(slice(start, len(counts)))
        return out

    # ------------------------------------------------------------------ requests

    def _describe(self, number: int, ids: Sequence[str]) -> str:
        shown = ids[0] if len(ids) == 1 else f"{ids[0]} to {ids[-1]}"
        return f"request {number} of {self.job} ({len(ids)} input{'s' * (len(ids) != 1)}: {shown})"

    def _fail(self, err: BaseException) -> BaseException:
        """Stop the job's other requests (the first error is the one the job reports)."""
        with self._lock:
            if self._error is None:
                self._error = err
        self._stop.set()
        return err

    def _request(self, texts: list[str], counts: list[int], ids: list[str], digests: list[bytes] | None) -> np.ndarray:
        """One run of texts' vectors (float32, input order); a refused one is narrowed down to its input."""
        try:
            return self._send(texts, counts, ids, digests)
        except _Refused as refused:
            self._check_request_wide(refused)
            if len(texts) == 1:
                raise self._fail(InputError(ids[0], f"the embeddings API refused this input ({refused.status}: "
                                                    f"{refused.message})")) from None  # fmt: skip
            half = len(texts) // 2
            a = self._request(texts[:half], counts[:half], ids[:half], digests[:half] if digests else None)
            b = self._request(texts[half:], counts[half:], ids[half:], digests[half:] if digests else None)
            return np.concatenate([a, b])

    def _check_request_wide(self, refused: _Refused) -> None:
        """After a refusal: whether a request of one short text is refused too (asked once a job); if so, the
        request itself is refused, whatever its inputs: an error naming it."""
        with self._probe_lock:
            if self._probe is None:
                try:
                    self._send([PROBE_TEXT], [_estimate(PROBE_TEXT)], ["(a one-word probe)"], None)
                    self._probe = True
                except _Refused as err:
                    self._probe = f"{err.status}: {err.message}"
        if self._probe is not True:
            dims = self.spec.get("dimensions")
            raise self._fail(ConfigError(
                self.key("model"),
                f"the embeddings API at {self.url} refuses every request for model {self.model!r}"
                f"{f' with dimensions {dims}' if dims else ''}, even one of the single word {PROBE_TEXT!r} "
                f"({self._probe}; first refusal: {refused.status}: {refused.message}): a setting of the "
                "request (the model's name, dimensions) that the server does not accept, not an input",
            )) from None  # fmt: skip

    def _send(self, texts: list[str], counts: list[int], ids: list[str], digests: list[bytes] | None) -> np.ndarray:
        """One request, sent again after a 429, a 5xx, a timeout or a dropped connection (within ``max_retries``
        and ``patience``); written to the ledger however it ends; its vectors kept as they arrive."""
        number = next(self._numbers)
        what = self._describe(number, ids)
        counted = sum(counts)
        started = time.monotonic()
        retries, tokens, status = 0, 0, "failed"
        failures = 0  # the retries after a server's error, a timeout or a dropped connection (429s: never counted)
        lost = 0  # tries sent whose answer was lost (possibly billed: charged at the counted tokens)
        reserved = False  # a reservation in the ledger that the next try may use
        notes: list[str] = []

        def lose() -> None:  # a try sent whose answer was lost: its reservation stays as a charge
            nonlocal lost, reserved
            lost, reserved = lost + 1, False
            if self.budget is not None:
                self.budget.charge(counted)

        if self._stop.is_set():
            raise _Stopped()
        if self.budget is not None:
            try:
                self.budget.reserve(counted, what)
            except ConfigError as err:
                raise self._fail(err) from None
        try:
            while True:
                try:
                    if not self.pace.wait_turn(counted, self._stop, self._last_answer + self.patience, bool(notes)):
                        status = "failed" if retries else "not sent"
                        notes = [*notes, "stopped: another request failed"]
                        raise _Stopped()
                except TooLong as err:
                    raise self._fail(
                        self._impatient(what, f"{err.why} until {err.seconds:,.0f} s from now", notes)
                    ) from None
                if self.ledger is not None and not reserved:  # written before it goes out: a kill cannot hide it
                    self.ledger.reserve(number, counted)
                    reserved = True
                try:
                    vectors, tokens, headers = self._post(texts, counts, what)
                except _Retry as err:
                    if err.kind == "transport":  # sent, its answer lost
                        lose()
                    notes.append(err.what)
                    if err.kind != "rate" and failures >= self.max_retries:
                        raise self._fail(ApiError(
                            f"the embeddings API at {self.url} failed {what} after {self.max_retries} retries "
                            f"({self.key('max_retries')}): {_summary(notes)}"
                        )) from None  # fmt: skip
                    wait = (
                        err.wait
                        if err.wait is not None
                        else _backoff((failures if err.kind != "rate" else retries) + 1)
                    )
                    if time.monotonic() + wait > self._last_answer + self.patience:
                        raise self._fail(
                            self._impatient(what, f"{err.what}; asked to wait {wait:,.0f} s", notes)
                        ) from None
                    if err.kind == "transport" and self.budget is not None:  # max_usd again before a resend
                        try:
                            self.budget.check(counted, f"{what}, sent again")
                        except ConfigError as stop:
                            raise self._fail(stop) from None
                    retries += 1
                    failures += err.kind != "rate"
                    log.info("%s: %s; sent again in %.1f s", what, err.what, wait)
                    if err.kind == "rate" or err.wait is not None:
                        self.pace.hold(wait)  # the provider is over its limit: every request of the job waits
                    elif self._stop.wait(wait):
                        raise _Stopped() from None
                    continue
                except _Refused:
                    status = "refused"
                    raise
                except _BadAnswer as err:  # answered, so billed: what it said, else the counted tokens
                    status, tokens = "bad answer", counted if err.tokens is None else err.tokens
                    raise self._fail(
                        ApiError(f"the embeddings API at {self.url} answered {what} wrongly: {err.what}")
                    ) from None
                except (ConfigError, ApiError) as err:  # the key refused, a wrong URL, a redirect, another 4xx
                    raise self._fail(err) from None
                except BaseException:  # cut off while out (an interrupt): possibly billed
                    lose()
                    raise
                status = "ok"
                self._last_answer = time.monotonic()
                self.pace.observe(headers, counted)
                if self.received is not None and digests is not None:
                    self.received.append(digests, vectors)
                with self._lock:
                    self.usage.requests += 1
                    self.usage.tokens += tokens
                    self.usage.retries += retries
                    self._answered = True
                return vectors
        finally:
            charged = lost * counted
            if status != "ok":
                with self._lock:
                    self.usage.failed += status != "not sent"
                    self.usage.retries += retries
            if self.budget is not None:
                self.budget.settle(counted, tokens, status == "ok")  # lost tries: charged as they were lost
            if self.ledger is not None and status != "not sent":  # "not sent": no try went out, none reserved
                self.ledger.record(number, status, len(texts), counted, tokens, retries,
                                   time.monotonic() - started, _summary(notes) if notes else "", charged)  # fmt: skip

    def _impatient(self, what: str, why: str, notes: list[str]) -> ApiError:
        since = time.monotonic() - self._last_answer
        return ApiError(
            f"the embeddings API at {self.url} has answered no request of {self.job} for {since:,.0f} s, and {what} "
            f"would wait longer than {self.key('patience')} ({self.patience:g} s): {why}"
            + (f" (before: {_summary(notes)})" if notes else "")
        )

    def _post(self, texts: list[str], counts: list[int], what: str) -> tuple[np.ndarray, int, Mapping[str, str]]:
        """POST one request: its vectors, billed tokens and headers; raises :class:`_Retry`, :class:`_Refused`,
        :class:`_BadAnswer`, :class:`ConfigError` (the key refused), or :class:`ApiError`."""
        import openai

        kwargs: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.spec.get("dimensions"):
            kwargs["dimensions"] = int(self.spec["dimensions"])
        most = ANSWER_SLACK + len(texts) * (self.dim or 8192) * 32
        started = time.monotonic()
        try:
            with self.client.embeddings.with_streaming_response.create(**kwargs) as raw:
                headers = {k.lower(): v for k, v in raw.headers.items()}
                body = bytearray()
                for piece in raw.iter_bytes():
                    body += piece
                    if len(body) > most:
                        raise _BadAnswer(f"an answer of more than {most:,} bytes for {len(texts)} inputs")
                    if time.monotonic() - started > self.timeout:
                        raise _Retry("transport", f"the answer took more than {self.timeout:g} s (timeout)")
        except openai.APIStatusError as err:
            raise self._status_error(err, what) from None
        except openai.APIConnectionError as err:  # timeouts too
            cause = self._clean(str(err.__cause__ or err))
            # the transport's (httpx's, or openai 3's httpx2) ConnectError or ConnectTimeout: nothing was sent
            if type(err.__cause__).__name__ in ("ConnectError", "ConnectTimeout"):
                raise _Retry("connect", f"no connection ({cause})") from None
            kind = "a timeout" if isinstance(err, openai.APITimeoutError) else "a dropped connection"
            raise _Retry("transport", f"{kind} ({cause})") from None
        except (_BadAnswer, _Retry):
            raise
        except Exception as err:  # noqa: BLE001 - the transport's own errors while the body is read (cut short)
            raise _Retry(
                "transport", f"the answer was cut short ({type(err).__name__}: {self._clean(str(err))})"
            ) from None
        return self._vectors(bytes(body), headers, counts)

    def _status_error(self, err: Any, what: str) -> Exception:
        status = int(err.status_code)
        headers = {k.lower(): v for k, v in err.response.headers.items()}
        message = f"{status}: {self._clean(_message(err))}"
        if status in (401, 403):
            return ConfigError(
                self.key("api_key_env"),
                f"{self.url} refused the key in ${self.spec['api_key_env']} ({message})",
            )
        if status == 429 or (status == 503 and retry_after(headers) is not None):  # over a limit: slow down
            return _Retry("rate", f"{status} ({self._clean(_message(err))})", retry_after(headers))
        if status in _GATEWAY_STATUSES:
            return _Retry("transport", f"{message} (a timeout or a gateway's: possibly billed)", retry_after(headers))
        if status >= 500 or status in _SERVER_STATUSES:
            return _Retry("server", message, retry_after(headers))
        if status in _REFUSED_STATUSES:
            return _Refused(status, self._clean(_message(err)))
        if status == 404:
            return ConfigError(
                self.key("base_url"), f"{self.url} answered {what} with {message}: is the base_url, or the model's "
                f"name ({self.model!r}), right?"
            )  # fmt: skip
        if 300 <= status < 400:
            return ApiError(f"the embeddings API at {self.url} redirected {what} ({status} to "
                            f"{self._clean(headers.get('location', '?'))}): not followed; give the base_url it "
                            "redirects to")  # fmt: skip
        return ApiError(f"the embeddings API at {self.url} answered {what} with {message}")

    def _vectors(
        self, body: bytes, headers: Mapping[str, str], counts: list[int]
    ) -> tuple[np.ndarray, int, Mapping[str, str]]:
        """The vectors of a 2xx answer, checked (``_BadAnswer`` otherwise), in input order; its billed tokens."""
        n = len(counts)
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            kind = headers.get("content-type", "no content type")
            begins = self._clean(body[:80].decode("utf-8", "replace"))
            raise _BadAnswer(f"not JSON ({kind}, {len(body):,} bytes, beginning {begins!r})") from None
        usage = data.get("usage") if isinstance(data, dict) else None
        said = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        billed = said if isinstance(said, int) and not isinstance(said, bool) and said >= 0 else None
        if not isinstance(data, dict) or not isinstance(data.get("data"), list):
            error = data.get("error") if isinstance(data, dict) else None
            raise _BadAnswer("no 'data' list in the answer" + (f" (error: {self._clean(str(error))})" if error else ""),
                             billed)  # fmt: skip
        items = data["data"]
        if len(items) != n:
            raise _BadAnswer(f"{len(items)} embeddings for {n} inputs", billed)
        order: list[int] = []
        for k, item in enumerate(items):
            index = item.get("index") if isinstance(item, dict) else None
            if not isinstance(index, int) or isinstance(index, bool):
                raise _BadAnswer(f"data[{k}] has no integer 'index'", billed)
            if not 0 <= index < n:
                raise _BadAnswer(f"data[{k}] has index {index}, outside 0 to {n - 1}", billed)
            order.append(index)
        if len(set(order)) != n:
            seen: set[int] = set()
            twice = next(i for i in order if i in seen or seen.add(i))  # type: ignore[func-returns-value]
            raise _BadAnswer(f"index {twice} twice (and {n - len(set(order))} input(s) without a vector)", billed)
        rows: list[np.ndarray | None] = [None] * n
        for k, (item, index) in enumerate(zip(items, order, strict=True)):
            rows[index] = self._vector(item.get("embedding"), k, billed)
        lengths = [len(r) for r in rows if r is not None]
        dims = set(lengths)
        want = self.dim or max(dims, key=lengths.count)  # the dimension asked for, else most vectors' own
        if dims != {want}:
            bad = next(k for k, r in enumerate(rows) if r is not None and len(r) != want)
            expected = f"the {want} asked for (dimensions)" if self.spec.get("dimensions") else f"{want}"
            raise _BadAnswer(f"input {bad + 1}'s vector has {len(rows[bad])} values, not {expected}", billed)  # type: ignore[arg-type]
        vectors = np.stack(rows)  # type: ignore[arg-type]
        if not np.isfinite(vectors).all():
            bad = int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
            raise _BadAnswer(f"input {bad + 1}'s vector holds NaN or infinity", billed)
        if not np.abs(vectors).max(axis=1).all():  # no direction: cosine and normalising are undefined
            bad = int(np.flatnonzero(np.abs(vectors).max(axis=1) == 0)[0])
            raise _BadAnswer(f"input {bad + 1}'s vector is all zeros", billed)
        with self._lock:  # the first answer's dimension is every later one's (a server that changes it is wrong)
            if self.dim is None:
                self.dim = want
        if billed is None:  # the server did not say: the client's count
            billed = sum(counts)
        return vectors, billed, headers

    def _vector(self, value: Any, k: int, billed: int | None) -> np.ndarray:
        if isinstance(value, str):  # base64 of little-endian float32, as OpenAI sends when asked for it
            try:
                raw = base64.b64decode(value, validate=True)
                if len(raw) % 4:
                    raise ValueError("not whole float32 values")
                return np.frombuffer(raw, dtype="<f4").astype(np.float32)
            except ValueError:
                raise _BadAnswer(f"data[{k}]'s embedding is a string that is not base64 float32", billed) from None
        if (
            not isinstance(value, list)
            or not value
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value)
        ):
            raise _BadAnswer(f"data[{k}]'s embedding is not a list of numbers", billed)
        return np.asarray(value, dtype=np.float64).astype(np.float32)

    def _clean(self, text: str) -> str:
        """A server's text for a message: the key masked, whitespace folded, at most 300 characters."""
        if self._secret:
            text = text.replace(self._secret, "***")
        return re.sub(r"\s+", " ", text).strip()[:300]

    # ------------------------------------------------------------------ chunks

    def _submit(self, pool: ThreadPoolExecutor, texts: list[str], role: str, ids: Sequence[str]) -> _Chunk:
        cut, counts = self.cut(self.prepare(texts, role), role)
        digests = [text_digest(self._vector_key, t) for t in cut] if self.received is not None else None
        chunk = _Chunk(len(cut))
        todo = list(range(len(cut)))
        if digests is not None and self.received is not None:
            known = self.received.vectors
            chunk.cached = {i: known[digests[i]] for i in todo if digests[i] in known}
            todo = [i for i in todo if i not in chunk.cached]
        self.usage.inputs += len(cut)
        self.usage.cached += len(chunk.cached)
        for part in self.requests([counts[i] for i in todo]):
            where = todo[part]
            args = ([cut[i] for i in where], [counts[i] for i in where], [str(ids[i]) for i in where],
                    [digests[i] for i in where] if digests is not None else None)  # fmt: skip
            future: Future = Future()
            if not self._answered:  # a job's first request goes alone: a refused key or URL costs one request
                try:
                    future.set_result(self._request(*args))
                except (_Stopped, MiraclEvalError) as err:
                    future.set_exception(err)
            else:
                future = pool.submit(self._request, *args)
            chunk.parts.append((where, future))
        return chunk

    def _collect(self, chunk: _Chunk, progress: Callable[[int], None] | None = None) -> np.ndarray:
        rows: list[np.ndarray | None] = [None] * chunk.n
        for i, vector in chunk.cached.items():
            rows[i] = vector
        if chunk.cached and progress is not None:
            progress(len(chunk.cached))
        for where, future in chunk.parts:
            try:
                vectors = future.result()
            except _Stopped:
                raise self._error or ApiError("a request was not sent") from None
            for j, i in enumerate(where):
                rows[i] = vectors[j]
            if progress is not None:
                progress(len(where))
        if not chunk.n:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        out = np.stack(rows).astype(np.float32, copy=False)  # type: ignore[arg-type]
        if self.dim is None:
            self.dim = int(out.shape[1])
        elif out.shape[1] != self.dim:
            raise ApiError(
                f"the embeddings API at {self.url} returned vectors of dimension {out.shape[1]}, not {self.dim}"
            )
        return out

    @contextmanager
    def receiving(self, output: Any) -> Iterator[None]:
        """Keep the vectors answered while ``output`` is written (beside it); they are dropped once it is
        published, kept when the block fails (the next run of the job does not ask for them again)."""
        self.received = Received(output)
        try:
            yield
        except BaseException:
            self.received.close()
            raise
        else:
            self.received.discard()
        finally:
            self.received = None

    def encode_stream(
        self,
        chunks: Iterable[tuple[Any, Sequence[str]]],
        role: str,
        kinds: Sequence[str] = ("dense",),
        settings: Any = None,
        timings: Any = None,
        progress: Callable[[int], None] | None = None,
    ) -> Iterator[tuple[Any, dict[str, Any]]]:
        """``(key, {"dense": vectors})`` per chunk, in chunk order; a chunk's key is its ids (an array of
        docids or qids: an error names them) or anything else. The next chunks' requests are in flight
        while a chunk's results are handed over. An error stops every other request of the job (those in
        flight end, and what they bring back is kept) and is raised."""
        started = time.perf_counter()
        ahead = max(2, -(-int(self.spec["concurrency"]) * int(self.spec["inputs_per_request"]) // WINDOW) + 1)
        pool = ThreadPoolExecutor(int(self.spec["concurrency"]), thread_name_prefix="embeddings-api")
        pending: list[tuple[Any, _Chunk]] = []
        try:
            for key, texts in chunks:
                ids = _ids(key, len(texts))
                pending.append((key, self._submit(pool, list(texts), role, ids)))
                while len(pending) >= ahead:
                    k, chunk = pending.pop(0)
                    yield k, {"dense": self._collect(chunk, progress)}
            while pending:
                k, chunk = pending.pop(0)
                yield k, {"dense": self._collect(chunk, progress)}
        except BaseException as err:
            self._fail(err)
            raise
        finally:  # after an error: nothing more is sent, and those in flight are waited for (and kept)
            pool.shutdown(wait=True, cancel_futures=True)
            self.usage.seconds += time.perf_counter() - started

    def encode(self, texts: Sequence[str], role: str, batch_size: int = 0, host: Any = None) -> Any:
        """:class:`~miracl_eval.encoders.base.Encoded` of ``texts`` (dense only)."""
        from miracl_eval.encoders.base import Encoded

        if isinstance(texts, str):
            raise TypeError("encode() takes a sequence of texts, not a single string")
        chunks = [(None, texts[s : s + WINDOW]) for s in range(0, len(texts), WINDOW)] or [(None, [])]
        parts = [out["dense"] for _, out in self.encode_stream(chunks, role)]
        return Encoded(dense=np.concatenate(parts), sparse=None)

    def log_usage(self) -> None:
        u, price = self.usage, float(self.spec.get("price_per_million_tokens") or 0)
        rate = u.inputs / u.seconds if u.seconds else 0.0
        log.info(USAGE_LINE, self.model, u.inputs, u.cut, u.cached, u.requests, u.retries, u.failed, u.tokens,
                 u.usd(price), price, u.seconds, rate, self.pace.held)  # fmt: skip


#: the job's log line with what it sent and spent (the ledger has each request)
USAGE_LINE = (
    "embeddings API %s: %d inputs (%d cut to the token limit, %d answered before) in %d requests (%d retries, %d "
    "failed), %d tokens billed, $%.6f at $%g per 1M tokens, %.1f s (%.0f inputs/s; %.1f s paused as the provider "
    "asked)"
)


def _estimate(text: str) -> int:
    """Tokens of a text without a tokenizer: characters / 4 (as the cost plan estimates them)."""
    return max(1, round(len(text) / 4))


def _backoff(retry: int) -> float:
    """Seconds before retry ``retry`` (1, 2, ...): doubling from :data:`FIRST_BACKOFF`, at most
    :data:`MAX_BACKOFF`, with up to a quarter more at random (jobs retrying together spread out)."""
    return min(MAX_BACKOFF, FIRST_BACKOFF * 2 ** (retry - 1)) * (1 + random.random() / 4)


def _summary(notes: list[str]) -> str:
    """A request's failed tries, the same ones counted: ``429 (Rate limit reached.) x 3; 500: ...``."""
    counted: dict[str, int] = {}
    for note in notes:
        counted[note] = counted.get(note, 0) + 1
    return "; ".join(f"{n}{f' x {c}' if c > 1 else ''}" for n, c in counted.items())


def _message(err: Any) -> str:
    body = getattr(err, "body", None)
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and inner.get("message"):
            return str(inner["message"])[:300]
    return str(getattr(err, "message", err))[:300]


def _ids(key: Any, n: int) -> list[str]:
    """The chunk's ids for error messages (its key when that is a list or array of n ids)."""
    try:
        values = key.to_pylist() if hasattr(key, "to_pylist") else list(key)
    except TypeError:
        values = []
    return [str(v) for v in values] if len(values) == n else [f"text {i + 1}" for i in range(n)]


#: characters an HTTP header can carry (a key with others, a pasted newline say, is refused before it is sent)
_HEADER_SAFE = re.compile(r"[\x21-\x7e]+")


def client_for(spec: Mapping[str, Any], key_name: str = "api_key_env") -> Any:
    """An ``openai`` client for the spec's server, with the key from ``api_key_env`` (``key_name``: its config
    key in errors). It retries nothing itself and follows no redirect (the encoder decides)."""
    import openai

    var = spec["api_key_env"]
    key = os.environ.get(var)
    if key is None:
        raise ConfigError(key_name, f"the environment variable {var} that should hold the API key is not set")
    if not key.strip():
        raise ConfigError(key_name, f"the environment variable {var} that should hold the API key is empty")
    if not _HEADER_SAFE.fullmatch(key):
        raise ConfigError(key_name, f"the API key in ${var} holds a space, a line break or another character a "
                                    "header cannot carry (its value is not shown)")  # fmt: skip
    return openai.OpenAI(
        base_url=spec["base_url"],
        api_key=key,
        max_retries=0,
        timeout=float(spec["timeout"]),
        http_client=openai.DefaultHttpxClient(follow_redirects=False, timeout=float(spec["timeout"])),
    )


def load(spec: Mapping[str, Any], device: str = "auto", dtype: str = "auto") -> ApiEncoder:
    """The API encoder of a resolved spec (``device`` and ``dtype`` do not apply: the server decides); a job's
    run (``spec["api_run"]``: :class:`ApiEncoder`'s ``run``) records to the model's ledger and keeps to its
    ``max_usd``."""
    run = dict(spec.get("api_run") or {})
    name = f"models.{run['model']}." if run.get("model") else ""
    if insecure_url(spec["base_url"]) and not spec.get("allow_insecure"):
        raise ConfigError(
            f"{name}base_url", f"{spec['base_url']} is neither https:// nor loopback (allow_insecure: true)"
        )
    if run.get("plan"):
        run.update(_plan_facts(run["plan"]))
    encoder = ApiEncoder(spec, client_for(spec, f"{name}api_key_env"), load_tokenizer(spec), run)
    log.info("embeddings API %s at %s; inputs counted with %s; pace %s%s", encoder.model, spec["base_url"],
             encoder.tokenizer.name if encoder.tokenizer else "nothing (no tokenizer)", encoder.pace.describe(),
             f" (1/{spec.get('api_jobs')} of the model's limits)" if encoder.pace.describe() != "no limit" else "")  # fmt: skip
    return encoder


def _plan_facts(path: Any) -> dict[str, Any]:
    """What a job reads of its model's cost plan: its tokens and its digest of what is sent."""
    try:
        plan = json.loads(Path(path).read_text(encoding="utf-8"))
        return {"plan_tokens": int(plan["tokens"]), "settings": str(plan.get("settings") or "")}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise InputError(path, f"cannot read the cost plan ({err})") from None
