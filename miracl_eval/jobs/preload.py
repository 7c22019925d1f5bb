"""Jobs forked from a warm process: torch, transformers, pyarrow and faiss imported once a run, not once a job.

Every job of the workflow is a fresh Python process, and a job that loads a model first imports
torch and transformers' model code: about 6 s on one core, more than the work of a job on a small
corpus or a partition's queries; any other Python stage pays about 0.6 s for pyarrow (which imports
pandas on its first array), faiss or ir_measures. With ``preload`` (Linux, not under SLURM), such a job's
own process (the *relay*) asks a *preload server* (:mod:`miracl_eval.jobs.preload_server`) to run the
stage: the server has imported the stage's module (and the modules it lists in ``PRELOAD``) once, and
forks a child for each job, which starts with them in memory. The child is the job in all that matters:

* it runs in the job's working directory, with the job's environment (``OMP_NUM_THREADS``, which
  sets torch's threads; ``CUDA_VISIBLE_DEVICES`` of the job's GPU lease), and writes to the job's
  stdout, stderr and log file;
* the relay waits for it and exits as the job would: its result, or its error (a
  :class:`MiraclEvalError` as itself, anything else as :class:`WorkerError` with the child's
  traceback), and a child that dies is an error too;
* a child whose relay ends (the job killed) kills itself at once, so nothing outlives its job.

The server is started by the first job that finds none, binds an abstract Unix socket (which has no
file permissions: both ends check that the other runs as the same user) named after
what its children would inherit (interpreter, library code, import-time environment), so a changed
library or environment gets a server of its own, and exits after :data:`IDLE_SECONDS` without a job.

**A frozen server or child never holds a job.** Every step the relay takes with the server (connect,
request, receipt, handing over its stdout and stderr, the child's greeting) is bounded by
:data:`HANDSHAKE_SECONDS` of the relay's own running time without an answer
(:class:`~miracl_eval.jobs.preload_wire.Wait`); the server's steps with a job by
:data:`~miracl_eval.jobs.preload_server.STEP_SECONDS`. When the server stays silent, the relay looks
at it in ``/proc``: stopped (``SIGSTOP``, a debugger) or using no CPU (wedged, swapped out), it is
*frozen*: the relay writes a marker (``{name}.frozen`` in the user's own folder,
:func:`~miracl_eval.jobs.private.private_dir`, the server's pid) and runs the job in
its own process; every later job, of this run or another of the same install, sees the marker and
goes at once to a fresh server of the next *generation* (``{name}-1``, ..., up to
:data:`GENERATIONS`; then in its own process). A busy server (importing torch for another job) is not
frozen: that job runs in its own process, and the server serves the next. While the child runs the
job, the relay checks every :data:`HANDSHAKE_SECONDS` that it is not stopped; a stopped child is killed
and the job runs in the relay's own process. A frozen server is left as it is (it may be resumed): the
marker and the warning name its pid, for ``kill``; resumed, it serves the jobs waiting on it (long
gone: nothing happens) and exits when idle.

Snakemake's ``benchmark:`` measures the job's process tree, which holds the relay but not the forked
child: the relay logs the child's peak memory and CPU time in the job's log instead.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from miracl_eval.jobs.preload_wire import (
    Frozen,
    Silent,
    Wait,
    WorkerError,
    frozen_check,
    peer,
    receive,
    send,
    stopped_check,
)
from miracl_eval.jobs.private import private_dir

__all__ = ["Call", "WorkerError", "logged_peak_rss_mb", "plain", "run", "server_name", "usable"]

log = logging.getLogger(__name__)

#: seconds of a relay's own running time within which a server answers each step (``MIRACL_EVAL_PRELOAD_HANDSHAKE``
#: overrides); a silent server is then looked at (frozen or busy), and the job runs in its own process
HANDSHAKE_SECONDS = 10.0
HANDSHAKE_ENV = "MIRACL_EVAL_PRELOAD_HANDSHAKE"
#: seconds within which a busy server forks the job's process after receiving it (it imports the stage's
#: libraries first: torch and transformers take seconds, more on a busy machine)
START_SECONDS = 120.0
#: seconds a server waits for a job before it exits (``MIRACL_EVAL_PRELOAD_IDLE`` overrides)
IDLE_SECONDS = 30.0
IDLE_ENV = "MIRACL_EVAL_PRELOAD_IDLE"
#: servers of one install tried in turn when the ones before are frozen
GENERATIONS = 4
#: environment variables read at import time by the preloaded libraries (and the preload settings): a
#: server serves only jobs whose values of these equal its own (the rest is set in its child)
IMPORT_ENV_PREFIXES = (
    "HF_", "HUGGINGFACE", "TRANSFORMERS", "TORCH", "PYTORCH", "TOKENIZERS", "PYTHON", "LD_", "MIRACL_EVAL_PRELOAD",
)  # fmt: skip
#: the job's log line with the forked process's own costs (which the job's benchmark file lacks)
USAGE_LINE = "preloaded process: peak RSS %.0f MB, CPU %.1f s"
_USAGE = re.compile(r"preloaded process: peak RSS ([0-9.]+) MB, CPU ([0-9.]+) s")
_LIBRARY = Path(__file__).resolve().parent.parent  # the miracl_eval package


@dataclass(frozen=True)
class Call:
    """A stage call by name (``module.function(*args, **kwargs)``), runnable in this process or in
    another one: naming the function keeps the job's own process from importing its module."""

    module: str
    function: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self) -> Any:
        return getattr(importlib.import_module(self.module), self.function)(*self.args, **dict(self.kwargs))


