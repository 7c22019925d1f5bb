"""A frozen preload server or child never holds a job, and is waited on once at most.

Each test makes the server (or a child) stop itself once at one step of a job
(``MIRACL_EVAL_PRELOAD_FREEZE``: no sleeps, no races with a signal sent from outside), then runs jobs
as Snakemake does, each a process of its own, and checks that every job ends with its result within a
bound, that the first pays at most about one handshake, and that the later ones do not wait on the
frozen process again. The handshake is 2 s here; every bound is generous (a slow machine only makes
the jobs slower, never a wait longer).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from miracl_eval.jobs import preload, preload_server
from miracl_eval.jobs.preload_wire import progress
from tests.helpers import REPO

pytestmark = [
    pytest.mark.skipif(not preload.usable(), reason="preloading needs Linux outside SLURM"),
    pytest.mark.usefixtures("restore_logging"),
]
HANDSHAKE = 2
#: what a job may take here at most, frozen server or not (a forked job takes well under a second, one in
#: its own process about 1 s: this bounds a wait on a frozen process, not the machine's speed)
BOUND = 30.0

# A job process (as Snakemake starts one): runs os.getpid preloaded and prints how it went.
JOB = """\
import sys; sys.path[:0] = [sys.argv[1]]
from types import SimpleNamespace
from miracl_eval.jobs.preload import Call
from miracl_eval.jobs.runner import run_stage
job = SimpleNamespace(log=[sys.argv[2]], rule="evaluate", wildcards={})
print("stdout of the job", flush=True)
run_stage(job, Call("os", "getpid"), preload=True)
"""


@pytest.fixture
def env(tmp_path: Path):
    """The jobs' environment: a server name of this test's own (the freeze setting is part of it), and
    every preload process of that name killed at the end (a frozen one stays otherwise)."""
    values = {**os.environ, preload.HANDSHAKE_ENV: str(HANDSHAKE), "PYTHONPATH": str(REPO)}
    values.pop("SLURM_JOB_ID", None)
    yield values
    for pid in _preload_processes(values):
        os.kill(pid, signal.SIGKILL)


def _name(env: dict[str, str]) -> str:
    """The server name of the jobs below (their interpreter, sys.path and environment)."""
    code = (
        "import sys; sys.path[:0] = [sys.argv[1]]\n"
        "from miracl_eval.jobs import preload; print(preload.server_name(preload.IDLE_SECONDS))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(REPO)], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _preload_processes(env: dict[str, str]) -> list[int]:
    name = _name(env).encode()
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if any(w.startswith(name) for w in words):
            found.append(int(cmdline.parent.name))
    return found


def _job(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[str], float]:
    cmd = [sys.executable, "-c", JOB, str(REPO), str(log)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), time.monotonic()


def _finish(job: tuple[subprocess.Popen[str], float], log: Path) -> tuple[str, float, int]:
    """(the job's log, its seconds, the pid that ran the stage); the job's stdout and stderr must close
    (a frozen process holding them would keep a reader such as `snakemake | tee` waiting forever)."""
    proc, started = job
    out, err = proc.communicate(timeout=BOUND * 2)
    took = time.monotonic() - started
    text = log.read_text()
    assert proc.returncode == 0, text + err
    assert "stdout of the job" in out
    return text, took, int(text.rsplit("done: ", 1)[1].split()[0])


def _run_job(env: dict[str, str], log: Path) -> tuple[str, float, int]:
    proc, started = _job(env, log)
    return _finish((proc, started), log)


def _preloaded(text: str, ran: int) -> bool:
    return f"running in a preloaded process (pid {ran}," in text


@pytest.mark.parametrize("step", ["accepted", "received"])
def test_a_server_frozen_before_it_holds_the_job_is_marked_and_left(env, tmp_path, step) -> None:
    """Stopped between accept and receipt, or after the receipt (while it would import the stage's
    modules): the first job waits one handshake, runs in its own process and marks the server; the
    next jobs (other processes: another run of the install too) go to a fresh server at once."""
    env[preload_server.FREEZE_ENV] = f"{step}:{tmp_path / 'froze'}"
    text, took, ran = _run_job(env, tmp_path / "first.log")
    assert "is frozen (state 'T'" in text and "running in this process; later jobs start a fresh server" in text
    assert not _preloaded(text, ran) and took < HANDSHAKE + BOUND
    frozen = int(text.split("preload server ")[1].split()[0])
    assert progress(frozen) is not None and progress(frozen).stopped  # left as it is
    for i in range(3):
        text, took, ran = _run_job(env, tmp_path / f"later{i}.log")
        assert _preloaded(text, ran), text
        assert "frozen" not in text and took < BOUND
    server = _name(env) + "-1"
    assert any(server.encode() in Path(f"/proc/{p}/cmdline").read_bytes() for p in _preload_processes(env))


def test_a_large_request_to_a_frozen_server_is_not_waited_on(env, tmp_path) -> None:
    """A job whose environment is 1.5 MB (an HPC module system's), its server stopped before reading
    it: the request fills the socket's buffer and the send itself waits, within one handshake; the job
    then runs in its own process."""
    env[preload_server.FREEZE_ENV] = f"accepted:{tmp_path / 'froze'}"
    big = JOB.replace(
        "print(",
        "import os; os.environ.update({f'MIRACL_EVAL_TEST_BIG{i}': 'x' * 100_000 for i in range(15)})\nprint(",
        1,
    )  # 1.5 MB: exec still takes it (ARG_MAX 2 MB)
    job = subprocess.Popen([sys.executable, "-c", big, str(REPO), str(tmp_path / "big.log")], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    text, took, ran = _finish((job, time.monotonic()), tmp_path / "big.log")
    assert "is frozen (state 'T'" in text and not _preloaded(text, ran) and took < HANDSHAKE + BOUND


def test_a_server_frozen_holding_the_jobs_streams_is_killed(env, tmp_path) -> None:
    """Stopped after it took the job's stdout and stderr, before forking: it would keep every reader of
    those streams waiting, so the job kills it and runs in its own process; the next job starts a new one."""
    env[preload_server.FREEZE_ENV] = f"fds:{tmp_path / 'froze'}"
    text, took, ran = _run_job(env, tmp_path / "first.log")
    assert "holding this job's stdout and stderr: killed; running in this process" in text
    assert not _preloaded(text, ran) and took < HANDSHAKE + BOUND
    killed = int(text.split("preload server ")[1].split()[0])
    deadline = time.monotonic() + BOUND
    while progress(killed) is not None and time.monotonic() < deadline:  # a zombie until reaped by init
        time.sleep(0.05)
    assert progress(killed) is None
    text, took, ran = _run_job(env, tmp_path / "next.log")
    assert _preloaded(text, ran) and took < BOUND


@pytest.mark.parametrize("step", ["child", "greeted"])
def test_a_stopped_child_is_killed_and_the_job_runs_in_its_own_process(env, tmp_path, step) -> None:
    """The forked child stopped before its greeting, or in the middle of the job's work: killed, and the
    job runs in its own process; the server was not at fault and serves the next job."""
    env[preload_server.FREEZE_ENV] = f"{step}:{tmp_path / 'froze'}"
    text, took, ran = _run_job(env, tmp_path / "first.log")
    found = re.search(r"the preloaded process (\d+) is frozen \(state 'T'.*: killed; running", text)
    assert found and took < HANDSHAKE + BOUND, text
    child = int(found[1])
    assert ran != child and ran == int(text.split("done: ")[1].split()[0])  # the job's own process ran it
    assert (f"running in a preloaded process (pid {child}," in text) == (step == "greeted")
    deadline = time.monotonic() + BOUND
    while progress(child) is not None and time.monotonic() < deadline:  # a zombie until its server reaps it
        time.sleep(0.05)
    assert progress(child) is None
    text, took, ran = _run_job(env, tmp_path / "next.log")
    assert _preloaded(text, ran) and "frozen" not in text and took < BOUND


def test_many_jobs_waiting_on_a_frozen_server_each_wait_once(env, tmp_path) -> None:
    """The server stops with one job accepted; five more connect while it is stopped (its backlog holds
    them): each waits one handshake at most and runs in its own process, and a job after them is served
    by a fresh server without waiting."""
    env[preload_server.FREEZE_ENV] = f"accepted:{tmp_path / 'froze'}"
    first = _job(env, tmp_path / "job0.log")
    deadline = time.monotonic() + BOUND
    while not (tmp_path / "froze").exists() and time.monotonic() < deadline:  # the server has stopped
        time.sleep(0.02)
    jobs = [_job(env, tmp_path / f"job{i}.log") for i in range(1, 6)]
    results = [_finish(job, tmp_path / f"job{i}.log") for i, job in enumerate([first, *jobs])]
    for text, took, ran in results:
        assert took < HANDSHAKE + BOUND, text
        if not _preloaded(text, ran):
            assert "running in this process" in text
    assert sum("is frozen (state 'T'" in text for text, _, _ in results) >= 1
    text, took, ran = _run_job(env, tmp_path / "after.log")
    assert _preloaded(text, ran) and "frozen" not in text and took < BOUND


def test_every_generation_frozen_runs_jobs_in_their_own_process_at_once(env, tmp_path, monkeypatch) -> None:
    """Markers of live frozen servers for every generation: a job does not connect at all."""
    monkeypatch.setattr(preload, "_is_frozen", lambda name: 1)
    monkeypatch.setattr(preload, "_connect", lambda *a: pytest.fail("connected to a frozen server"))
    started = time.monotonic()
    assert preload.run(preload.Call("os", "getpid"), None) == os.getpid()
    assert time.monotonic() - started < HANDSHAKE  # no handshake waited for
