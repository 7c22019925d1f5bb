"""The forecast's pieces without Snakemake: a dry run's jobs read from its output, the sizes it plans with,
the paths it carries to another folder, its totals, and an API model's tokens and dollars."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from miracl_eval import schemas
from miracl_eval.config.validate import validate
from miracl_eval.errors import InputError
from miracl_eval.inputs.datasets import get_dataset
from miracl_eval.jobs import requests as costs
from miracl_eval.report import forecast
from tests.helpers import REPO, SAMPLE

DRY_RUN = """\
Building DAG of jobs...
Job stats:
job                 count
------------------  -------
all                 1
encode_corpus_dense_sparse 1
total               3

[Fri Dec  4 15:24:13 2026]
rule encode_corpus_dense_sparse:
    input: resources/miracl/corpus/en/corpus.parquet
    output: resources/miracl/encoded/bge-m3/corpus/en/blocks/00000-00009.json
    log: logs/miracl/encode_corpus_dense_sparse/bge-m3/en/00000-00009.log
    jobid: 3
    benchmark: stats/miracl/encode_corpus_dense_sparse/bge-m3/en/00000-00009.tsv
    reason: Missing output files: resources/miracl/encoded/bge-m3/corpus/en/blocks/00000-00009.json
    wildcards: dataset=miracl, model=bge-m3, corpus=en, block=00000-00009
    threads: 8
    resources: tmpdir=/tmp, runtime=110, gpu=1, mem_mb=9900, mem=9.9 GB, mem_mib=9442, disk_mb=4395, disk=4.39 GB

[Fri Dec  4 15:24:13 2026]
checkpoint preprocess_topics:
    input: resources/miracl/downloads/topics/en/topics.tsv
    wildcards: dataset=miracl, part=en
    resources: tmpdir=/tmp, runtime=<TBD>, mem_mb=700, mem=700 MB, disk_mb=1, disk=1 MB
DAG of jobs will be updated after completion.

[Fri Dec  4 15:24:13 2026]
localrule tables:
    wildcards: dataset=miracl
    resources: tmpdir=/tmp, mem_mb=1000, mem=1000 MB

[Fri Dec  4 15:24:13 2026]
localrule all:
    input: results/miracl_ndcg.tsv
    jobid: 0