def usable() -> bool:
    """Whether jobs here may run in a preloaded child: Linux (abstract sockets, fork), not under SLURM
    (a server started inside one job's allocation would end with it)."""
    return sys.platform == "linux" and "SLURM_JOB_ID" not in os.environ


def plain(value: Any) -> Any:
    """``value`` with Snakemake's str subclasses (paths) and named lists as plain str, list and dict."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value) if type(value) in (list, tuple) else [plain(v) for v in value]
    return value


def logged_peak_rss_mb(log_path: str | os.PathLike[str]) -> float | None:
    """The forked process's peak RSS (MB) that a preloaded job wrote to its log; None if it has none."""
    try:
        text = Path(log_path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = _USAGE.findall(text)
    return float(found[-1][0]) if found else None


def server_name(idle: float) -> str:
    """The abstract socket name of the server for this interpreter, module path, library code and
    import-time environment (a library file changed, e.g. by a checkout, gets a new server)."""
    code = sorted((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in _LIBRARY.rglob("*.py"))
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith(IMPORT_ENV_PREFIXES))
    key = repr((sys.executable, sys.version, os.getuid(), sys.path, code, env, idle))
    return "miracl-eval-preload-" + hashlib.sha256(key.encode()).hexdigest()[:24]


# ------------------------------------------------------------------------------ frozen servers


def _marker(name: str) -> Path:
    return private_dir() / f"{name}.frozen"


def _server_log(name: str) -> Path:
    """Where the server ``name`` writes its own output (its start, a failure before it serves)."""
    return private_dir() / f"{name}.log"


def _is_frozen(name: str) -> int | None:
    """The pid of the server ``name`` that a job found frozen, while that process still runs; else None."""
    try:
        pid = int(_marker(name).read_text().split()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError, IndexError):
        return None
    return pid if name.encode() in cmdline.split(b"\0") else None  # not a later process with its pid


def _mark_frozen(name: str, pid: int) -> None:
    """Write the marker atomically. Not with :func:`miracl_eval.atomic.write_text_atomic`: several jobs may
    mark one server at once, and that removes other writers' temporaries (one writer per output)."""
    path = _marker(name)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{pid}\n")
    os.replace(tmp, path)


def _generation(base: str) -> str | None:
    """The first server name of this install (``base``, ``base-1``, ...) that no job found frozen."""
    for generation in range(GENERATIONS):
        name = base if generation == 0 else f"{base}-{generation}"
        if _is_frozen(name) is None:
            return name
    return None


# ------------------------------------------------------------------------------ the relay (client)


def run(call: Call, log_path: str | None) -> Any:
    """Run ``call`` in a child of the preload server (started if none is running); its result.

    Raises what the call raised (see the module's docstring); runs it here when no server can serve
    it in time."""
    idle = float(os.environ.get(IDLE_ENV) or IDLE_SECONDS)
    base = server_name(idle)
    request = {"call": call, "cwd": os.getcwd(), "env": dict(os.environ), "path": list(sys.path), "log": log_path}
    handshake = float(os.environ.get(HANDSHAKE_ENV) or HANDSHAKE_SECONDS)
    for _attempt in range(3):
        name = _generation(base)
        if name is None:
            log.warning("every preload server of this install is frozen (%s.frozen ...): running in this process",
                        _marker(base).with_suffix(""))  # fmt: skip
            return call()
        conn = _connect(name, idle, handshake)
        if conn is None:
            break
        outcome = _serve_through(conn, name, request, handshake)
        if outcome is None:  # the server closed before forking (it was ending): start another
            continue
        if outcome is _HERE:
            return call()
        reply = outcome
        usage = reply.get("usage")
        if usage:
            log.info(USAGE_LINE, usage["max_rss_mb"], usage["cpu_s"])
        if "error" in reply:
            raise reply["error"]
        return reply["result"]
    log.warning("no preload server could be reached: running in this process")
    return call()


_HERE = object()  # what _serve_through returns when the job is to run in the relay's own process


def _serve_through(conn: socket.socket, name: str, request: dict[str, Any], handshake: float) -> Any:
    """The child's reply to ``request`` over ``conn``; None when the server closed before forking; ``_HERE``
    when the job is to run in this process (a frozen or busy server, a stopped child)."""
    server, _uid = peer(conn)
    with conn:
        try:
            ack = _handshake(conn, request, handshake, server)
        except _HoldsStreams as err:  # frozen with the job's stdout and stderr: their readers would wait forever
            os.kill(server, signal.SIGKILL)
            log.warning("preload server %d (%s) %s, holding this job's stdout and stderr: killed; running in this "
                        "process", server, name, err)  # fmt: skip
            return _HERE
        except Frozen as err:
            if err.pid != server:  # the forked child, before its greeting
                os.kill(err.pid, signal.SIGKILL)
                log.warning("the preloaded %s: killed; running in this process", err)
                return _HERE
            _mark_frozen(name, server)
            log.warning(
                "preload server %d (%s) %s: running in this process; later jobs start a fresh server. The frozen "
                "server is left as it is (`kill %d` frees its memory; marker %s)",
                server, name, err, server, _marker(name),
            )  # fmt: skip
            return _HERE
        except Silent as err:  # a busy server, or one that ended: not frozen
            log.warning("preload server %d (%s) did not answer: %s; running in this process", server, name, err)
            return _HERE
        if ack is None:
            return None
        child = int(ack["pid"])  # which said in the job's log that it runs the job
        try:  # as long as the job takes, while the child is not stopped
            reply = receive(conn, Wait(handshake, stopped_check(child)))
        except Frozen as err:
            os.kill(child, signal.SIGKILL)
            log.warning("the preloaded %s: killed; running the job again in this process", err)
            return _HERE
    if reply is None:
        raise WorkerError(f"the preloaded process {child} ended without a result (killed, or out of memory?)")
    return reply


class _HoldsStreams(Frozen):
    """The server froze after it was handed the job's stdout and stderr."""


def _handshake(conn: socket.socket, request: dict[str, Any], seconds: float, server: int) -> dict[str, Any] | None:
    """Send the request; the forked child's greeting (None if the server closed first).

    The request is taken within ``seconds`` (else :class:`Frozen` when the server is frozen,
    :class:`Silent` when it is busy): a large one does not fit the socket's buffer. The server says it received the request within ``seconds`` (else :class:`Frozen` when it is
    frozen, :class:`Silent` when it is busy with another job), then that it is ready to fork once it
    has imported the stage's libraries (within :data:`START_SECONDS` while it keeps working:
    :class:`Frozen` as soon as it does not); only then is it handed the job's stdout and stderr, and it
    says within ``seconds`` which child it forked (else :class:`_HoldsStreams`), which greets within
    ``seconds`` (else :class:`Frozen` naming the child). A child forked after the relay gave up finds
    the connection closed and ends before the stage starts."""
    try:  # a few kB, which the socket's buffer takes, listening or not; or megabytes (an HPC environment)
        send(conn, request, Wait(seconds, frozen_check(server), limit=seconds, what="the request not taken"))
    except (BrokenPipeError, ConnectionResetError):  # the server ended meanwhile
        return None
    for step, limit in (("no receipt", seconds), ("not ready to fork", START_SECONDS)):
        answer = receive(conn, Wait(seconds, frozen_check(server), limit=limit, what=step))
        if answer is None:
            return None
    socket.send_fds(conn, [b"F"], [1, 2])
    try:
        forked = receive(conn, Wait(seconds, frozen_check(server), limit=seconds, what="no process forked"))
    except Frozen as err:
        raise _HoldsStreams(err.pid, err.state) from None
    if forked is None:
        return None
    child = int(forked["forked"])
    return receive(conn, Wait(seconds, frozen_check(child), limit=seconds, what=f"no greeting from process {child}"))


def _connect(name: str, idle: float, seconds: float) -> socket.socket | None:
    """A connection to the server ``name``, starting one if none listens; None if none can start."""
    conn = _try_connect(name, seconds)
    if conn is not None:
        return conn
    server_log = _server_log(name)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(_LIBRARY.parent), *filter(None, [env.get("PYTHONPATH")])])
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = "1"  # the server never computes; each child sets its job's threads
    env.pop("CUDA_VISIBLE_DEVICES", None)
    with open(server_log, "ab") as out:
        out.write(
            f"{time.strftime('%Y-%m-%d %H:%M:%S')} job process {os.getpid()} starts a server for {sys.path}\n".encode()
        )
        out.flush()
        proc = subprocess.Popen(
            [sys.executable, "-m", "miracl_eval.jobs.preload_server", name, str(idle)],
            cwd=_LIBRARY.parent,  # this library, whatever the job's working directory holds
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    try:
        code = proc.wait(timeout=30)  # 0 once the server listens (it is then out of this process's tree)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = None
    conn = _try_connect(name, seconds)  # also when it lost the race to bind (code 3): another one serves
    if conn is None:
        log.warning("no preload server: its start ended with %s (see %s)", code, server_log)
    return conn


def _try_connect(name: str, seconds: float) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(seconds)  # a full backlog would block a connect
    try:
        conn.connect("\0" + name)
    except OSError:
        conn.close()
        return None
    conn.settimeout(None)  # every later wait is a Wait
    if peer(conn)[1] != os.getuid():  # an abstract socket has no permissions: never send a job to another user
        log.warning("the preload socket %s belongs to another user: not used", name)
        conn.close()
        return None
    return conn
