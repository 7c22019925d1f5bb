"""An embeddings API as a model in a real run: a server in the test speaks OpenAI's embeddings API over the
real multilingual-e5-small, and the API model's run equals the local me5-small's (#30), rank by rank. Through
a plan over budget, a wrong key, a job that fails, and a job killed with SIGTERM: nothing that was answered is
asked for again, every request is in the model's ledger (what the server billed, across runs and failures),
and the model's jobs run one at a time (`api_jobs: 1`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from miracl_eval.config.models import resolve_model
from miracl_eval.encoders.api_ledger import read_ledger
from miracl_eval.encoders.registry import get_family
from miracl_eval.offline.embeddings_server import EmbeddingsServer
from tests.helpers import REPO, planned_jobs, sample_config, snakemake, write_config

LANG = "sw"
KEY_ENV, KEY = "MIRACL_EVAL_TEST_API_KEY", "sk-workflow-test"
SHARD = 40  # the sample's Swahili passages in four shards of one block
ENCODED = "resources/miracl/encoded/me5-api"
#: what a wait on the workflow may take at most (a bound, not a speed)
BOUND = 600.0


@pytest.fixture(scope="module")
def served(me5_small):
    family = get_family("dense")
    spec = resolve_model("me5-small", {"checkpoint": str(me5_small), "query_prefix": "", "passage_prefix": ""})
    return family.load(spec, device="cpu")


def _config(server: EmbeddingsServer, **api) -> dict:
    model = {"family": "openai", "model": "intfloat/multilingual-e5-small", "base_url": server.base_url,
             "api_key_env": KEY_ENV, "tokenizer": "resources/models/me5-small", "dimensions": 384,
             "query_prefix": "query: ", "passage_prefix": "passage: ", "query_max_length": 510,
             "passage_max_length": 510, "inputs_per_request": 10, "max_retries": 0, "api_jobs": 1, **api}  # fmt: skip
    return sample_config(
        [LANG], threads=1, methods=["me5-small/dense", "me5-api/dense"], hybrids={}, rerankers={},
        models={"me5-small": {"checkpoint": "resources/models/me5-small"}, "me5-api": model},
        encoder={"device": "cpu", "batch_size": 8, "shard_size": SHARD},
    )  # fmt: skip


def _same_runs(work: Path, models: tuple[str, str] = ("me5-api", "me5-small")) -> None:
    """Rank by rank, the same docid and a score within 1e-5; where the docids differ, two hits whose scores
    are within 1e-5 (a near tie) swapped places: the other run has that docid at a rank of the same score."""
    ours, local = (pq.read_table(work / f"runs/miracl/{LANG}/{m}/dense.parquet").to_pylist() for m in models)
    assert [r["qid"] for r in ours] == [r["qid"] for r in local] and len(ours) > 100
    rank_of = {(r["qid"], r["docid"]): i for i, r in enumerate(local)}
    swapped = 0
    for a, b in zip(ours, local, strict=True):
        assert a["rank"] == b["rank"] and abs(a["score"] - b["score"]) <= 1e-5, (a, b)
        if a["docid"] != b["docid"]:
            swapped += 1
            there = local[rank_of[(a["qid"], a["docid"])]]
            assert abs(there["score"] - a["score"]) <= 1e-5 and abs(there["rank"] - a["rank"]) <= 3, (a, there)
    assert swapped <= len(ours) // 100  # near ties are rare: the docids are compared, not only the scores


def _corpus_inputs(server: EmbeddingsServer) -> list[str]:
    return [t for b in server.received for t in b["input"] if t.startswith("passage: ")]


def _wait_for(what: str, ready, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + BOUND
    while not ready():
        assert proc.poll() is None, f"the run ended before {what}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"no {what} within {BOUND:g} s"
        time.sleep(0.1)


def test_an_api_model_runs_as_the_local_model(served, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    block = f"{ENCODED}/corpus/{LANG}/blocks/00000-00003.json"
    shards = tmp_path / f"{ENCODED}/corpus/{LANG}/dense"
    ledger = tmp_path / f"{ENCODED}/ledger"
    billed = 0  # every server's billed tokens, summed
    sent: Counter[str] = Counter()  # every corpus text sent, over all runs
    with EmbeddingsServer(served, key=KEY) as server:
        port = server.httpd.server_address[1]  # every server below at the same address (the same base_url)
        # the cost guard: a plan over max_usd stops the run before any request
        guarded = write_config(tmp_path, _config(server, price_per_million_tokens=1000.0), "guarded.yaml")
        proc = snakemake(tmp_path, guarded, "results/miracl_ndcg.tsv", check=False)
        assert proc.returncode != 0 and "models.me5-api.max_usd" in proc.stdout + proc.stderr
        assert "more than max_usd $0" in (tmp_path / "logs/miracl/api_cost_plan/me5-api.log").read_text()
        assert server.count == 0 and not (tmp_path / f"{ENCODED}/cost_plan.json").exists()
        # a wrong key: the first request stops the job, naming the variable (never the key), and no shard is left
        monkeypatch.setenv(KEY_ENV, "sk-wrong")
        cfg = write_config(tmp_path, _config(server))
        assert snakemake(tmp_path, cfg, block, check=False).returncode != 0
        assert server.count == 1  # the job's first request goes alone
        log = (tmp_path / f"logs/miracl/encode_corpus_api_dense/me5-api/{LANG}/00000-00003.log").read_text()
        assert f"refused the key in ${KEY_ENV} (401" in log and "sk-wrong" not in log
        assert not list((tmp_path / ENCODED).rglob("*.parquet"))
        monkeypatch.setenv(KEY_ENV, KEY)
    # a job that fails at its third shard's last request (the server's 12th: four requests of 10 passages a
    # shard, the first alone): it keeps the two shards it finished and the third's answered vectors
    with EmbeddingsServer(served, key=KEY, faults={12: "500"}, port=port) as server:
        cfg = write_config(tmp_path, _config(server))
        assert snakemake(tmp_path, cfg, block, check=False).returncode != 0
        assert server.count == 12
        failed = set(server.received[11]["input"])
        billed, sent = billed + server.billed, sent + Counter(_corpus_inputs(server))
    assert sorted(p.name for p in shards.glob("*.parquet")) == ["00000.parquet", "00001.parquet"]
    assert (shards / "00002.parquet.received").exists()
    # run again: only the failed request's texts for the third shard; the fourth shard's second request
    # never answers, and the run is stopped with SIGTERM (every process of it, as a cluster's time limit does)
    # once the other three are in the ledger
    with EmbeddingsServer(served, key=KEY, faults={2: "hang"}, port=port) as server:
        cfg = write_config(tmp_path, _config(server))
        proc = _snakemake_async(tmp_path, cfg, block)
        try:
            _wait_for("three answers of the fourth shard", lambda: _ok_lines(ledger) >= 11 + 1 + 3, proc)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            out, err = proc.communicate(timeout=BOUND)
        assert proc.returncode != 0, out + err
        assert set(server.received[0]["input"]) == failed  # the third shard: only what was not answered
        hung = set(server.received[1]["input"])
        billed, sent = billed + server.billed, sent + Counter(_corpus_inputs(server))
    assert not (shards / "00003.parquet").exists() and (shards / "00003.parquet.received").exists()
    assert not (shards / "00002.parquet.received").exists()  # the third shard is published
    with EmbeddingsServer(served, key=KEY, port=port) as server:
        cfg = write_config(tmp_path, _config(server))
        proc = snakemake(tmp_path, cfg, "results/miracl_ndcg.tsv")
        assert set(_corpus_inputs(server)) == hung  # the interrupted request, nothing else
        billed, sent = billed + server.billed, sent + Counter(_corpus_inputs(server))
        assert len(sent) == 160 and {t for t, n in sent.items() if n > 1} == failed | hung
        _same_runs(tmp_path)
        _one_at_a_time(proc.stdout + proc.stderr, ("encode_corpus_api_dense", "encode_queries_api_dense"))
        # every request of every run, failed ones too (the 401 and the 500), as the server billed them
        totals = read_ledger(ledger)
        assert totals.tokens == billed and totals.unreadable == 0
        assert totals.unended == 1  # the request out when SIGTERM came: its reservation, never settled, charged
        assert totals.failed == 2 and {"corpus-sw-00000-00003", "queries-sw"} <= totals.jobs and len(totals.runs) == 5
        assert KEY not in "".join(p.read_text() for p in ledger.iterdir())
        count = server.count
        snakemake(tmp_path, cfg, "results/miracl_ndcg.tsv")  # nothing changed: nothing sent
        assert server.count == count
        # throughput settings re-run nothing; a new budget (and price) plans again and re-runs no encoding
        faster = write_config(tmp_path, _config(server, concurrency=3, max_retries=2, tokens_per_minute=10**6,
                                                api_jobs=2, patience=60), "faster.yaml")  # fmt: skip
        assert planned_jobs(snakemake(tmp_path, faster, "results/miracl_ndcg.tsv", args=("-n",))) == {}
        budget = write_config(tmp_path, _config(server, max_usd=5.0, price_per_million_tokens=0.01), "budget.yaml")
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
        assert server.count == count
        _same_runs(tmp_path, ("me5-api@128", "me5-small@128"))
    log = (tmp_path / f"logs/miracl/encode_corpus_api_dense/me5-api/{LANG}/00000-00003.log").read_text()
    assert "embeddings API intfloat/multilingual-e5-small: 40 inputs (0 cut to the token limit, 30 answered " in log
    assert KEY not in log


def _ok_lines(ledger: Path) -> int:
    return sum(json.loads(x)["status"] == "ok" for p in ledger.glob("*.jsonl") for x in p.read_text().splitlines()
               if x.endswith("}"))  # fmt: skip


def _snakemake_async(workdir: Path, configfile: Path, *targets: str) -> subprocess.Popen[str]:
    """The workflow as :func:`tests.helpers.snakemake` runs it, in a session of its own (to signal it whole)."""
    cmd = [sys.executable, "-m", "snakemake", *targets, "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(configfile), "--cores", "2"]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _one_at_a_time(output: str, rules: tuple[str, ...]) -> None:
    """Snakemake's log: each job of ``rules`` starts after the one before it finished (their resource)."""
    running: set[str] = set()
    started = 0
    job = None
    for line in output.splitlines():
        text = line.strip()
        if text.startswith("rule ") or text.startswith("localrule "):
            job = text.split()[1].rstrip(":")
        elif text.startswith("jobid:") and job in rules:
            assert not running, f"{job} started while {running} ran"
            running.add(text.split()[1])
            started += 1
        elif text.startswith("Finished jobid:"):
            running.discard(text.split()[2])
    assert started == len(rules)
