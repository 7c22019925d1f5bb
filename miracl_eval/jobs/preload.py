"""Jobs forked from a warm process: torch, transformers, pyarrow and faiss imported once a run, not once a job.

Every job of the workflow is a fresh Python process, and a job that loads a model first imports
torch and transformers' model code: about 6 s on one core, more than the work of a job on a small
corpus or a partition's queries; any other Python stage pays about 0.6 s for pyarrow (which imports
pandas on its first array), faiss or ir_measures. With ``preload`` (Linux, not under SLURM), such a job's
own process (the *relay*) asks a *preload server* to run the stage: the server has imported the
stage's module (and the modules it lists in ``PRELOAD``) once, and forks a child for each job, which
starts with them in memory. The child is the job in all that matters:

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
If no server can be reached, or one is reached but does not say within :data:`HANDSHAKE_SECONDS`
that it received the request (a stopped or wedged server), the job runs in its own process, as
without the setting, with a warning.

Snakemake's ``benchmark:`` measures the job's process tree, which holds the relay but not the forked
child: the relay logs the child's peak memory and CPU time in the job's log instead.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import pickle
import re
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from miracl_eval.errors import MiraclEvalError

log = logging.getLogger(__name__)

#: seconds within which a server says it received a job's request (``MIRACL_EVAL_PRELOAD_HANDSHAKE``
#: overrides); a job whose server does not (stopped, swapped out, wedged) runs in its own process
HANDSHAKE_SECONDS = 10.0
HANDSHAKE_ENV = "MIRACL_EVAL_PRELOAD_HANDSHAKE"
#: seconds within which the server forks the job's process after receiving it (it imports the stage's
#: libraries first: torch and transformers take seconds, more on a busy machine)
START_SECONDS = 120.0
#: seconds a server waits for a job before it exits (``MIRACL_EVAL_PRELOAD_IDLE`` overrides)
IDLE_SECONDS = 30.0
IDLE_ENV = "MIRACL_EVAL_PRELOAD_IDLE"
#: environment variables read at import time by the preloaded libraries: a server serves only jobs
#: whose values of these equal its own (the rest of a job's environment is set in its child)
IMPORT_ENV_PREFIXES = ("HF_", "HUGGINGFACE", "TRANSFORMERS", "TORCH", "PYTORCH", "TOKENIZERS", "PYTHON", "LD_")
#: the job's log line with the forked process's own costs (which the job's benchmark file lacks)
USAGE_LINE = "preloaded process: peak RSS %.0f MB, CPU %.1f s"
_USAGE = re.compile(r"preloaded process: peak RSS ([0-9.]+) MB, CPU ([0-9.]+) s")
_LIBRARY = Path(__file__).resolve().parent.parent  # the miracl_eval package
_HEADER = struct.Struct("!Q")


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


class WorkerError(RuntimeError):
    """An unexpected error in a preloaded child, with the child's traceback as its message."""


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


# ------------------------------------------------------------------------------ the relay (client)


def run(call: Call, log_path: str | None) -> Any:
    """Run ``call`` in a child of the preload server (started if none is running); its result.

    Raises what the call raised (see the module's docstring); runs it here when no server can be
    reached."""
    idle = float(os.environ.get(IDLE_ENV) or IDLE_SECONDS)
    name = server_name(idle)
    request = {
        "call": call,
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "path": list(sys.path),
        "log": log_path,
    }
    payload = pickle.dumps(request)
    handshake = float(os.environ.get(HANDSHAKE_ENV) or HANDSHAKE_SECONDS)
    for _attempt in range(3):
        conn = _connect(name, idle)
        if conn is None:
            break
        with conn:
            try:
                ack = _handshake(conn, payload, handshake)
            except TimeoutError as err:  # a stopped or wedged server: never wait on it without bound
                log.warning("preload server %s %s: running in this process", name, err)
                return call()
            if ack is None:  # the server closed before forking (it was ending): start another
                continue
            log.info(
                "running in a preloaded process (pid %s, forked from preload server %s)", ack["pid"], ack["server"]
            )
            reply = _receive(conn)  # the child's: as long as the job takes, whatever the server does
        if reply is None:
            raise WorkerError(f"the preloaded process {ack['pid']} ended without a result (killed, or out of memory?)")
        usage = reply.get("usage")
        if usage:
            log.info(USAGE_LINE, usage["max_rss_mb"], usage["cpu_s"])
        if "error" in reply:
            raise reply["error"]
        return reply["result"]
    log.warning("no preload server could be reached: running in this process")
    return call()


