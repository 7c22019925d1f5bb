"""A local server that speaks OpenAI's embeddings API over one of this project's dense models: what the
tests and ``benchmarks/api_speed.py`` send requests to, offline (``POST /v1/embeddings``, a bearer key,
float or base64 vectors, OpenAI's input limits and its error bodies).

``latency`` adds seconds to every answer (a remote endpoint's round trip); ``max_input_tokens`` refuses
(400) an input longer than that, as the model counts it; ``dimensions=False`` refuses (400) every request
that asks for ``dimensions``, as a model without shortened vectors does.

**Rate limits.** ``tokens_per_minute`` and ``requests_per_minute`` are enforced as a provider does: a
bucket of each holding ``burst_seconds`` of the rate (a minute's by default), full at the start; every
answer carries ``x-ratelimit-limit-*``, ``x-ratelimit-remaining-*`` and ``x-ratelimit-reset-*``
(``1.5s``); a request over either gets a 429 with ``Retry-After`` (whole seconds) and ``retry-after-ms``.
``answers`` records each request's number, status, billed tokens and the time it was answered.

**Faults, on purpose.** ``faults`` maps a request's number (1, 2, ...; ``"*"``: every request not named)
to one of:

* ``429`` (``Retry-After: 1``), ``429:SECONDS`` (that ``Retry-After``), ``429:none`` (no ``Retry-After``),
  ``500``, ``status:CODE`` (that status, an error body), ``drop`` (the connection closed without an
  answer), ``slow:SECONDS``, ``hang`` (no answer until the server stops), ``redirect`` (302 elsewhere);
* a 200 that is wrong: ``html`` (a web page), ``not-json``, ``cut`` (half of the body, then the connection
  closed), ``fewer`` and ``more`` (embeddings than inputs), ``shuffled`` (the ``data`` items in reverse
  order, each with its right ``index``: a correct answer), ``no-index``, ``repeated-index``,
  ``short-vector`` (one vector a value short), ``nan``, ``inf``, ``zero`` (a vector of zeros), ``no-usage``,
  ``exhausted`` (right, but its headers say no tokens are left for 100,000 s);
* ``echo-key``: a 400 whose message repeats the key it was sent.

An input holding ``reject_marker`` gets a 400. Every request body is kept in ``received``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from miracl_eval.encoders.registry import MAX_INPUTS

#: the longest a ``hang`` fault holds a request when the server is not stopped (no wait without a bound)
HANG_SECONDS = 600.0


class StubModel:
    """What the server needs of a model, at no cost: a unit vector of ``dim`` values drawn from each text's
    hash (the same text, the same vector: :meth:`vector`), and tokens counted by ``tokenizer`` (a Hugging
    Face tokenizer; None: split on whitespace)."""

    def __init__(self, dim: int = 32, tokenizer: Any = None) -> None:
        self.dim = dim
        self._tokenizer = tokenizer

    def vector(self, text: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:8], "little")
        v = np.random.default_rng(seed).standard_normal(self.dim)
        return (v / np.linalg.norm(v)).astype(np.float32)

    def encode(self, texts: list[str], role: str, batch_size: int) -> Any:  # noqa: ARG002 - the encoders' signature
        from miracl_eval.encoders.base import Encoded

        return Encoded(dense=np.stack([self.vector(t) for t in texts]), sparse=None)

    def tokenizer(self, texts: list[str], add_special_tokens: bool = False) -> dict[str, list[list[Any]]]:
        if self._tokenizer is not None:
            return {"input_ids": self._tokenizer(texts, add_special_tokens=add_special_tokens)["input_ids"]}
        return {"input_ids": [t.split() for t in texts]}


class _Bucket:
    """A provider's rate limit: ``rate`` a second, holding ``capacity``, full at the start."""

    def __init__(self, per_minute: float, burst_seconds: float) -> None:
        self.limit = per_minute
        self.rate = per_minute / 60
        self.capacity = max(1.0, self.rate * burst_seconds)
        self.level = self.capacity
        self.at = time.monotonic()

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
        self.at = now

    def wait_for(self, n: float) -> float:
        """Seconds until ``n`` is there (0: now)."""
        return max(0.0, (min(n, self.capacity) - self.level) / self.rate)

    def reset(self) -> float:
        """Seconds until the bucket is full."""
        return (self.capacity - self.level) / self.rate


