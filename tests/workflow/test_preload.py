"""A real run whose preload server, or one of its forked jobs, stops: it completes with the tables of a
run without preloading, the frozen server costing at most about one handshake (#35).

The sample's Swahili with four methods (BM25, a tiny random dense model, BGE-M3 dense and sparse), one job
at a time. The server (or a job's forked process) stops itself once at a given step
(``MIRACL_EVAL_PRELOAD_FREEZE``), as ``kill -STOP`` would: no sleeps, no race with the run.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from miracl_eval.jobs import preload, preload_server
from miracl_eval.jobs.preload_wire import progress
from tests.helpers import sample_config, snakemake, write_config

pytestmark = pytest.mark.skipif(not preload.usable(), reason="preloading needs Linux outside SLURM")
METHODS = ["bm25", "dense-random/dense", "bge-m3-random/dense", "bge-m3-random/sparse"]
MODELS = {
    "dense-random": {
        "family": "dense",
        "checkpoint": "resources/models/tiny-xlm-r",
        "pooling": "mean",
        "normalize": True,
    },
    "bge-m3-random": {"family": "bge-m3", "checkpoint": "resources/models/tiny-bge-m3"},
}
HANDSHAKE = 3
#: outputs of a run, removed between runs (the checkpoints and the preprocessed inputs stay)
OUTPUTS = ("runs", "results", "logs", "stats", "resources/miracl/encoded", "resources/miracl/indexes",
           "resources/miracl/search", "resources/miracl/scores")  # fmt: skip


def _run(work: Path, preloaded: bool) -> tuple[str, float, str]:
    """(the nDCG@10 table, seconds, every job log) of a run from the same inputs."""
    for name in OUTPUTS:
        shutil.rmtree(work / name, ignore_errors=True)
    cfg = sample_config(["sw"], threads=1, preload=preloaded, methods=METHODS, models=MODELS, hybrids={}, rerankers={})
    started = time.monotonic()
    snakemake(work, write_config(work, cfg), "results/miracl_ndcg.tsv", args=("--cores", "1"), timeout=600)
    took = time.monotonic() - started
    logs = "\n".join(p.read_text() for p in sorted((work / "logs").rglob("*.log")))
    return (work / "results" / "miracl_ndcg.tsv").read_text(), took, logs


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, float]:
    """The run without preloading (its checkpoints built before it, as for the runs it is compared with; it
    preprocesses the inputs, which they keep: a few seconds more, on its side)."""
    work = tmp_path_factory.mktemp("preload")
    table, took, _ = _run(work, preloaded=False)
    return work, table, took


@pytest.mark.parametrize(
    "step, said",
    [
        ("received", r"preload server (\d+) \(\S+\) process \d+ is frozen \(state 'T'.*later jobs start a fresh"),
        ("greeted", r"the preloaded process (\d+) is frozen \(state 'T'.*: killed; running the job again"),
    ],
    ids=["server", "child"],
)
def test_a_frozen_server_or_child_never_holds_the_run(baseline, monkeypatch, tmp_path, step, said) -> None:
    work, table, unfaulted = baseline
    monkeypatch.setenv(preload.HANDSHAKE_ENV, str(HANDSHAKE))
    monkeypatch.setenv(preload_server.FREEZE_ENV, f"{step}:{tmp_path / 'froze'}")
    try:
        got, took, logs = _run(work, preloaded=True)
    finally:
        for pid in map(int, re.findall(r"preload server (\d+)", _logs(work))):
            state = progress(pid)
            if state is not None and state.stopped:
                os.kill(pid, signal.SIGKILL)
    assert (tmp_path / "froze").exists()  # it did stop
    assert got == table
    found = re.findall(said, logs)
    assert len(found) == 1, logs[-3000:]  # one job waited on it; the later ones did not
    servers = re.findall(r"forked from preload server (\d+)", logs)
    if step == "received":  # the later jobs were preloaded again, by a fresh server
        assert set(servers) - {found[0]}, servers
    else:  # the stopped child's job ran in its own process, the others in children of the same server
        assert len(servers) >= 2 and len(set(servers)) == 1, servers
    assert took < unfaulted + 60, (took, unfaulted)


def _logs(work: Path) -> str:
    return "\n".join(p.read_text() for p in sorted((work / "logs").rglob("*.log"))) if (work / "logs").exists() else ""
