"""The forecast (``results/{dataset}_forecast.tsv``) of a full-size run with nothing downloaded is that run's
dry run: the same jobs with the same requests as Snakemake plans once the data is preprocessed (the oracle:
a dry run against all-null tables of the real row counts, written here, as ``test_requests`` does), plus the
downloads and the preprocessing before them."""

from __future__ import annotations

from pathlib import Path

import yaml

from miracl_eval.jobs import requests as costs
from miracl_eval.report.forecast import read_forecast, totals
from tests.helpers import snakemake, write_config
from tests.unit.jobs.test_requests import ENGLISH, SCALE
from tests.workflow.test_requests import LOCAL_RULES, _full_size, dry_run_jobs

CORPORA, QUERIES = {"en": ENGLISH, "yo": 49_043}, {"en": 799, "yo": 119}


def test_a_full_size_forecast_is_the_runs_dry_run_with_nothing_downloaded(tmp_path: Path) -> None:
    oracle = tmp_path / "oracle"
    cfg_path = _full_size(oracle, "miracl", CORPORA, QUERIES, **SCALE)
    jobs = {
        (j["rule"], tuple(sorted(j["wildcards"].items()))): j
        for j in dry_run_jobs(snakemake(oracle, cfg_path, args=("-n", "--cores", "16")).stdout)
    }
    # the same run from a folder with nothing in it: MIRACL's hub downloads, its reference sizes
    work = tmp_path / "work"
    work.mkdir()
    raw = yaml.safe_load(cfg_path.read_text(encoding="utf-8"))
    del raw["source"]
    snakemake(work, write_config(work, raw), "results/miracl_forecast.tsv", args=("--cores", "16"), seed=False)
    assert not (work / "resources").exists()  # nothing downloaded, preprocessed or encoded
    table = read_forecast(work / "results" / "miracl_forecast.tsv")
    planned = {(r["rule"], tuple(sorted(tuple(w.split("=", 1)) for w in r["wildcards"].split()))): r
               for r in table if r["rule"] not in LOCAL_RULES}  # fmt: skip
    before = {(rule, key) for rule, key in planned if rule.startswith(("download_", "preprocess_"))}
    assert {rule for rule, _ in before} == {"download_corpus", "download_topics", "preprocess_corpus",
                                            "preprocess_topics"} and len(before) == 8  # fmt: skip
    assert set(planned) - before == set(jobs)  # every job of the preprocessed run, no other
    for key, job in jobs.items():
        row, res = planned[key], job["resources"]
        assert (row["mem_mb"], row["runtime_min"], row["disk_mb"], row["gpus"], row["threads"]) == (
            res["mem_mb"], res["runtime"], res["disk_mb"], res.get("gpu", "0"), str(job["threads"])
        ), key  # fmt: skip
    # an English encoding block: 1M passages of BGE-M3's 1,024 float32 dimensions, lexical weights and docids
    block = planned[("encode_corpus_dense_sparse", (("block", "00000-00009"), ("corpus", "en"), ("dataset", "miracl"),
                                                    ("model", "bge-m3")))]  # fmt: skip
    assert int(block["disk_mb"]) == -(-1_000_000 * (4 * 1024 + costs.SPARSE_BYTES + costs.DOCID_BYTES) // costs.MB)
    assert int(block["gpus"]) == 1 and int(block["threads"]) == 8
    gpu_minutes = sum(int(j["resources"]["runtime"]) for j in jobs.values() if j["resources"].get("gpu") == "1")
    assert gpu_minutes > 0 and abs(totals(table)["gpu_hours"] - gpu_minutes / 60) < 0.01
    assert "unknown" not in {c for r in table for c in r.values()}


def test_a_forecast_of_data_of_unknown_size_names_the_partition_and_writes_nothing(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, {"dataset": "miracl", "languages": ["sw"], "split": "train", "methods": ["bm25"]})
    proc = snakemake(tmp_path, cfg, "results/miracl_forecast.tsv", check=False)
    assert proc.returncode != 0
    assert "the number of train queries of sw is unknown" in proc.stdout + proc.stderr
    assert not list((tmp_path / "results").glob("miracl_forecast*"))