class EmbeddingsServer:
    """``with EmbeddingsServer(encoder) as server: server.base_url`` (``http://127.0.0.1:PORT/v1``; ``port``
    0: a free one)."""

    def __init__(
        self,
        encoder: Any,
        key: str = "test-key",
        faults: Mapping[int | str, str] | None = None,
        reject_marker: str | None = None,
        batch_size: int = 32,
        port: int = 0,
        latency: float = 0.0,
        tokens_per_minute: float | None = None,
        requests_per_minute: float | None = None,
        burst_seconds: float = 60.0,
        max_input_tokens: int | None = None,
        dimensions: bool = True,
    ) -> None:
        self.encoder, self.key, self.faults = encoder, key, dict(faults or {})
        self.reject_marker, self.batch_size, self.latency = reject_marker, batch_size, latency
        self.max_input_tokens, self.dimensions = max_input_tokens, dimensions
        self.received: list[dict[str, Any]] = []
        #: per request: ``{"number", "status", "tokens" (billed: a 200's), "at" (monotonic time answered)}``
        self.answers: list[dict[str, Any]] = []
        self.count = 0
        self._tokens = _Bucket(tokens_per_minute, burst_seconds) if tokens_per_minute else None
        self._requests = _Bucket(requests_per_minute, burst_seconds) if requests_per_minute else None
        self._lock = threading.Lock()  # one model: one batch at a time
        self._count_lock = threading.Lock()
        self._stopping = threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="embeddings-server", daemon=True)

    def __enter__(self) -> EmbeddingsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def billed(self) -> int:
        """Tokens of every 200 answer."""
        with self._count_lock:
            return sum(a["tokens"] for a in self.answers if a["status"] == 200)

    def count_tokens(self, texts: list[str]) -> list[int]:
        return [len(ids) for ids in self.encoder.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    def embed(self, texts: list[str], dimensions: int | None) -> tuple[np.ndarray, int]:
        with self._lock:
            vectors = self.encoder.encode(texts, "passage", self.batch_size).dense
            tokens = sum(self.count_tokens(texts))
        if dimensions:
            vectors = vectors[:, :dimensions]
            vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors.astype(np.float32), tokens

    def _limits(self, tokens: int) -> tuple[float, dict[str, str]]:
        """Take a request of ``tokens`` from the buckets: (seconds to wait, 0 if taken; the rate-limit headers)."""
        now = time.monotonic()
        with self._count_lock:
            buckets = [(name, b, n) for name, b, n in (("tokens", self._tokens, tokens), ("requests", self._requests, 1))
                       if b is not None]  # fmt: skip
            for _, bucket, _ in buckets:
                bucket.refill(now)
            wait = max([bucket.wait_for(n) for _, bucket, n in buckets] or [0.0])
            if wait == 0:
                for _, bucket, n in buckets:
                    bucket.level -= n
            headers: dict[str, str] = {}
            for name, bucket, _ in buckets:
                headers[f"x-ratelimit-limit-{name}"] = str(int(bucket.limit))
                headers[f"x-ratelimit-remaining-{name}"] = str(max(0, int(bucket.level)))
                headers[f"x-ratelimit-reset-{name}"] = f"{bucket.reset():.3f}s"
        return wait, headers

    def _answered(self, number: int, status: int, tokens: int = 0) -> None:
        with self._count_lock:
            self.answers.append({"number": number, "status": status, "tokens": tokens, "at": time.monotonic()})

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                return

            def _send(self, status: int, data: bytes, kind: str, headers: Mapping[str, str] | None = None,
                      length: int | None = None) -> None:  # fmt: skip
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data) if length is None else length))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _answer(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
                self._send(status, json.dumps(body).encode(), "application/json", headers)

            def _error(self, status: int, message: str, kind: str, headers: Mapping[str, str] | None = None) -> None:
                server._answered(self.number, status)
                self._answer(status, {"error": {"message": message, "type": kind, "code": None}}, headers)

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._count_lock:
                    server.count += 1
                    self.number = number = server.count
                    server.received.append(body)
                fault = server.faults.get(number, server.faults.get("*", ""))
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if fault == "hang":
                    server._stopping.wait(HANG_SECONDS)
                    self.close_connection = True
                    return
                if fault.startswith("slow:"):
                    time.sleep(float(fault.split(":", 1)[1]))
                if server.latency:  # a remote endpoint's round trip and queue
                    time.sleep(server.latency)
                if self.path.rstrip("/") != "/v1/embeddings":
                    self._error(404, f"no route {self.path}", "invalid_request_error")
                    return
                sent_key = self.headers.get("Authorization", "")
                if fault == "echo-key":
                    self._error(400, f"Bad header: {sent_key!r}", "invalid_request_error")
                    return
                if sent_key != f"Bearer {server.key}":
                    self._error(401, "Incorrect API key provided.", "invalid_request_error")
                    return
                if fault == "redirect":
                    server._answered(number, 302)
                    self._send(302, b"", "text/plain", {"Location": "http://10.0.0.9/v1/embeddings"})
                    return
                if fault.startswith("429"):
                    after = fault.partition(":")[2] or "1"
                    headers = {} if after == "none" else {"Retry-After": after}
                    self._error(429, "Rate limit reached.", "requests", headers)
                    return
                if fault == "500" or fault.startswith("status:"):
                    code = int(fault.partition(":")[2] or 500)
                    self._error(code, "The server had an error.", "server_error")
                    return
                texts = body.get("input")
                texts = [texts] if isinstance(texts, str) else texts
                if not isinstance(texts, list) or not texts or len(texts) > MAX_INPUTS:
                    self._error(400, f"'input' must be 1 to {MAX_INPUTS} strings", "invalid_request_error")
                    return
                if any(not isinstance(t, str) or not t for t in texts):
                    self._error(400, "'input' cannot contain an empty string", "invalid_request_error")
                    return
                if body.get("dimensions") and not server.dimensions:
                    self._error(400, "This model does not support specifying dimensions.", "invalid_request_error")
                    return
                if server.reject_marker and any(server.reject_marker in t for t in texts):
                    self._error(400, "This input cannot be embedded.", "invalid_request_error")
                    return
                counts = server.count_tokens(texts) if (server.max_input_tokens or server._tokens) else []
                if server.max_input_tokens and max(counts) > server.max_input_tokens:
                    self._error(400, f"This model's maximum context length is {server.max_input_tokens} tokens, "
                                     f"however you requested {max(counts)} tokens.", "invalid_request_error")  # fmt: skip
                    return
                wait, limits = server._limits(sum(counts))
                if wait > 0:
                    headers = {**limits, "Retry-After": str(math.ceil(wait)), "retry-after-ms": str(int(wait * 1000))}
                    self._error(429, "Rate limit reached for tokens per min.", "tokens", headers)
                    return
                vectors, tokens = server.embed(texts, body.get("dimensions"))
                self._embeddings(body, fault, vectors, tokens, limits)

            def _embeddings(self, body: dict, fault: str, vectors: np.ndarray, tokens: int, headers: dict) -> None:
                if fault == "html":
                    server._answered(self.number, 200, tokens)
                    self._send(200, b"<!DOCTYPE html><html><body>Please sign in</body></html>", "text/html", headers)
                    return
                if fault == "not-json":
                    server._answered(self.number, 200, tokens)
                    self._send(200, b'{"object": "list", "data": [', "application/json", headers)
                    return
                if body.get("encoding_format") == "base64":
                    items: list[Any] = [base64.b64encode(v.tobytes()).decode() for v in vectors]
                else:
                    items = [v.tolist() for v in vectors]
                if fault in ("nan", "inf"):
                    items[-1][0] = float(fault)
                if fault == "zero":
                    items[-1] = [0.0] * len(items[-1])
                if fault == "exhausted":  # the key's tokens spent for more than a day
                    headers = {**headers, "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "100000s"}
                if fault == "short-vector":
                    items[0] = items[0][:-1]
                data = [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(items)]
                if fault == "fewer":
                    data = data[:-1]
                elif fault == "more":
                    data.append({**data[0], "index": len(data)})
                elif fault == "shuffled":
                    data.reverse()
                elif fault == "no-index":
                    del data[-1]["index"]
                elif fault == "repeated-index" and len(data) > 1:
                    data[-1]["index"] = 0
                answer: dict[str, Any] = {"object": "list", "model": body.get("model"), "data": data}
                if fault != "no-usage":
                    answer["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
                server._answered(self.number, 200, tokens)
                encoded = json.dumps(answer).encode()
                if fault == "cut":  # the promised length, half of it sent, the connection closed
                    self._send(200, encoded[: len(encoded) // 2], "application/json", headers, len(encoded))
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self._send(200, encoded, "application/json", headers)

        return Handler
