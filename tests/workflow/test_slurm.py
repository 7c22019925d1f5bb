"""The workflow through sbatch on a real single-node SLURM cluster (localhost), with profiles/slurm.

tests/workflow/slurm/start_cluster.sh installs SLURM and MUNGE with apt when they are missing and starts munged,
slurmctld and slurmd as root; the module's fixture always stops them again. Skipped when not root, when
the packages cannot be installed, or with MIRACL_EVAL_SKIP_SLURM=1.
"""

from __future__ import annotations

import collections
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import REPO, sample_config, write_config

pytestmark = pytest.mark.slurm

START = REPO / "tests" / "workflow" / "slurm" / "start_cluster.sh"
PROFILE = REPO / "profiles" / "slurm"
PARTITION = "localtest"  # start_cluster.sh's partition, the profile's default slurm_partition
RUN_TIMEOUT = 900  # seconds, for each Snakemake run (timeout -k: a hung run is killed)
NODE_MB = 4000  # the test node's memory: the sample's requests follow its data and fit
SUBMITTED = re.compile(r"Job \d+ has been submitted with SLURM jobid (\d+) \(log: (\S+)\)\.")
# Settings for the test only: keep the logs of successful jobs (they are evidence), poll soon.
SLURM_ARGS = ("--slurm-keep-successful-logs", "--slurm-init-seconds-before-status-checks", "1")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Cluster:
    directory: Path
    env: dict[str, str]

    def query(self, *cmd: str) -> str:
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, check=True, timeout=30).stdout

    def job(self, jobid: str) -> dict[str, str]:
        """`scontrol show job` as a dict (jobs stay known for MinJobAge=600 s after they end)."""
        return dict(re.findall(r"(\w+)=(\S*)", self.query("scontrol", "show", "job", "-o", jobid)))

    def real_memory_mb(self) -> int:
        return int(re.search(r"RealMemory=(\d+)", self.query("scontrol", "show", "node", "-o"))[1])