def _handshake(conn: socket.socket, payload: bytes, seconds: float) -> dict[str, Any] | None:
    """Send the request; the forked child's greeting (None if the server closed first).

    The server says it received the request within ``seconds``, and the child greets within
    :data:`START_SECONDS` more (the server imports the stage's libraries first); past either, a
    :class:`TimeoutError`. A child forked after the relay gave up finds the connection closed and
    ends before the stage starts."""
    conn.settimeout(seconds)
    try:
        _send(conn, payload)
        if _receive(conn) is None:
            return None
        # the job's stdout and stderr only to a server that answers: a stopped one would hold them open
        socket.send_fds(conn, [b"F"], [1, 2])
    except TimeoutError:
        raise TimeoutError(f"did not answer within {seconds:g} s (stopped, or wedged?)") from None
    conn.settimeout(START_SECONDS)
    try:
        ack = _receive(conn)
    except TimeoutError:
        raise TimeoutError(f"forked no process within {START_SECONDS:g} s") from None
    conn.settimeout(None)
    return ack


def server_name(idle: float) -> str:
    """The abstract socket name of the server for this interpreter, module path, library code and
    import-time environment (a library file changed, e.g. by a checkout, gets a new server)."""
    code = sorted((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in _LIBRARY.rglob("*.py"))
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith(IMPORT_ENV_PREFIXES))
    key = repr((sys.executable, sys.version, os.getuid(), sys.path, code, env, idle))
    return "miracl-eval-preload-" + hashlib.sha256(key.encode()).hexdigest()[:24]


def _connect(name: str, idle: float) -> socket.socket | None:
    """A connection to the server ``name``, starting one if none listens; None if none can start."""
    conn = _try_connect(name)
    if conn is not None:
        return conn
    server_log = Path(tempfile.gettempdir()) / f"{name}.log"
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
            [sys.executable, "-m", "miracl_eval.jobs.preload", name, str(idle)],
            cwd=_LIBRARY.parent,  # this library, whatever the job's working directory holds
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    try:
        code = proc.wait(timeout=30)  # 0 once the server listens (it then leaves this process's tree)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = None
    conn = _try_connect(name)  # also when it lost the race to bind (code 3): another one serves
    if conn is None:
        log.warning("no preload server: its start ended with %s (see %s)", code, server_log)
    return conn


def _try_connect(name: str) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect("\0" + name)
    except OSError:
        conn.close()
        return None
    if not _same_user(conn):  # an abstract socket has no permissions: never send a job to another user
        log.warning("the preload socket %s belongs to another user: not used", name)
        conn.close()
        return None
    return conn


def _same_user(conn: socket.socket) -> bool:
    """Whether the process at the other end of ``conn`` runs as this user (``SO_PEERCRED``)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid == os.getuid()


def _send(conn: socket.socket, payload: bytes) -> None:
    conn.sendall(_HEADER.pack(len(payload)))
    conn.sendall(payload)


def _receive_exact(conn: socket.socket, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        try:
            chunk = conn.recv(min(n - got, 1 << 20))
        except ConnectionError:
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _receive(conn: socket.socket) -> Any:
    header = _receive_exact(conn, _HEADER.size)
    if header is None:
        return None
    body = _receive_exact(conn, _HEADER.unpack(header)[0])
    return None if body is None else pickle.loads(body)


# ------------------------------------------------------------------------------------ the server


def serve(name: str, idle: float) -> None:
    """Accept jobs on the abstract socket ``name``, fork a child for each; exit when idle.

    Once it listens, the server forks itself out of the starting job's process tree (that first
    process exits 0, which tells the job the server is up; 3: another server had the name)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind("\0" + name)
    except OSError:  # another server took the name first
        sys.exit(3)
    listener.listen(64)
    if os.fork():  # the job that started it waits for this exit: the server is listening
        os._exit(0)
    children: set[int] = set()
    last = time.monotonic()
    print(f"preload server {os.getpid()} listening as {name}", flush=True)
    while True:
        while children:
            pid, _status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            children.discard(pid)
        if children:
            last = time.monotonic()
        elif time.monotonic() - last > idle:
            break
        ready, _, _ = select.select([listener], [], [], 0.5)
        if not ready:
            continue
        conn, _ = listener.accept()
        child: int | None
        try:
            child = _start_child(listener, conn) if _same_user(conn) else None
        except Exception:  # noqa: BLE001 - a bad request must not end the server
            traceback.print_exc()
            child = None
        finally:
            conn.close()
        if child:
            children.add(child)
        last = time.monotonic()
    listener.close()
    print(f"preload server {os.getpid()} idle for {idle:g} s: exiting", flush=True)


