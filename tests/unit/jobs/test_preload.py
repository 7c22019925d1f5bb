"""Jobs forked from a preload server: the same outputs, the job's own environment, logs, errors and end."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from miracl_eval.errors import InputError
from miracl_eval.jobs import preload
from miracl_eval.jobs.preload import Call, WorkerError
from miracl_eval.jobs.runner import run_stage
from tests.helpers import REPO, sample_queries

pytestmark = pytest.mark.skipif(not preload.usable(), reason="preloading needs Linux outside SLURM")

#: what the server imports before forking this module's calls (as the encoding stages list theirs)
PRELOAD = ("torch",)
HERE = Path(__file__).resolve().parent


# ------------------------------------------------------------------ functions the children run


def job_view(var: str) -> tuple[str, str | None, int, int]:
    import torch

    return os.getcwd(), os.environ.get(var), torch.get_num_threads(), os.getppid()


def log_and_print(text: str) -> str:
    logging.getLogger("miracl_eval.test").info("child says %s", text)
    print(f"stdout: {text}", flush=True)
    print(f"stderr: {text}", file=sys.stderr, flush=True)
    return text.upper()


def fail_known(path: str) -> None:
    raise InputError(path, "malformed JSON", 7)


def fail_unexpected() -> None:
    {}["no such key"]  # noqa: B018 - a KeyError in the child


def exit_hard() -> None:
    os._exit(9)


# ------------------------------------------------------------------------------------- tests


pytestmark = pytest.mark.usefixtures("restore_logging")


def _job(log: Path) -> SimpleNamespace:
    return SimpleNamespace(log=[str(log)], rule="encode_queries_dense", wildcards={"part": "sw"})


def _job_process(log: Path, call: str, wildcards: str) -> list[str]:
    """The command of a job process of its own (as Snakemake starts one) that runs ``call`` preloaded."""
    code = (
        "import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
        "from types import SimpleNamespace\n"
        "from miracl_eval.jobs.preload import Call\n"
        "from miracl_eval.jobs.runner import run_stage\n"
        f"job = SimpleNamespace(log=[sys.argv[3]], rule='encode_queries_dense', wildcards={wildcards})\n"
        f"run_stage(job, {call}, preload=True)\n"
    )
    return [sys.executable, "-c", code, str(HERE), str(REPO), str(log)]


def test_each_call_is_a_fresh_child_of_one_server_with_the_jobs_cwd_env_and_threads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MIRACL_EVAL_TEST_VALUE", "from the job")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cwd, value, threads, server = preload.run(Call(__name__, "job_view", ("MIRACL_EVAL_TEST_VALUE",)), None)
    assert (cwd, value, threads) == (str(tmp_path), "from the job", 1)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("MIRACL_EVAL_TEST_VALUE", "changed")
    _, value2, threads2, server2 = preload.run(Call(__name__, "job_view", ("MIRACL_EVAL_TEST_VALUE",)), None)
    assert (value2, threads2) == ("changed", 2)  # a job's own values, not the server's or the last job's
    assert server2 == server != os.getpid()  # one server for both
    pids = {preload.run(Call("os", "getpid"), None) for _ in range(2)}
    assert len(pids) == 2 and os.getpid() not in pids and server not in pids  # a child per call


def test_the_child_writes_to_the_jobs_log_stdout_and_stderr(tmp_path):
    log = tmp_path / "job.log"
    done = subprocess.run(
        _job_process(log, "Call('test_preload', 'log_and_print', ('hello',))", "{'part': 'sw'}"),
        capture_output=True,
        text=True,
        check=True,
    )
    assert "stdout: hello" in done.stdout and "stderr: hello" in done.stderr
    lines = log.read_text().splitlines()
    said = [
        next(i for i, line in enumerate(lines) if needle in line)
        for needle in (
            "rule encode_queries_dense, wildcards {'part': 'sw'}",
            "running in a preloaded process (pid",
            "miracl_eval.test: child says hello",
            "preloaded process: peak RSS",
            "done: HELLO",
        )
    ]
    assert said == sorted(said)  # relay and child append to one log, in the order things happened


def test_a_known_error_is_one_line_and_an_unexpected_one_has_the_childs_traceback(tmp_path):
    log = tmp_path / "known.log"
    with pytest.raises(SystemExit) as exit_:
        run_stage(_job(log), Call(__name__, "fail_known", ("corpus.jsonl",)), preload=True)
    assert exit_.value.code == 1
    assert (
        log.read_text().splitlines()[-1].endswith("ERROR miracl_eval.jobs.runner: corpus.jsonl, line 7: malformed JSON")
    )
    assert "Traceback" not in log.read_text()

    with pytest.raises(InputError) as err:  # the error object itself comes back
        preload.run(Call(__name__, "fail_known", ("c.tsv",)), None)
    assert (err.value.path, err.value.line, err.value.reason) == ("c.tsv", 7, "malformed JSON")

    log = tmp_path / "unexpected.log"
    with pytest.raises(SystemExit):
        run_stage(_job(log), Call(__name__, "fail_unexpected"), preload=True)
    text = log.read_text()
    assert "WorkerError: in the preloaded process:" in text
    assert "in fail_unexpected" in text and "KeyError: 'no such key'" in text

    with pytest.raises(WorkerError, match="ended without a result"):
        preload.run(Call(__name__, "exit_hard"), None)


def test_a_killed_job_takes_its_child_with_it(tmp_path):
    log = tmp_path / "job.log"
    relay = subprocess.Popen(_job_process(log, "Call('time', 'sleep', (120,))", "{}"))
    child = None
    deadline = time.monotonic() + 60
    while child is None and time.monotonic() < deadline:
        time.sleep(0.1)
        text = log.read_text() if log.exists() else ""
        if "running in a preloaded process (pid " in text:
            child = int(text.split("running in a preloaded process (pid ")[1].split(",")[0])
    assert child is not None, "the job never started its child"
    assert Path(f"/proc/{child}").exists()
    relay.send_signal(signal.SIGKILL)
    relay.wait()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{child}").exists(), "the child outlived its job"


def test_an_idle_server_exits(monkeypatch):
    monkeypatch.setenv(preload.IDLE_ENV, "0.5")  # its own server: the idle time is part of the name
    server = preload.run(Call("os", "getppid"), None)
    assert Path(f"/proc/{server}").exists()
    deadline = time.monotonic() + 15
    while Path(f"/proc/{server}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{server}").exists()
    assert preload.run(Call("os", "getppid"), None) != server  # the next job starts a new one


def test_under_slurm_the_job_runs_in_its_own_process(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    log = tmp_path / "job.log"
    run_stage(_job(log), Call("os", "getpid"), preload=True)
    assert log.read_text().splitlines()[-1].endswith(f"done: {os.getpid()}")
    assert "preloaded" not in log.read_text()


def test_an_encoding_stage_writes_the_same_bytes_preloaded(tiny_checkpoints, tmp_path):
    from miracl_eval.encoders.registry import get_family

    spec = get_family("bge-m3").resolve({"checkpoint": str(tiny_checkpoints("bge-m3")), "query_max_length": 32})
    qpath = tmp_path / "queries.parquet"
    import pyarrow as pa

    from miracl_eval import schemas

    queries = sample_queries(["th", "ja", "ar", "ru", "en"])
    pq.write_table(
        pa.table({"qid": [str(i) for i in range(len(queries))], "query": queries}, schema=schemas.QUERIES), qpath
    )
    outputs = {
        way: {kind: str(tmp_path / way / f"{kind}.parquet") for kind in ("dense", "sparse")}
        for way in ("direct", "preloaded")
    }
    call = {
        way: Call(
            "miracl_eval.encoders.encode",
            "encode_queries",
            (str(qpath), outputs[way], spec),
            {"batch_size": 4, "device": "cpu"},
        )
        for way in outputs
    }
    direct = call["direct"]()
    preloaded = preload.run(call["preloaded"], None)
    assert direct["rows"] == preloaded["rows"] == len(queries)
    for kind in ("dense", "sparse"):
        assert pq.read_table(outputs["direct"][kind]).equals(pq.read_table(outputs["preloaded"][kind]))


def test_a_server_of_another_user_is_never_sent_a_job(monkeypatch, tmp_path):
    """An abstract socket has no permissions: the job checks the server's user (SO_PEERCRED)."""
    preload.run(Call("os", "getpid"), None)  # a server is up
    name = preload.server_name(preload.IDLE_SECONDS)
    monkeypatch.setattr(preload, "server_name", lambda idle: name)
    monkeypatch.setattr(preload, "private_dir", lambda: tmp_path)  # that user's own folder for markers and logs
    monkeypatch.setattr(preload.os, "getuid", lambda: 4242)  # as if that server ran as another user
    assert preload.run(Call("os", "getpid"), None) == os.getpid()  # the job runs in its own process


