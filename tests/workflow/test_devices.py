"""GPU leases in a real Snakemake run: parallel GPU jobs never share a device."""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import combinations
from pathlib import Path

from tests.helpers import REPO
from tests.unit.jobs.test_devices import _env

SNAKEFILE = """\
rule all:
    input:
        expand("job/{i}.json", i=range(6)),


rule gpu_job:
    output:
        "job/{i}.json",
    log:
        "logs/{i}.log",
    resources:
        gpu=1,
    script:
        "record.py"
"""


RECORD = """\
import json, os, sys, time
sys.path.insert(0, os.environ["REPO"])
from miracl_eval.jobs.runner import run_stage


def work():
    start = time.time()
    time.sleep(1.5)
    record = {"device": os.environ["CUDA_VISIBLE_DEVICES"], "start": start, "end": time.time()}
    with open(snakemake.output[0], "w") as fh:
        json.dump(record, fh)


run_stage(snakemake, work)
"""


def test_parallel_gpu_jobs_of_a_snakemake_run_never_share_a_device(tmp_path: Path) -> None:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    (tmp_path / "record.py").write_text(RECORD)
    env = _env(tmp_path, MIRACL_EVAL_GPUS="3", REPO=str(REPO))
    cmd = [sys.executable, "-m", "snakemake", "--cores", "3", "--resources", "gpu=3", "-d", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jobs = [json.loads((tmp_path / "job" / f"{i}.json").read_text()) for i in range(6)]
    assert {j["device"] for j in jobs} <= {"0", "1", "2"}
    overlapping = [(a, b) for a, b in combinations(jobs, 2) if a["start"] < b["end"] and b["start"] < a["end"]]
    assert overlapping, "the jobs ran one after another: nothing was tested"
    assert all(a["device"] != b["device"] for a, b in overlapping), jobs
    assert "GPU lease: CUDA_VISIBLE_DEVICES=" in (tmp_path / "logs" / "0.log").read_text()
