"""One GPU of its own for every GPU job on a machine with several: a device lease held by a lock file.

Snakemake's ``--resources gpu=N`` lets N jobs that declare ``gpu=1`` run at once but does not say
which device each one may use, so all of them would use ``cuda`` (device 0). :func:`lease_gpus` gives
a job devices that no other job holds: it takes an exclusive ``flock`` on one lock file per device
(``gpu-{device}.lock`` in :func:`lock_dir`), the first free ones in order, waiting while none is free,
and points ``CUDA_VISIBLE_DEVICES`` at them for the job's process and its children (CUDA, torch and
Faiss read it when they first touch a GPU, which is after the lease). A lock belongs to the open file:
it lasts as long as the job's process, and the kernel frees it when the process ends, however it
ends, so a killed job never keeps a device. Jobs of several workflows of one user on one machine share
the same lock files, so they never share a device either. The lock files live in the user's own folder
(:func:`miracl_eval.jobs.private.private_dir`: ``{tempdir}/miracl-eval-{uid}/gpu-locks``, mode 0700), not
in a folder of fixed name in ``/tmp`` that the first user would own; users who share a machine's GPUs
without SLURM point ``MIRACL_EVAL_GPU_LOCKS`` at a folder all of them can write.

The devices: ``MIRACL_EVAL_GPUS`` (a count, ``4``, or a list, ``0,2,3``) if set; else the list in
``CUDA_VISIBLE_DEVICES`` if set (a lease then picks among those); else the GPUs that ``nvidia-smi -L``
lists.

Under SLURM (``SLURM_JOB_ID`` set) the devices are the allocation's, in ``CUDA_VISIBLE_DEVICES``.
When they are exactly what the job asks for (the SLURM executor plugin submits each job with its
own GPUs), nothing is changed. When the allocation holds more (``sbatch --gpus=4`` running the
workflow with ``--resources gpu=4``: every job sees all four), the jobs lease among them as on a
machine of their own, with lock files of that allocation (``slurm-{SLURM_JOB_ID}`` in
:func:`lock_dir`): two allocations on one node number their devices each from 0, and their
``CUDA_VISIBLE_DEVICES=0`` are different GPUs.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import IO

from miracl_eval.errors import ConfigError
from miracl_eval.jobs.private import private_dir

log = logging.getLogger(__name__)

DEVICES_ENV = "MIRACL_EVAL_GPUS"
LOCKS_ENV = "MIRACL_EVAL_GPU_LOCKS"
#: set by :func:`lease_gpus` to the leased devices: the job (and a preloaded child of it) holds them
LEASE_ENV = "MIRACL_EVAL_GPU_LEASE"
#: what SLURM sets in a job that was given GPUs
SLURM_GPU_ENV = ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_GPUS_ON_NODE")
#: seconds between two tries while every device is leased
POLL_SECONDS = 0.5
#: the lock files this process holds (a lease lasts as long as its open file)
_held: list[IO[bytes]] = []


def lock_dir() -> Path:
    """Where the lock files live: ``$MIRACL_EVAL_GPU_LOCKS``, else ``gpu-locks`` in this user's own folder
    (:func:`~miracl_eval.jobs.private.private_dir`, checked: an error names it when another user could write it)."""
    given = os.environ.get(LOCKS_ENV)
    return Path(given) if given else private_dir() / "gpu-locks"


def _nvidia_smi_devices() -> list[str]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, line in enumerate(line for line in out.splitlines() if line.startswith("GPU "))]


def machine_devices() -> list[str]:
    """The devices jobs on this machine share (see the module's docstring for where they come from)."""
    given = os.environ.get(DEVICES_ENV, "").strip()
    if given:
        if given.isdigit():
            return [str(i) for i in range(int(given))]
        devices = [d.strip() for d in given.split(",") if d.strip()]
        if not all(d.isdigit() for d in devices):
            raise ConfigError(DEVICES_ENV, f"{given!r} is neither a device count nor a list of device numbers")
        return devices
    visible = _visible_devices()
    return visible if visible is not None else _nvidia_smi_devices()


def _visible_devices() -> list[str] | None:
    """The devices ``CUDA_VISIBLE_DEVICES`` lists; None when it is not set."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return None if visible is None else [d.strip() for d in visible.split(",") if d.strip()]


def _try_lock(folder: Path, device: str) -> IO[bytes] | None:
    fh = open(folder / f"gpu-{device}.lock", "a+b")  # noqa: SIM115 - held open: the lock lives with it
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        return None
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n".encode())
    fh.flush()
    return fh


def lease_gpus(count: int = 1) -> str | None:
    """Lease ``count`` devices for this process and set ``CUDA_VISIBLE_DEVICES`` to them.

    Returns the devices as set (``"2"``, ``"0,3"``), or None when nothing was leased: under SLURM
    when the allocation holds no more devices than the job asks for (its assignment stands), or on a
    machine without GPUs. Waits while fewer than ``count`` devices are free; a device stays leased
    until this process ends.
    """
    slurm_job = os.environ.get("SLURM_JOB_ID")
    if slurm_job:
        devices = _visible_devices() or []
        if len(devices) <= count:
            return None
        folder = lock_dir() / f"slurm-{slurm_job}"
    else:
        devices = machine_devices()
        if not devices:
            return None
        if count > len(devices):
            raise ConfigError(DEVICES_ENV, f"a job asks for {count} GPUs, this machine has {len(devices)}")
        folder = lock_dir()
    folder.mkdir(parents=True, exist_ok=True)
    waited = False
    while True:
        held: list[tuple[str, IO[bytes]]] = []
        for device in devices:
            fh = _try_lock(folder, device)
            if fh is not None:
                held.append((device, fh))
                if len(held) == count:
                    break
        if len(held) == count:
            break
        for _, fh in held:  # not enough free: give back what was taken, and wait
            fh.close()
        if not waited:
            log.info("waiting for %d free GPU(s) of %s (locks in %s)", count, ",".join(devices), folder)
            waited = True
        time.sleep(POLL_SECONDS)
    _held.extend(fh for _, fh in held)
    chosen = ",".join(device for device, _ in held)
    os.environ["CUDA_VISIBLE_DEVICES"] = chosen
    os.environ[LEASE_ENV] = chosen
    log.info("GPU lease: CUDA_VISIBLE_DEVICES=%s", chosen)
    return chosen


def held_gpus() -> str | None:
    """The GPUs this job holds: leased here (:func:`lease_gpus`) or given by SLURM; None when it holds none.

    A job that holds a GPU is expected to use it: see :func:`miracl_eval.encoders.base.resolve_device`."""
    leased = os.environ.get(LEASE_ENV)
    if leased:
        return leased
    if os.environ.get("SLURM_JOB_ID"):
        for name in SLURM_GPU_ENV:
            value = os.environ.get(name, "").strip()
            if value and value != "0":
                return os.environ.get("CUDA_VISIBLE_DEVICES") or value
    return None


def driver_version() -> str | None:
    """The NVIDIA driver's version, from the kernel module or ``nvidia-smi``; None without one."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
        for word in text.split():
            if word.count(".") >= 1 and word.replace(".", "").isdigit():
                return word
    except OSError:
        pass
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=False,
        ).stdout.split()  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out[0] if out else None


#: a class that only a GPU build's SWIG wrapper defines
GPU_FAISS_MARK = b"class GpuIndexFlat"


def gpu_faiss_installed() -> bool:
    """Whether the installed Faiss is a GPU build, without importing it (parsing the Snakefile imports
    no engine): its SWIG wrapper (``faiss/swigfaiss*.py``) defines the GPU index classes. The
    distribution's name cannot tell: conda-forge's CPU and GPU builds are both named ``faiss``. Without
    a wrapper to read, a distribution named ``faiss-gpu*`` counts as one."""
    import importlib.metadata
    import importlib.util

    try:
        spec = importlib.util.find_spec("faiss")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return False
    wrappers = [Path(p) / name for p in spec.submodule_search_locations or [] for name in os.listdir(p)
                if name.startswith("swigfaiss") and name.endswith(".py")]  # fmt: skip
    if wrappers:
        return any(GPU_FAISS_MARK in w.read_bytes() for w in wrappers)
    names = {d.metadata["Name"].lower() for d in importlib.metadata.distributions() if d.metadata["Name"]}
    return any(n.startswith("faiss-gpu") for n in names)
