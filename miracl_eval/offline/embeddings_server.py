"""A local server that speaks OpenAI's embeddings API over one of this project's dense models: what the
tests and ``benchmarks/api_speed.py`` send requests to, offline (``POST /v1/embeddings``, a bearer key,
float or base64 vectors, OpenAI's input limits and its error bodies).

``latency`` adds seconds to every answer (a remote endpoint's round trip). It can misbehave on purpose: ``faults`` maps a request's number (1, 2, ...) to ``429`` (with
``Retry-After: 1``), ``500``, ``drop`` (the connection closed without an answer) or ``slow:SECONDS``;
an input holding ``reject_marker`` gets a 400. Every request body is kept in ``received``.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from miracl_eval.encoders.registry import MAX_INPUTS


class EmbeddingsServer:
    """``with EmbeddingsServer(encoder) as server: server.base_url`` (``http://127.0.0.1:PORT/v1``; ``port``
    0: a free one)."""

    def __init__(
        self,
        encoder: Any,
        key: str = "test-key",
        faults: Mapping[int, str] | None = None,
        reject_marker: str | None = None,
        batch_size: int = 32,
        port: int = 0,
        latency: float = 0.0,
    ) -> None:
        self.encoder, self.key, self.faults = encoder, key, dict(faults or {})
        self.reject_marker, self.batch_size, self.latency = reject_marker, batch_size, latency
        self.received: list[dict[str, Any]] = []
        self.count = 0
        self._lock = threading.Lock()  # one model: one batch at a time
        self._count_lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="embeddings-server", daemon=True)

    def __enter__(self) -> EmbeddingsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def embed(self, texts: list[str], dimensions: int | None) -> tuple[np.ndarray, int]:
        with self._lock:
            vectors = self.encoder.encode(texts, "passage", self.batch_size).dense
            tokens = sum(len(ids) for ids in self.encoder.tokenizer(texts, add_special_tokens=False)["input_ids"])
        if dimensions:
            vectors = vectors[:, :dimensions]
            vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors.astype(np.float32), tokens

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                return

            def _answer(self, status: int, body: dict[str, Any], headers: Mapping[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, message: str, kind: str, headers: Mapping[str, str] | None = None) -> None:
                self._answer(status, {"error": {"message": message, "type": kind, "code": None}}, headers)

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._count_lock:
                    server.count += 1
                    number = server.count
                    server.received.append(body)
                fault = server.faults.get(number, "")
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if fault.startswith("slow:"):
                    time.sleep(float(fault.split(":", 1)[1]))
                if server.latency:  # a remote endpoint's round trip and queue
                    time.sleep(server.latency)
                if self.path.rstrip("/") != "/v1/embeddings":
                    self._error(404, f"no route {self.path}", "invalid_request_error")
                    return
                if self.headers.get("Authorization") != f"Bearer {server.key}":
                    self._error(401, "Incorrect API key provided.", "invalid_request_error")
                    return
                if fault == "429":
                    self._error(429, "Rate limit reached.", "requests", {"Retry-After": "1"})
                    return
                if fault == "500":
                    self._error(500, "The server had an error.", "server_error")
                    return
                texts = body.get("input")
                texts = [texts] if isinstance(texts, str) else texts
                if not isinstance(texts, list) or not texts or len(texts) > MAX_INPUTS:
                    self._error(400, f"'input' must be 1 to {MAX_INPUTS} strings", "invalid_request_error")
                    return
                if any(not isinstance(t, str) or not t for t in texts):
                    self._error(400, "'input' cannot contain an empty string", "invalid_request_error")
                    return
                if server.reject_marker and any(server.reject_marker in t for t in texts):
                    self._error(400, "This input cannot be embedded.", "invalid_request_error")
                    return
                vectors, tokens = server.embed(texts, body.get("dimensions"))
                if body.get("encoding_format") == "base64":
                    items = [base64.b64encode(v.tobytes()).decode() for v in vectors]
                else:
                    items = [v.tolist() for v in vectors]
                self._answer(200, {
                    "object": "list",
                    "model": body.get("model"),
                    "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(items)],
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                })  # fmt: skip

        return Handler