def _start_child(listener: socket.socket, conn: socket.socket) -> int | None:
    """Read a job's request, import what it runs (once per server), fork its child; the child's pid."""
    conn.settimeout(30)
    header = _receive_exact(conn, _HEADER.size)
    body = None if header is None else _receive_exact(conn, _HEADER.unpack(header)[0])
    if body is None:
        return None
    request = pickle.loads(body)
    _send(conn, pickle.dumps({"received": os.getpid()}))  # before the imports: the relay waits briefly for it
    _mark, fds, _flags, _addr = socket.recv_fds(conn, 1, 2)  # then the job's stdout and stderr
    if len(fds) != 2:
        for fd in fds:
            os.close(fd)
        return None
    sys.path[:] = request["path"]  # the jobs' own (part of the server's name), so imports resolve as theirs
    _warm(request["call"].module)
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        return pid
    try:  # the child: never returns to the server's loop
        listener.close()
        conn.settimeout(None)
        _child(conn, request, fds)
    finally:
        os._exit(70)


#: what every stage imports before its work: pyarrow converts its first array by way of pandas, which
#: it imports then (0.4 s on one core) whenever pandas is installed, as Snakemake's SLURM plugin needs
COMMON_MODULES = ("numpy", "pyarrow.parquet", "pyarrow.compute", "pandas")


def _warm(module_name: str) -> None:
    """Import a stage's module and the modules it lists in ``PRELOAD`` (errors are left to the child)."""
    try:
        module = importlib.import_module(module_name)
        for extra in (*COMMON_MODULES, *getattr(module, "PRELOAD", ())):
            importlib.import_module(extra)
    except Exception:  # noqa: BLE001 - the child imports it again and reports the error to its job
        traceback.print_exc()


def _child(conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    for target, fd in zip((1, 2), fds, strict=True):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[:] = request["path"]
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _apply_thread_limits()
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if request["log"]:
        handlers.append(logging.FileHandler(request["log"], mode="a", encoding="utf-8"))
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", handlers=handlers, force=True
    )
    _send(conn, pickle.dumps({"pid": os.getpid(), "server": os.getppid()}))
    threading.Thread(target=_die_with_relay, args=(conn,), daemon=True).start()
    try:
        reply: dict[str, Any] = {"result": request["call"]()}
    except BaseException as err:  # noqa: BLE001 - every error goes back to the job
        reply = {"error": _portable(err)}
    usage = resource.getrusage(resource.RUSAGE_SELF)
    reply["usage"] = {"max_rss_mb": usage.ru_maxrss / 1024, "cpu_s": usage.ru_utime + usage.ru_stime}
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    try:
        _send(conn, pickle.dumps(reply))
    except (pickle.PicklingError, TypeError, AttributeError) as err:
        _send(conn, pickle.dumps({"error": WorkerError(f"the stage's result cannot be sent back: {err}")}))
    os._exit(0)


def _apply_thread_limits() -> None:
    """torch read ``OMP_NUM_THREADS`` when the server imported it: give it the job's value."""
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if "torch" in sys.modules and threads.isdigit() and int(threads) > 0:
        sys.modules["torch"].set_num_threads(int(threads))


def _die_with_relay(conn: socket.socket) -> None:
    """Block until the relay's end of the connection closes; then the job is over: end at once."""
    try:
        while conn.recv(1 << 16):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGKILL)


def _portable(err: BaseException) -> BaseException:
    """What goes back to the job: a known error as itself (or its text, if it cannot be pickled), any
    other as a :class:`WorkerError` that carries the child's traceback."""
    if isinstance(err, MiraclEvalError):
        try:
            pickle.loads(pickle.dumps(err))
        except Exception:  # noqa: BLE001
            return MiraclEvalError(str(err))
        return err
    text = "".join(traceback.format_exception(err)).rstrip()
    return WorkerError(f"in the preloaded process:\n{text}")


if __name__ == "__main__":  # run from the package module, not as __main__: its errors then pickle by their names
    importlib.import_module("miracl_eval.jobs.preload").serve(sys.argv[1], float(sys.argv[2]))