This was a dry-run (flag -n). The order of jobs does not reflect the order of execution.
"""


def test_a_dry_runs_jobs_are_read_with_their_requests() -> None:
    jobs = forecast.parse_dry_run(DRY_RUN)
    assert [j.rule for j in jobs] == ["encode_corpus_dense_sparse", "preprocess_topics", "tables"]  # not `all`
    encode, topics, tables = jobs
    assert encode.wildcards == (("dataset", "miracl"), ("model", "bge-m3"), ("corpus", "en"), ("block", "00000-00009"))
    assert (encode.threads, encode.gpus, encode.number("mem_mb"), encode.number("disk_mb")) == (8, 1, 9900, 4395)
    assert encode.benchmark == "stats/miracl/encode_corpus_dense_sparse/bge-m3/en/00000-00009.tsv"
    assert (topics.threads, topics.cell("runtime"), topics.cell("mem_mb")) == (1, forecast.UNKNOWN, 700)
    assert tables.cell("runtime") == "" and tables.cell("mem_mb") == 1000  # a local rule asks for no run time
    table = forecast.rows(jobs)
    assert [r["gpu_hours"] for r in table] == [110 / 60, forecast.UNKNOWN, ""]
    totals = forecast.totals(table)
    assert (totals["jobs"], totals["gpu_jobs"], totals["gpu_hours"], totals["unknown"]) == (3, 1, 110 / 60, 1)
    assert (totals["max_mem_mb"], totals["disk_mb"], totals["cpu_hours"]) == (9900, 4395 + 1, 0)


def test_the_second_dry_runs_jobs_win_and_the_firsts_others_are_added() -> None:
    before = forecast.parse_dry_run(DRY_RUN)
    after = [forecast.PlannedJob("preprocess_topics", (("dataset", "miracl"), ("part", "en")), 1, {"runtime": "6"})]
    merged = forecast.merge(after, before)
    assert [(j.rule, j.cell("runtime")) for j in merged] == [
        ("preprocess_topics", 6), ("encode_corpus_dense_sparse", 110), ("tables", "")
    ]  # fmt: skip


def test_per_rule_the_largest_request_and_the_hours() -> None:
    jobs = [
        forecast.PlannedJob("bm25_index", (("corpus", c),), 8, {"runtime": str(r), "mem_mb": str(m), "disk_mb": "5"})
        for c, r, m in (("en", 120, 11_600), ("yo", 6, 9_000))
    ]
    (row,) = forecast.by_rule(forecast.rows(jobs))
    assert row == {"rule": "bm25_index", "jobs": 2, "max_mem_mb": 11_600, "max_runtime_min": 120, "gpu_hours": 0,
                   "cpu_hours": 8 * 126 / 60, "disk_mb": 10}  # fmt: skip


def test_sizes_come_from_the_preprocessed_tables_else_local_files_else_the_reference(tmp_path: Path) -> None:
    miracl = get_dataset("miracl")
    sizes = forecast.data_sizes(miracl, ["en", "yo"], "dev", tmp_path)
    assert sizes.passages == {"en": 32_893_221, "yo": 49_043} and sizes.queries == {"en": 799, "yo": 119}
    assert sizes.origin["corpus en"] == "reference" and sizes.origin["queries yo"] == "reference (v1.0)"
    hn = forecast.data_sizes(get_dataset("miracl-hn"), ["sw"], "dev", tmp_path)
    assert (hn.passages, hn.queries) == ({"sw": 131_924}, {"sw": 482})  # MTEB's statistics at its pinned revision
    # this folder's preprocessed table wins
    table = tmp_path / "resources" / "miracl" / "corpus" / "yo" / "corpus.parquet"
    table.parent.mkdir(parents=True)
    pq.write_table(schemas.CORPUS.empty_table(), table)
    assert forecast.data_sizes(miracl, ["yo"], "dev", tmp_path).passages == {"yo": 0}
    # local files: their records (blank lines aside; a gzipped corpus; a header line of the topics skipped)
    (tmp_path / "c.jsonl").write_bytes(gzip.compress(b'{"docid": "1", "text": "a"}\n\n{"docid": "2", "text": "b"}\n'))
    (tmp_path / "t.tsv").write_text("qid\tquery\n1\tone\n2\ttwo\n3\tthree\n", encoding="utf-8")
    local = forecast.data_sizes(miracl, ["sw"], "dev", tmp_path, {"corpus": "c.jsonl", "topics": "t.tsv"})
    assert (local.passages, local.queries, local.origin["corpus sw"]) == ({"sw": 2}, {"sw": 3}, "local file c.jsonl")


def test_an_unknown_size_names_the_partition(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="queries of sw is unknown"):
        forecast.data_sizes(get_dataset("miracl"), ["sw"], "train", tmp_path)  # no reference of the train split


def test_the_config_reads_the_same_files_from_another_folder(tmp_path: Path) -> None:
    (tmp_path / "models" / "mine").mkdir(parents=True)
    given = {
        "source": {"corpus": "data/{lang}.jsonl", "topics": "/abs/{lang}.tsv"},
        "hub": {"cache_dir": "cache"},
        "models": {"mine": {"checkpoint": "models/mine"}, "hub": {"checkpoint": "BAAI/bge-m3"},
                   "built": {"checkpoint": "resources/models/tiny-xlm-r"}, "preset": {}},
    }  # fmt: skip
    out = forecast._local_paths(given, tmp_path)
    assert out["source"] == {"corpus": f"{tmp_path}/data/{{lang}}.jsonl", "topics": "/abs/{lang}.tsv"}
    assert out["hub"]["cache_dir"] == f"{tmp_path}/cache"
    assert {m: s.get("checkpoint") for m, s in out["models"].items()} == {
        "mine": f"{tmp_path}/models/mine", "hub": "BAAI/bge-m3", "built": "resources/models/tiny-xlm-r", "preset": None
    }  # fmt: skip


def test_model_folders_are_the_used_models_and_rerankers() -> None:
    cfg = validate({
        "languages": ["sw"],
        "models": {"bge-m3": {}, "tiny": {"family": "dense", "checkpoint": "resources/models/tiny-xlm-r",
                                          "pooling": "mean", "normalize": True}, "unused": {"family": "dense",
                   "checkpoint": "resources/models/tiny-bert", "pooling": "cls", "normalize": False}},
        "rerankers": {"ce": {"family": "cross-encoder", "checkpoint": "resources/models/tiny-cross-encoder"},
                      "pinned": {"family": "cross-encoder", "checkpoint": "BAAI/bge-reranker-v2-m3", "revision": "v2"}},
        "methods": ["bge-m3/dense", "tiny/dense>>ce", "bge-m3/dense>>pinned"],
    })  # fmt: skip
    # a hub checkpoint's folder per revision, as the fetch_model rule fetches it (config.models.hub_folder)
    assert forecast._model_folders(cfg) == [
        "resources/models/hub/BAAI--bge-m3", "resources/models/hub/BAAI--bge-reranker-v2-m3@v2",
        "resources/models/tiny-cross-encoder", "resources/models/tiny-xlm-r"
    ]  # fmt: skip


def test_an_api_models_tokens_and_dollars_are_its_cost_plans(tmp_path: Path) -> None:
    """Without a tokenizer the plan counts characters / 4 (miracl_eval.encoders.api_plan): before the data is
    there, the sample's tokens per text scaled to the sizes; once it is preprocessed, its own."""
    cfg = validate({
        "languages": ["sw"],
        "models": {"served": {"family": "openai", "model": "served", "base_url": "http://127.0.0.1:1/v1",
                              "passage_prefix": "passage: ", "price_per_million_tokens": 0.5, "max_usd": 1}},
        "methods": ["served/dense"],
    })  # fmt: skip
    sizes = forecast.DataSizes({"sw": 131_924}, {"sw": 482})
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (cost,) = forecast.api_costs(cfg, sizes, tmp_path, SAMPLE, scratch).values()
    passages = [json.loads(line) for line in (SAMPLE / "miracl" / "sw" / "corpus.jsonl").read_text().splitlines()]
    texts = [f"passage: {p['title']} {p['text']}" if p["title"] else f"passage: {p['text']}" for p in passages]
    per_passage = sum(max(1, round(len(t) / 4)) for t in texts) / len(texts)
    topics = [line.split("\t", 1)[1] for line in (SAMPLE / "miracl" / "sw" / "topics.tsv").read_text().splitlines()]
    per_query = sum(max(1, round(len(q) / 4)) for q in topics) / len(topics)
    tokens = per_passage * 131_924 + per_query * 482
    assert cost["tokens"] == round(tokens) and cost["usd"] == round(tokens * 0.5 / 1e6, 2)
    assert cost["how"].startswith("the bundled sample") and cost["max_usd"] == 1
    assert (REPO / "sample").is_dir()


