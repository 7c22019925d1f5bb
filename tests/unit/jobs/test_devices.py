"""GPU jobs on a machine with several GPUs each get devices of their own (a simulated device count, on the CPU)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from miracl_eval.errors import ConfigError
from miracl_eval.jobs import devices
from tests.helpers import REPO

# A process that leases GPUs, prints what it got, and holds them until its stdin closes (or it is killed).
HOLDER = textwrap.dedent(
    """\
    import sys
    sys.path.insert(0, sys.argv[2])
    from miracl_eval.jobs.devices import lease_gpus
    print(lease_gpus(int(sys.argv[1])), flush=True)
    sys.stdin.readline()
    """
)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_JOB_ID", "CUDA_VISIBLE_DEVICES")}
    env.update({devices.LOCKS_ENV: str(tmp_path / "locks"), **extra})
    return env


def _holder(env: dict[str, str], count: int = 1) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-c", HOLDER, str(count), str(REPO)]
    return subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _device(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    return proc.stdout.readline().strip()


def _release(*procs: subprocess.Popen[str]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.communicate("\n", timeout=30)


def test_concurrent_leases_get_distinct_devices_and_a_killed_holder_frees_its_own(tmp_path: Path) -> None:
    env = _env(tmp_path, MIRACL_EVAL_GPUS="3")
    holders = [_holder(env) for _ in range(3)]
    waiting = None
    try:
        got = [_device(p) for p in holders]
        assert sorted(got) == ["0", "1", "2"]
        waiting = _holder(env)  # every device is taken: it waits
        time.sleep(3 * devices.POLL_SECONDS + 1)
        assert waiting.poll() is None
        os.kill(holders[1].pid, signal.SIGKILL)  # killed mid-way: the kernel frees its lock
        holders[1].wait(timeout=30)
        assert _device(waiting) == got[1]
    finally:
        _release(*holders, *([waiting] if waiting else []))


def test_a_lease_of_two_devices_takes_two_free_ones(tmp_path: Path) -> None:
    env = _env(tmp_path, MIRACL_EVAL_GPUS="0,2,5")
    first = _holder(env)
    pair = None
    try:
        assert _device(first) == "0"
        pair = _holder(env, count=2)
        assert _device(pair) == "2,5"
    finally:
        _release(first, *([pair] if pair else []))


def test_leases_pick_among_cuda_visible_devices(tmp_path: Path) -> None:
    env = _env(tmp_path, CUDA_VISIBLE_DEVICES="3,5")
    a, b = _holder(env), _holder(env)
    try:
        assert sorted([_device(a), _device(b)]) == ["3", "5"]
    finally:
        _release(a, b)


def test_under_slurm_the_schedulers_assignment_stands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv(devices.DEVICES_ENV, "4")
    monkeypatch.setenv(devices.LOCKS_ENV, str(tmp_path / "locks"))
    assert devices.lease_gpus() is None
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    assert not (tmp_path / "locks").exists()


def test_in_a_slurm_allocation_of_several_gpus_each_job_leases_its_own(tmp_path: Path) -> None:
    """``sbatch --gpus=4`` running the workflow with ``--resources gpu=4``: every job sees the four
    devices; each GPU job takes one no other job of the allocation holds. A second allocation on the
    same node numbers its devices from 0 too: its leases are its own."""
    env = _env(tmp_path, SLURM_JOB_ID="42", CUDA_VISIBLE_DEVICES="0,1,2,3", SLURM_GPUS_ON_NODE="4")
    holders = [_holder(env) for _ in range(4)]
    other = None
    try:
        assert sorted(_device(p) for p in holders) == ["0", "1", "2", "3"]
        other = _holder(_env(tmp_path, SLURM_JOB_ID="43", CUDA_VISIBLE_DEVICES="0,1"))
        assert _device(other) == "0"
    finally:
        _release(*holders, *([other] if other else []))
    assert sorted(p.name for p in (tmp_path / "locks").iterdir()) == ["slurm-42", "slurm-43"]


def test_a_slurm_job_given_as_many_gpus_as_it_asks_for_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setenv(devices.LOCKS_ENV, str(tmp_path / "locks"))
    assert devices.lease_gpus(2) is None
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert not (tmp_path / "locks").exists()


def test_no_gpus_no_lease(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv(devices.DEVICES_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    assert devices.machine_devices() == []
    assert devices.lease_gpus() is None
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


@pytest.mark.parametrize("value, message", [("two", "neither a device count"), ("2", "asks for 3 GPUs")])
def test_bad_device_settings_name_the_variable(monkeypatch: pytest.MonkeyPatch, value: str, message: str) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv(devices.DEVICES_ENV, value)
    with pytest.raises(ConfigError, match=message) as err:
        devices.lease_gpus(3)
    assert err.value.key == devices.DEVICES_ENV


@pytest.mark.parametrize(
    "dist, wrapper, gpu",
    [
        ("faiss", "class IndexFlatIP:\n    pass\n", False),  # conda-forge's CPU build: named faiss
        ("faiss", "class IndexFlatIP:\n    pass\nclass GpuIndexFlatIP:\n    pass\n", True),  # its GPU build
        ("faiss_gpu_cu12", "class GpuIndexFlatIP:\n    pass\n", True),
        ("faiss_cpu", "class IndexFlatIP:\n    pass\n", False),
        (None, None, False),  # no Faiss
    ],
)
def test_a_gpu_faiss_is_told_by_its_wrapper_not_its_name(tmp_path: Path, dist, wrapper, gpu) -> None:
    """In an interpreter whose only packages are a fake Faiss (``-S``: no site-packages)."""
    if dist is not None:
        (tmp_path / "faiss").mkdir()
        (tmp_path / "faiss" / "__init__.py").write_text("raise ImportError('never imported')\n")
        (tmp_path / "faiss" / "swigfaiss.py").write_text(wrapper)
        info = tmp_path / f"{dist}-1.9.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: 1.9.0\n")
    code = (
        f"import sys; sys.path[:0] = [{str(tmp_path)!r}, {str(REPO)!r}]\n"
        "from miracl_eval.jobs.devices import gpu_faiss_installed; print(gpu_faiss_installed())"
    )
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(gpu)