def _stop(directory: Path, env: dict[str, str]) -> None:
    subprocess.run(
        ["timeout", "-k", "5", "90", "bash", str(START), "stop", str(directory)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if os.environ.get("MIRACL_EVAL_SKIP_SLURM") == "1":
        pytest.skip("MIRACL_EVAL_SKIP_SLURM=1")
    if os.geteuid() != 0:
        pytest.skip("the SLURM test cluster needs root")
    directory = tmp_path_factory.mktemp("slurm")
    # A clean client environment: nothing from an enclosing SLURM job or a user's sbatch defaults.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))}
    # Own ports, so that a second test session (or a real slurmd) on this machine does not collide.
    env["SLURM_TEST_CTLD_PORT"], env["SLURM_TEST_SLURMD_PORT"] = str(_free_port()), str(_free_port())
    env["SLURM_TEST_MEMORY_MB"] = str(NODE_MB)  # a small node: every job of the sample must fit it
    proc = subprocess.run(
        ["timeout", "-k", "10", "600", "bash", str(START), "start", str(directory)],
        env=env, capture_output=True, text=True, timeout=630, check=False,
    )  # fmt: skip
    if proc.returncode in (2, 3):  # cannot install SLURM / not root
        pytest.skip(f"no SLURM test cluster: {proc.stderr.strip()[-1000:]}")
    try:
        if proc.returncode != 0:
            pytest.fail(f"start_cluster.sh failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-6000:]}")
        env["SLURM_CONF"] = str(directory / "slurm.conf")
        # directory/bin holds the srun that the jobs call; the venv's bin comes next, so that the
        # jobs (sbatch exports this environment) run this Python with this workflow's packages.
        env["PATH"] = os.pathsep.join([str(directory / "bin"), str(Path(sys.executable).parent), env["PATH"]])
        yield Cluster(directory, env)
    finally:
        _stop(directory, env)


def _snakemake(cluster: Cluster, workdir: Path, snakefile: Path, *args: str) -> subprocess.Popen[str]:
    """Start Snakemake in the background (output in workdir/snakemake.log), guarded by timeout -k."""
    cmd = [
        "timeout", "-k", "10", str(RUN_TIMEOUT), sys.executable, "-m", "snakemake",
        "-s", str(snakefile), "--directory", str(workdir), *args,
    ]  # fmt: skip
    with open(workdir / "snakemake.log", "w") as log:
        return subprocess.Popen(cmd, env=cluster.env, stdout=log, stderr=subprocess.STDOUT, text=True)


def _finish(proc: subprocess.Popen[str], workdir: Path) -> tuple[int, str]:
    rc = proc.wait(timeout=RUN_TIMEOUT + 60)
    return rc, (workdir / "snakemake.log").read_text(errors="replace")


GPU_SNAKEFILE = """\
rule gpu_probe:
    output:
        "cuda_visible_devices.txt",
    log:
        "slurm_job_id.txt",
    resources:
        gpu=1,
    shell:
        "echo $CUDA_VISIBLE_DEVICES > {output}; echo $SLURM_JOB_ID > {log}"
"""


@dataclass
class Runs:
    local: Path
    slurm: Path
    local_rc: int
    slurm_rc: int
    local_log: str
    slurm_log: str


@pytest.fixture(scope="module")
def gpu_probe(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A one-rule workflow with `resources: gpu=1`, started through SLURM (test_gpu_* waits for it)."""
    work = tmp_path_factory.mktemp("gpu_probe")
    (work / "Snakefile").write_text(GPU_SNAKEFILE)
    proc = _snakemake(cluster, work, work / "Snakefile", "--profile", str(PROFILE), *SLURM_ARGS, "--verbose")
    try:
        yield work, proc
    finally:
        if proc.poll() is None:  # not waited for: its test was deselected or failed early
            proc.terminate()
            proc.wait(timeout=60)


@pytest.fixture(scope="module")
def runs(
    cluster: Cluster, gpu_probe: tuple[Path, subprocess.Popen[str]], tmp_path_factory: pytest.TempPathFactory
) -> Runs:
    """The sample's sw and yo through SLURM, and locally (--cores 2) for reference, at the same time.

    (The GPU probe is requested only to start it first: all three runs overlap, which saves time.)
    """
    local, slurm = tmp_path_factory.mktemp("local"), tmp_path_factory.mktemp("via_slurm")
    cfg = sample_config(["sw", "yo"], methods=["bm25"])
    target = "results/miracl_ndcg.tsv"
    via_slurm = _snakemake(
        cluster, slurm, REPO / "Snakefile", target, "--configfile", str(write_config(slurm, cfg)),
        "--profile", str(PROFILE), *SLURM_ARGS,
    )  # fmt: skip
    locally = _snakemake(
        cluster, local, REPO / "Snakefile", target, "--configfile", str(write_config(local, cfg)), "--cores", "2"
    )
    (slurm_rc, slurm_log), (local_rc, local_log) = _finish(via_slurm, slurm), _finish(locally, local)
    return Runs(local, slurm, local_rc, slurm_rc, local_log, slurm_log)


def test_workflow_jobs_go_through_sbatch(cluster: Cluster, runs: Runs) -> None:
    assert runs.slurm_rc == 0, runs.slurm_log[-8000:]
    submitted = dict(SUBMITTED.findall(runs.slurm_log))
    assert submitted, runs.slurm_log[-4000:]

    assert cluster.real_memory_mb() == NODE_MB
    assert "No wall time information given" not in runs.slurm_log
    rules: collections.Counter[str] = collections.Counter()
    for jobid, log in submitted.items():
        job = cluster.job(jobid)
        assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", job
        assert job["Partition"] == PARTITION
        # each job asked for memory and time from its data (costs.estimate), not a fixed amount
        assert re.fullmatch(r"\d+M", job["MinMemoryNode"]) and 0 < int(job["MinMemoryNode"][:-1]) <= NODE_MB, job
        assert re.fullmatch(r"\d\d:\d\d:00", job["TimeLimit"]), job
        rule = job["Comment"].removeprefix("rule_").split("_wildcards_")[0]  # the plugin's --comment
        rules[rule] += 1
        # the plugin's SLURM log (sbatch --output), kept by --slurm-keep-successful-logs
        assert job["StdOut"] == log
        assert Path(log).is_file(), log
        assert Path(log).is_relative_to(runs.slurm / ".snakemake" / "slurm_logs" / f"rule_{rule}"), log

    # Every job that Snakemake ran remotely was one of those SLURM jobs; only local rules ran in-process,
    # and together they are exactly the jobs of the local run.
    remote = collections.Counter(re.findall(r"^(?:rule|checkpoint) (\w+):$", runs.slurm_log, re.M))
    in_process = collections.Counter(re.findall(r"^local(?:rule|checkpoint) (\w+):$", runs.slurm_log, re.M))
    assert rules == remote
    assert rules + in_process == collections.Counter(
        re.findall(r"^local(?:rule|checkpoint) (\w+):$", runs.local_log, re.M)
    )
    assert rules["bm25_index"] == rules["bm25_search"] == 2 and set(in_process) <= {"tables", "comparability", "all"}

    lines = (runs.slurm / "results" / "miracl_ndcg.tsv").read_text().splitlines()
    assert lines[0].split("\t") == ["method", "sw", "yo", "mean"]
    assert [line.split("\t")[0] for line in lines[1:]] == ["bm25"]
    assert all(0.0 <= float(v) <= 1.0 for v in lines[1].split("\t")[1:])


def test_slurm_results_equal_a_local_run(runs: Runs) -> None:
    assert runs.local_rc == 0, runs.local_log[-8000:]
    assert runs.slurm_rc == 0, runs.slurm_log[-8000:]
    files = {
        p.relative_to(runs.local) for pattern in ("results/*.tsv", "runs/**/*.trec") for p in runs.local.glob(pattern)
    }
    assert {Path("results/miracl_ndcg.tsv"), *(Path(f"runs/miracl/{lang}/bm25.trec") for lang in ("sw", "yo"))} <= files
    for name in sorted(files):
        assert (runs.slurm / name).read_bytes() == (runs.local / name).read_bytes(), name


def test_gpu_resource_becomes_sbatch_gpus_and_cuda_visible_devices(
    cluster: Cluster, gpu_probe: tuple[Path, subprocess.Popen[str]]
) -> None:
    work, proc = gpu_probe
    rc, log = _finish(proc, work)
    assert rc == 0, log[-8000:]
    calls = [line for line in log.splitlines() if line.startswith("sbatch call: ")]
    assert len(calls) == 1 and " --gpus=1 " in calls[0], calls
    [(jobid, _)] = SUBMITTED.findall(log)
    job = cluster.job(jobid)
    assert job["JobState"] == "COMPLETED" and job["TresPerJob"] == "gres:gpu:1", job
    # SLURM gave the job one of the node's two (fake) GPUs
    assert (work / "cuda_visible_devices.txt").read_text().strip() in {"0", "1"}
    assert (work / "slurm_job_id.txt").read_text().strip() == jobid
