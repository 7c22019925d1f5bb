"""Hub models in real Snakemake runs: fetched once by their own rule, the model's jobs offline; and a
GPU job that cannot use CUDA stops instead of encoding on the CPU."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.helpers import REPO, m3_config, snakemake, write_config

FAKE_HUB = REPO / "tests" / "fake_hub"  # its sitecustomize.py stands in for the hub in every process


@pytest.fixture
def hub(tmp_path: Path, tiny_checkpoints, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "hub"
    shutil.copytree(tiny_checkpoints("bge-m3"), folder / "test-org--tiny-m3")
    monkeypatch.setenv("MIRACL_EVAL_FAKE_HUB", str(folder))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(FAKE_HUB), os.environ.get("PYTHONPATH")])))
    return folder


def test_a_hub_model_is_fetched_once_and_its_jobs_run_offline(tmp_path: Path, hub: Path) -> None:
    work = tmp_path / "run"
    work.mkdir()
    cfg = write_config(work, m3_config(["sw"], m3={"checkpoint": "test-org/tiny-m3"}))
    snakemake(work, cfg, "results/miracl_ndcg.tsv")
    calls = [line.split("\t") for line in (hub / "calls.log").read_text().splitlines()]
    # one model lookup and one download, both by the fetch_model job; no other job asked the hub
    assert [(what, repo) for what, repo, _ in calls] == [
        ("model_info", "test-org/tiny-m3"),
        ("snapshot_download", "test-org/tiny-m3"),
    ]
    assert all(script.endswith("fetch_model.py") for _, _, script in calls), calls
    fetched = work / "resources" / "models" / "hub" / "test-org--tiny-m3"
    assert json.loads((fetched / "miracl-eval-fetch.json").read_text())["commit"].startswith("0123456789")
    rows = [line.split("\t")[0] for line in (work / "results" / "miracl_ndcg.tsv").read_text().splitlines()[1:]]
    assert rows == m3_config()["methods"]
    # the encoding and rerank jobs loaded the fetched folder
    for log in ("encode_corpus_dense_sparse/bge-m3/sw/00000-00002.log", "encode_queries_dense_sparse/bge-m3/sw.log"):
        assert "model resources/models/hub/test-org--tiny-m3 on cpu" in (work / "logs" / "miracl" / log).read_text()
    # a second run asks the hub nothing
    proc = snakemake(work, cfg, "results/miracl_ndcg.tsv", args=("-n",))
    assert "Nothing to be done" in proc.stdout + proc.stderr
    assert len((hub / "calls.log").read_text().splitlines()) == 2


def test_a_gated_model_stops_the_run_saying_how_to_log_in(tmp_path: Path, hub: Path) -> None:
    cfg = write_config(tmp_path, m3_config(["sw"], m3={"checkpoint": "gated-org/model"}))
    proc = snakemake(tmp_path, cfg, "results/miracl_ndcg.tsv", check=False)
    assert proc.returncode != 0
    log = (tmp_path / "logs" / "models" / "fetch-gated-org--model.log").read_text()
    assert "cannot fetch the model 'gated-org/model'" in log and "HF_TOKEN" in log and "accept its terms" in log
    assert not (tmp_path / "resources" / "models" / "hub" / "gated-org--model").exists()


def test_a_gpu_job_without_usable_cuda_stops_with_what_to_do(tmp_path: Path, monkeypatch) -> None:
    """A simulated machine with one GPU (MIRACL_EVAL_GPUS=1: the job leases device 0) and a torch that
    cannot use it (this CPU build), device auto: the encoding job stops with the message, nothing is
    encoded (device cuda: the unit tests of resolve_device)."""
    device = "auto"
    monkeypatch.setenv("MIRACL_EVAL_GPUS", "1")
    monkeypatch.setenv("MIRACL_EVAL_GPU_LOCKS", str(tmp_path / "locks"))
    cfg = m3_config(["sw"])
    cfg["encoder"] = {**cfg["encoder"], "device": device}
    path = write_config(tmp_path, cfg)
    target = "resources/miracl/encoded/bge-m3/queries/sw/dense.parquet"
    proc = snakemake(tmp_path, path, target, check=False)
    assert proc.returncode != 0
    log = (tmp_path / "logs" / "miracl" / "encode_queries_dense_sparse" / "bge-m3" / "sw.log").read_text()
    assert f"encoder.device '{device}': CUDA is not usable here" in log, log[-2000:]
    assert "this job holds GPU(s) 0" in log and "torch " in log and "encoder.device: cpu" in log
    assert not (tmp_path / target).exists()