def test_a_stopped_server_is_not_waited_on(tmp_path, monkeypatch):
    """A server stopped from outside between two jobs (SIGSTOP; tests/unit/jobs/test_preload_frozen.py
    stops it at each step of a job) costs the next job the handshake's seconds, then it runs in its own
    process."""
    monkeypatch.setenv(preload.IDLE_ENV, "30")  # a server of its own (the idle time is part of its name)
    monkeypatch.setenv(preload.HANDSHAKE_ENV, "2")
    first, second = tmp_path / "first.log", tmp_path / "second.log"
    subprocess.run(_job_process(first, "Call('os', 'getpid')", "{}"), check=True, timeout=120)
    server = int(first.read_text().split("forked from preload server ")[1].split(")")[0])
    os.kill(server, signal.SIGSTOP)
    try:
        start = time.monotonic()
        job = subprocess.run(_job_process(second, "Call('os', 'getpid')", "{}"), timeout=60, capture_output=True)
        took = time.monotonic() - start
    finally:
        os.kill(server, signal.SIGCONT)
        os.kill(server, signal.SIGTERM)
    text = second.read_text()
    assert job.returncode == 0, text
    assert f"preload server {server} " in text and "is frozen (state 'T'" in text
    assert "running in this process; later jobs start a fresh server" in text
    assert "running in a preloaded process" not in text and took < 30
