"""Hub models in real Snakemake runs: fetched once by their own rule, the model's jobs offline; and a
GPU job that cannot use CUDA stops instead of encoding on the CPU."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.helpers import REPO, m3_config, planned_jobs, snakemake, write_config

FAKE_HUB = REPO / "tests" / "fake_hub"  # its sitecustomize.py stands in for the hub in every process
MAIN = "0123456789abcdef0123456789abcdef01234567"  # the commit the fake hub says main names


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
    assert [(what, repo) for what, repo, _, _ in calls] == [
        ("model_info", "test-org/tiny-m3"),
        ("snapshot_download", "test-org/tiny-m3"),
    ]
    assert all(script.endswith("fetch_model.py") for _, _, script, _ in calls), calls
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


def test_a_model_revision_is_fetched_into_its_own_folder_and_only_a_changed_one_runs_again(
    tmp_path: Path, hub: Path
) -> None:
    """The model's own `revision`: its commit recorded (fetch record, settings page, effective config); a new
    revision fetches and encodes again, the same one asks the hub nothing and runs nothing."""
    shutil.copytree(hub / "test-org--tiny-m3", hub / "test-org--tiny-m3@v2")  # the tag v2 on the fake hub
    v2 = hashlib.sha1(b"test-org/tiny-m3@v2").hexdigest()  # the commit the fake hub says v2 names
    work = tmp_path / "run"
    work.mkdir()
    queries = "resources/miracl/encoded/bge-m3/queries/sw/dense.parquet"
    targets = (queries, "results/miracl_settings.tsv", "results/miracl_config.yaml")

    def run(revision: str | None, *args: str):
        m3 = {"checkpoint": "test-org/tiny-m3", **({"revision": revision} if revision else {})}
        cfg = write_config(work, m3_config(["sw"], m3=m3, methods=["bge-m3/dense"]))
        return snakemake(work, cfg, *targets, args=args)

    def nothing(proc) -> bool:  # noqa: ANN001
        return "Nothing to be done" in proc.stdout + proc.stderr

    def calls() -> list[tuple[str, str]]:
        return [(c[0], c[3]) for c in (line.split("\t") for line in (hub / "calls.log").read_text().splitlines())]

    def shown() -> tuple[str, str]:
        settings = dict(
            line.split("\t")[1:3] for line in (work / "results" / "miracl_settings.tsv").read_text().splitlines()
        )
        config = (work / "results" / "miracl_config.yaml").read_text()
        return settings["models.bge-m3.commit"], config.rsplit("# models.bge-m3.commit: ", 1)[1].split()[0]

    run(None)
    assert calls() == [("model_info", "main"), ("snapshot_download", MAIN)]
    assert shown() == (MAIN, MAIN)
    assert nothing(run(None, "-n"))
    # a new revision: fetched into a folder of its own (the first stays), its jobs run again
    redone = {"encode_queries_dense_sparse": 1, "report_settings": 1, "effective_config": 1}
    assert planned_jobs(run("v2", "-n")) == {"fetch_model": 1, **redone}
    run("v2")
    assert calls()[2:] == [("model_info", "v2"), ("snapshot_download", v2)]
    fetched = work / "resources" / "models" / "hub" / "test-org--tiny-m3@v2"
    assert json.loads((fetched / "miracl-eval-fetch.json").read_text())["commit"] == v2
    log = (work / "logs" / "miracl" / "encode_queries_dense_sparse" / "bge-m3" / "sw.log").read_text()
    assert "model resources/models/hub/test-org--tiny-m3@v2 on cpu" in log
    assert shown() == (v2, v2)
    # the same revision again: nothing asks the hub, nothing runs
    assert nothing(run("v2", "-n"))
    # back to main: its folder is still there (nothing fetched), the encodings are made from it again
    assert planned_jobs(run(None, "-n")) == redone
    assert len(calls()) == 4


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
