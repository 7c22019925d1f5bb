"""An embeddings API as a model in a real run: a server in the test speaks OpenAI's embeddings API over the
real multilingual-e5-small, and the API model's run equals the local me5-small's (#30)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from miracl_eval.config.models import resolve_model
from miracl_eval.encoders.registry import get_family
from miracl_eval.offline.embeddings_server import EmbeddingsServer
from tests.helpers import planned_jobs, sample_config, snakemake, write_config

LANG = "sw"
KEY_ENV, KEY = "MIRACL_EVAL_TEST_API_KEY", "sk-workflow-test"
SHARD = 40  # the sample's Swahili passages in four shards of one block


@pytest.fixture(scope="module")
def served(me5_small):
    family = get_family("dense")
    spec = resolve_model("me5-small", {"checkpoint": str(me5_small), "query_prefix": "", "passage_prefix": ""})
    return family.load(spec, device="cpu")


def _config(server: EmbeddingsServer, **api) -> dict:
    model = {"family": "openai", "model": "intfloat/multilingual-e5-small", "base_url": server.base_url,
             "api_key_env": KEY_ENV, "tokenizer": "resources/models/me5-small", "dimensions": 384,
             "query_prefix": "query: ", "passage_prefix": "passage: ", "query_max_length": 510,
             "passage_max_length": 510, "inputs_per_request": 10, "max_retries": 0, **api}  # fmt: skip
    return sample_config(
        [LANG], threads=1, methods=["me5-small/dense", "me5-api/dense"], hybrids={}, rerankers={},
        models={"me5-small": {"checkpoint": "resources/models/me5-small"}, "me5-api": model},
        encoder={"device": "cpu", "batch_size": 8, "shard_size": SHARD},
    )  # fmt: skip


def _same_runs(work: Path, models: tuple[str, str] = ("me5-api", "me5-small")) -> None:
    """The same hits, ranks equal but where two scores are within 1e-5 (a near tie), scores to 1e-5."""
    ours, local = (pq.read_table(work / f"runs/miracl/{LANG}/{m}/dense.parquet") for m in models)
    assert ours["qid"].to_pylist() == local["qid"].to_pylist() and len(ours) > 100
    for a, b, sa, sb in zip(*(t[c].to_pylist() for t in (ours, local) for c in ("docid",)),
                            ours["score"].to_pylist(), local["score"].to_pylist(), strict=True):  # fmt: skip
        assert abs(sa - sb) <= 1e-5 and (a == b or abs(sa - sb) <= 1e-5)
    by_doc = {(q, d): s for q, d, s in zip(*(local[c].to_pylist() for c in ("qid", "docid", "score")), strict=True)}
    for q, d, s in zip(*(ours[c].to_pylist() for c in ("qid", "docid", "score")), strict=True):
        assert abs(by_doc[(q, d)] - s) <= 1e-5


def test_an_api_model_runs_as_the_local_model(served, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    block = f"resources/miracl/encoded/me5-api/corpus/{LANG}/blocks/00000-00003.json"
    with EmbeddingsServer(served, key=KEY) as server:
        port = server.httpd.server_address[1]  # every server below at the same address (the same base_url)
        # the cost guard: a plan over max_usd stops the run before any request
        guarded = write_config(tmp_path, _config(server, price_per_million_tokens=1000.0), "guarded.yaml")
        proc = snakemake(tmp_path, guarded, "results/miracl_ndcg.tsv", check=False)
        assert proc.returncode != 0 and "models.me5-api.max_usd" in proc.stdout + proc.stderr
        assert "more than max_usd $0" in (tmp_path / "logs/miracl/api_cost_plan/me5-api.log").read_text()
        assert server.count == 0 and not (tmp_path / "resources/miracl/encoded/me5-api/cost_plan.json").exists()
        # a wrong key: the first request stops the job, naming the variable (never the key), and no shard is left
        monkeypatch.setenv(KEY_ENV, "sk-wrong")
        cfg = write_config(tmp_path, _config(server))
        assert snakemake(tmp_path, cfg, block, check=False).returncode != 0
        assert server.count == 1  # the job's first request goes alone
        log = (tmp_path / f"logs/miracl/encode_corpus_api_dense/me5-api/{LANG}/00000-00003.log").read_text()
        assert f"refused the key in ${KEY_ENV} (401" in log and "sk-wrong" not in log
        assert not list((tmp_path / "resources/miracl/encoded/me5-api").rglob("*.parquet"))
        monkeypatch.setenv(KEY_ENV, KEY)
    # a job that fails at its third shard (the server's 9th request: four requests of 10 passages a shard,
    # the first alone, then in flight together, so all four of the third shard's are sent) keeps the two
    # it finished
    with EmbeddingsServer(served, key=KEY, faults={9: "500"}, port=port) as server:
        cfg = write_config(tmp_path, _config(server))
        assert snakemake(tmp_path, cfg, block, check=False).returncode != 0
        assert server.count == 12
    shards = tmp_path / f"resources/miracl/encoded/me5-api/corpus/{LANG}/dense"
    assert sorted(p.name for p in shards.glob("*.parquet")) == ["00000.parquet", "00001.parquet"]
    with EmbeddingsServer(served, key=KEY, port=port) as server:
        cfg = write_config(tmp_path, _config(server))
        snakemake(tmp_path, cfg, "results/miracl_ndcg.tsv")
        corpus_inputs = [t for b in server.received for t in b["input"] if t.startswith("passage: ")]
        assert len(corpus_inputs) == 160 - 2 * SHARD  # the two finished shards were not sent again
        _same_runs(tmp_path)
        sent = server.count
        snakemake(tmp_path, cfg, "results/miracl_ndcg.tsv")  # nothing changed: nothing sent
        assert server.count == sent
        # throughput settings re-run nothing; a new budget plans again and re-runs no encoding
        faster = write_config(tmp_path, _config(server, concurrency=3, max_retries=2), "faster.yaml")
        assert planned_jobs(snakemake(tmp_path, faster, "results/miracl_ndcg.tsv", args=("-n",))) == {}
        budget = write_config(tmp_path, _config(server, max_usd=5.0), "budget.yaml")
        assert planned_jobs(snakemake(tmp_path, budget, "results/miracl_ndcg.tsv", args=("-n",))) == {
            "api_cost_plan": 1
        }
        # views of the API model's encodings and of the local model's, both at 128 dimensions: nothing is sent
        # again, and the two equal each other as the full runs do
        views = _config(server)
        views["models"] |= {"me5-api@128": {"view_of": "me5-api", "dimensions": 128},
                            "me5-small@128": {"view_of": "me5-small", "dimensions": 128}}  # fmt: skip
        views["methods"] = ["me5-small@128/dense", "me5-api@128/dense"]
        snakemake(tmp_path, write_config(tmp_path, views, "views.yaml"), "results/miracl_ndcg.tsv")
        assert server.count == sent
        _same_runs(tmp_path, ("me5-api@128", "me5-small@128"))
    log = (tmp_path / f"logs/miracl/encode_corpus_api_dense/me5-api/{LANG}/00000-00003.log").read_text()
    assert "embeddings API intfloat/multilingual-e5-small: 80 inputs" in log and KEY not in log
