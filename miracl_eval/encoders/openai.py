"""The openai family: dense vectors from an embeddings API that speaks OpenAI's (``POST {base_url}/embeddings``):
OpenAI's text-embedding-3 models, or an open model served by vLLM, Hugging Face TEI, infinity, Ollama or
a LiteLLM proxy.

* **Requests** hold at most ``inputs_per_request`` texts and ``tokens_per_request`` tokens, each text at
  most ``passage_max_length`` / ``query_max_length`` tokens, cut with the model's tokenizer (tiktoken's
  for OpenAI's models; ``tokenizer`` names another: ``tiktoken:ENCODING``, or a Hugging Face tokenizer,
  a folder or hub id). OpenAI's limits (:data:`miracl_eval.encoders.registry.MAX_INPUTS` and beside it,
  the settings' defaults): at most 2,048 inputs, 8,192 tokens per input and 300,000 tokens summed over a
  request's inputs, no empty string (an empty text is sent as one space). Without a tokenizer nothing is counted or cut, and a
  server's refusal of a long input names the passage.
* ``concurrency`` requests are in flight at once. 429 and 5xx answers, timeouts and dropped connections
  are retried with backoff by the ``openai`` client (``max_retries``; it honours ``Retry-After``); a
  job's first request goes alone, and a 401 or 403 stops it there, naming the variable that holds the
  key (``api_key_env``), never the key;
  a 400 is narrowed down to the input the server refused, named by its docid.
* Vectors come back as float32 in input order, the API's own (``dimensions`` is passed on when set);
  the job counts the tokens the API says it billed.

The key is read from the environment when a job starts and goes nowhere else: not into a spec, a log,
a Parquet file or a report.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from miracl_eval.encoders.checkpoints import insecure_url
from miracl_eval.errors import ConfigError, InputError, MiraclEvalError

log = logging.getLogger(__name__)

#: the vectors' dimension of OpenAI's models when ``dimensions`` is not set (their model pages)
KNOWN_DIMS = {"text-embedding-3-large": 3072, "text-embedding-3-small": 1536, "text-embedding-ada-002": 1536}
#: texts read ahead of the requests in flight (as many windows as it takes to keep ``concurrency`` busy)
WINDOW = 4096


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
    """What a job sent: requests, inputs, inputs cut, and tokens (the API's count when it gives one)."""

    requests: int = 0
    inputs: int = 0
    cut: int = 0
    tokens: int = 0
    seconds: float = 0.0

    def usd(self, price_per_million: float) -> float:
        return self.tokens * price_per_million / 1e6

    def facts(self, price_per_million: float) -> dict[str, Any]:
        """What a block manifest records of it: requests, inputs, inputs cut, tokens and dollars."""
        return {"requests": self.requests, "inputs": self.inputs, "cut": self.cut, "tokens": self.tokens,
                "usd": round(self.usd(price_per_million), 6)}  # fmt: skip


class ApiEncoder:
    """An embeddings API as an encoder: use :func:`load`."""

    outputs = ("dense",)
    precision = "api"  # what the model runs in, as the shards record it
    device = "api"

    def __init__(self, spec: Mapping[str, Any], client: Any, tokenizer: Tokenizer | None) -> None:
        self.spec, self.client, self.tokenizer = dict(spec), client, tokenizer
        self.model = spec["checkpoint"]
        self.usage = Usage()
        self.dim: int | None = spec.get("dimensions") or KNOWN_DIMS.get(self.model)
        self._answered = False  # whether the API has answered a request of this job yet

    def ensure_dim(self) -> int:
        """The vectors' dimension: ``dimensions``, an OpenAI model's, or one request of one short text."""
        if self.dim is None:
            vectors, tokens = self._embed(["dimension"], ["(the dimension probe)"])
            self._answered = True
            self.usage.requests += 1
            self.usage.tokens += tokens
            self.dim = int(vectors.shape[1])
        return self.dim

    # ------------------------------------------------------------------ texts

    def prepare(self, texts: Sequence[str], role: str) -> list[str]:
        prefix = self.spec[f"{role}_prefix"] or ""
        return [prefix + t for t in texts]

    def cut(self, texts: list[str], role: str) -> tuple[list[str], list[int]]:
        """The texts cut to the role's token limit (as the tokenizer counts), and their token counts
        (0 each without a tokenizer)."""
        if self.tokenizer is None:
            return [t or " " for t in texts], [0] * len(texts)
        limit = int(self.spec[f"{role}_max_length"])
        ids = self.tokenizer.encode(texts)
        out, counts = [], []
        for text, tokens in zip(texts, ids, strict=True):
            if len(tokens) > limit:
                text, tokens = self.tokenizer.decode(tokens[:limit]), tokens[:limit]
                self.usage.cut += 1
            out.append(text or " ")
            counts.append(max(1, len(tokens)))
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

    def _embed(self, texts: list[str], ids: Sequence[str]) -> tuple[np.ndarray, int]:
        """One request's vectors (float32, input order) and billed tokens; a refused input names its id."""
        import openai

        kwargs: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.spec.get("dimensions"):
            kwargs["dimensions"] = int(self.spec["dimensions"])
        try:
            reply = self.client.embeddings.create(**kwargs)
        except (openai.AuthenticationError, openai.PermissionDeniedError) as err:
            raise ConfigError(
                "api_key_env",
                f"{self.spec['base_url']} refused the key in ${self.spec['api_key_env']} ({err.status_code}: "
                f"{_message(err)})",
            ) from None
        except openai.BadRequestError as err:
            if len(texts) > 1:  # narrow it down to the input the server refused
                half = len(texts) // 2
                a, ta = self._embed(texts[:half], ids[:half])
                b, tb = self._embed(texts[half:], ids[half:])
                return np.concatenate([a, b]), ta + tb
            raise InputError(ids[0], f"the embeddings API refused this input (400: {_message(err)})") from None
        except openai.APIError as err:  # retries spent: rate limits, server errors, timeouts
            raise MiraclEvalError(
                f"the embeddings API at {self.spec['base_url']} failed after {self.spec['max_retries']} retries "
                f"({type(err).__name__}: {_message(err)})"
            ) from None
        data = sorted(reply.data, key=lambda d: d.index)
        if len(data) != len(texts):
            raise MiraclEvalError(f"the embeddings API returned {len(data)} vectors for {len(texts)} inputs")
        vectors = np.asarray([d.embedding for d in data], dtype=np.float32)
        usage = getattr(reply, "usage", None)
        return vectors, int(getattr(usage, "prompt_tokens", 0) or 0)

    def _submit(self, pool: ThreadPoolExecutor, texts: list[str], role: str, ids: Sequence[str]) -> list[Future]:
        cut, counts = self.cut(self.prepare(texts, role), role)
        self.usage.inputs += len(cut)
        futures: list[Future] = []
        for part in self.requests(counts):
            if not self._answered:  # a job's first request goes alone: a refused key or URL costs one request
                first: Future = Future()
                first.set_result(self._embed(cut[part], list(ids[part])))
                self._answered = True
                futures.append(first)
            else:
                futures.append(pool.submit(self._embed, cut[part], list(ids[part])))
        return futures

    def _collect(self, futures: list[Future], n: int, progress: Callable[[int], None] | None = None) -> np.ndarray:
        parts = []
        for future in futures:
            vectors, tokens = future.result()
            self.usage.requests += 1
            self.usage.tokens += tokens
            parts.append(vectors)
            if progress is not None:
                progress(len(vectors))
        out = np.concatenate(parts) if parts else np.zeros((0, self.dim or 0), dtype=np.float32)
        if out.shape[0] != n:  # pragma: no cover - each request's count is checked
            raise MiraclEvalError(f"{out.shape[0]} vectors for {n} texts")
        if self.dim is None and n:
            self.dim = int(out.shape[1])
        elif n and out.shape[1] != self.dim:
            raise MiraclEvalError(f"the embeddings API returned vectors of dimension {out.shape[1]}, not {self.dim}")
        return out

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
        while a chunk's results are handed over."""
        started = time.perf_counter()
        ahead = max(2, -(-int(self.spec["concurrency"]) * int(self.spec["inputs_per_request"]) // WINDOW) + 1)
        with ThreadPoolExecutor(int(self.spec["concurrency"]), thread_name_prefix="embeddings-api") as pool:
            pending: list[tuple[Any, int, list[Future]]] = []
            try:
                for key, texts in chunks:
                    ids = _ids(key, len(texts))
                    pending.append((key, len(texts), self._submit(pool, list(texts), role, ids)))
                    while len(pending) >= ahead:
                        k, n, futures = pending.pop(0)
                        yield k, {"dense": self._collect(futures, n, progress)}
                while pending:
                    k, n, futures = pending.pop(0)
                    yield k, {"dense": self._collect(futures, n, progress)}
            finally:
                for _, _, futures in pending:  # an error: nothing more is sent
                    for future in futures:
                        future.cancel()
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
        u, price = self.usage, float(self.spec["price_per_million_tokens"])
        rate = u.inputs / u.seconds if u.seconds else 0.0
        log.info(USAGE_LINE, self.model, u.inputs, u.cut, u.requests, u.tokens, u.usd(price), price, u.seconds, rate)


#: the job's log line with what it sent and spent (:func:`logged_usage` reads it back: the report's stage costs)
USAGE_LINE = (
    "embeddings API %s: %d inputs (%d cut to the token limit) in %d requests, %d tokens billed, $%.6f at $%g "
    "per 1M tokens, %.1f s (%.0f inputs/s)"
)
_USAGE = re.compile(
    r"embeddings API \S+: (\d+) inputs \((\d+) cut to the token limit\) in (\d+) requests, (\d+) tokens billed, "
    r"\$([0-9.]+)"
)


def logged_usage(text: str) -> tuple[int, int, int, int, float] | None:
    """``(inputs, cut, requests, tokens, usd)`` of the last usage line in a job's log text; None without one."""
    found = _USAGE.findall(text)
    if not found:
        return None
    *counts, usd = found[-1]
    inputs, cut, requests, tokens = (int(v) for v in counts)
    return inputs, cut, requests, tokens, float(usd)


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


def client_for(spec: Mapping[str, Any]) -> Any:
    """An ``openai`` client for the spec's server, with the key from ``api_key_env``."""
    import openai

    var = spec["api_key_env"]
    key = os.environ.get(var)
    if not key:
        raise ConfigError("api_key_env", f"the environment variable {var} that should hold the API key is not set")
    return openai.OpenAI(
        base_url=spec["base_url"], api_key=key, max_retries=int(spec["max_retries"]), timeout=float(spec["timeout"])
    )


def load(spec: Mapping[str, Any], device: str = "auto", dtype: str = "auto") -> ApiEncoder:
    """The API encoder of a resolved spec (``device`` and ``dtype`` do not apply: the server decides)."""
    if insecure_url(spec["base_url"]) and not spec.get("allow_insecure"):
        raise ConfigError("base_url", f"{spec['base_url']} is neither https:// nor loopback (allow_insecure: true)")
    encoder = ApiEncoder(spec, client_for(spec), load_tokenizer(spec))
    log.info("embeddings API %s at %s; inputs counted with %s", encoder.model, spec["base_url"],
             encoder.tokenizer.name if encoder.tokenizer else "nothing (no tokenizer)")  # fmt: skip
    return encoder