def test_the_forecast_says_when_an_api_plan_costs_more_than_its_budget() -> None:
    table = forecast.rows([forecast.PlannedJob("api_cost_plan", (("model", "m"),), 1, {"mem_mb": "2000"})],
                          {"m": {"tokens": 8_000_000_000, "usd": 1040.0, "max_usd": 200.0, "how": "x"}})  # fmt: skip
    assert (table[0]["tokens"], table[0]["usd"]) == (8_000_000_000, 1040.0)
    lines = forecast.summary_lines(table, "miracl", {"m": {"tokens": 8e9, "usd": 1040.0, "max_usd": 200.0, "how": "x"}})
    assert "$1,040.00" in lines[1] and "the run would stop at its cost plan" in lines[1]


def test_model_folders_are_sized_from_a_copy_else_as_before_they_exist(tmp_path: Path) -> None:
    work, scratch = tmp_path / "work", tmp_path / "after"
    (work / "resources" / "models" / "tiny-cross-encoder").mkdir(parents=True)
    (work / "resources" / "models" / "tiny-cross-encoder" / "model.safetensors").write_bytes(b"x" * 3 * 2**20)
    cfg = validate({
        "languages": ["sw"],
        "models": {"bge-m3": {}, "mine": {"family": "dense", "checkpoint": "org/mine"},
                   "tiny": {"family": "dense", "checkpoint": "resources/models/tiny-xlm-r", "pooling": "cls",
                            "normalize": False}},
        "rerankers": {"ce": {"family": "cross-encoder", "checkpoint": "resources/models/tiny-cross-encoder"}},
        "methods": ["bge-m3/dense", "mine/dense", "tiny/dense>>ce"],
    })  # fmt: skip
    sized = forecast._stand_in_models(scratch, work, cfg)
    models = scratch / "resources" / "models"
    assert (models / "tiny-cross-encoder").resolve() == (work / "resources/models/tiny-cross-encoder").resolve()
    assert sized["model resources/models/tiny-cross-encoder"].startswith("3 MB (this working directory's copy)")
    assert (models / "hub" / "BAAI--bge-m3" / "stand-in.bin").stat().st_size == int(costs.checkpoint_mb("BAAI/bge-m3")
                                                                                     * costs.MB)  # fmt: skip
    assert (models / "tiny-xlm-r" / "stand-in.bin").stat().st_size == 0  # built by the run
    # a model of one's own whose pooling its files give: nothing to read them from before its fetch
    assert not (models / "hub" / "org--mine").exists() and "unknown" in sized["model resources/models/hub/org--mine"]
