"""The preload server and its forked children (the relay's side is :mod:`miracl_eval.jobs.preload`).

``python -m miracl_eval.jobs.preload_server NAME IDLE`` (started by the first job that finds no server)
forks the server, which binds the abstract Unix socket ``NAME`` and listens, then says so through a
pipe: the starting process exits 0 (listening) or 3 (another server had the name). The server itself
calls ``listen``, so a job's ``SO_PEERCRED`` names it (the process whose liveness the job checks).

For each job: accept, read the request, say it was received, import the stage's modules (once per
server), say it is ready, take the job's stdout and stderr, fork a child that becomes the job (the
server holds the job's streams only between the last two). The server waits at most
:data:`STEP_SECONDS` on a job at each of these steps, so a stopped or slow job never holds it; it
exits after ``IDLE`` seconds without a job.

``MIRACL_EVAL_PRELOAD_FREEZE=STEP:FLAG`` (for tests) makes the process stop itself (``SIGSTOP``) once
at ``STEP`` (``accepted``, ``received``, ``fds``: the server; ``child``, ``greeted``: a forked child),
if the file ``FLAG`` does not exist yet (it is created then): a frozen server or child, at a known step,
without sleeps.
"""

from __future__ import annotations

import importlib
import logging
import os
import pickle
import resource
import select
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any

from miracl_eval.jobs.preload_wire import WorkerError, peer, portable, receive, send

#: seconds the server waits on a job at each step (its request, its stdout and stderr): far less than a
#: job's handshake, so that a stalled job never makes the server look frozen to the others
STEP_SECONDS = 2.0
FREEZE_ENV = "MIRACL_EVAL_PRELOAD_FREEZE"
#: what every stage imports before its work: pyarrow converts its first array by way of pandas, which
#: it imports then (0.4 s on one core) whenever pandas is installed, as Snakemake's SLURM plugin needs
COMMON_MODULES = ("numpy", "pyarrow.parquet", "pyarrow.compute", "pandas")


def freeze_point(step: str) -> None:
    """Stop this process here, once, if ``MIRACL_EVAL_PRELOAD_FREEZE`` names ``step`` (tests)."""
    point, _, flag = os.environ.get(FREEZE_ENV, "").partition(":")
    if point != step or not flag:
        return
    try:
        os.close(os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    os.kill(os.getpid(), signal.SIGSTOP)


def launch(name: str, idle: float) -> None:
    """Fork the server; exit 0 once it listens on ``name``, 3 if another server has the name."""
    read, write = os.pipe()
    if os.fork():
        os.close(write)
        status = os.read(read, 1)
        os._exit({b"0": 0, b"3": 3}.get(status, 1))
    os.close(read)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind("\0" + name)
    except OSError:  # another server took the name first
        os.write(write, b"3")
        os._exit(3)
    listener.listen(64)
    os.write(write, b"0")
    os.close(write)
    try:
        serve(listener, name, idle)
    finally:
        os._exit(0)


def serve(listener: socket.socket, name: str, idle: float) -> None:
    """Accept jobs on ``listener``, fork a child for each; return when idle for ``idle`` seconds."""
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
        child: int | None = None
        try:
            freeze_point("accepted")
            if peer(conn)[1] == os.getuid():
                child = _start_child(listener, conn)
        except Exception:  # noqa: BLE001 - a bad or vanished job must not end the server
            traceback.print_exc()
        finally:
            conn.close()
        if child:
            children.add(child)
        last = time.monotonic()
    listener.close()
    print(f"preload server {os.getpid()} idle for {idle:g} s: exiting", flush=True)


def _start_child(listener: socket.socket, conn: socket.socket) -> int | None:
    """Read a job's request, import what it runs (once per server), fork its child; the child's pid."""
    conn.settimeout(STEP_SECONDS)
    request = receive(conn)
    if request is None:
        return None
    send(conn, {"received": os.getpid()})  # before the imports: the job waits briefly for it
    freeze_point("received")
    sys.path[:] = request["path"]  # the jobs' own (part of the server's name), so imports resolve as theirs
    _warm(request["call"].module)
    send(conn, {"ready": os.getpid()})
    # the job's stdout and stderr, last: the server holds them only from here to the fork
    _mark, fds, _flags, _addr = socket.recv_fds(conn, 1, 2)
    if len(fds) != 2:
        for fd in fds:
            os.close(fd)
        return None
    freeze_point("fds")
    said, say = os.pipe()  # the child waits for the server's word of the fork: the job reads them in order
    pid = os.fork()
    if pid:
        for fd in (*fds, said):
            os.close(fd)
        try:
            send(conn, {"forked": pid})  # which process the job is to watch from now on
        finally:
            os.close(say)
        return pid
    try:  # the child: never returns to the server's loop
        os.close(say)
        os.read(said, 1)  # the server sent its word (or died: then the job gave up on it)
        os.close(said)
        listener.close()
        conn.settimeout(None)
        _child(conn, request, fds)
    finally:
        os._exit(70)


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
    freeze_point("child")
    # said here, before the greeting, not by the relay when it reads it: the job's log is in the order things happened
    logging.getLogger("miracl_eval.jobs.preload").info(
        "running in a preloaded process (pid %s, forked from preload server %s)", os.getpid(), os.getppid()
    )
    send(conn, {"pid": os.getpid(), "server": os.getppid()})
    threading.Thread(target=_die_with_relay, args=(conn,), daemon=True).start()
    freeze_point("greeted")
    try:
        reply: dict[str, Any] = {"result": request["call"]()}
    except BaseException as err:  # noqa: BLE001 - every error goes back to the job
        reply = {"error": portable(err)}
    usage = resource.getrusage(resource.RUSAGE_SELF)
    reply["usage"] = {"max_rss_mb": usage.ru_maxrss / 1024, "cpu_s": usage.ru_utime + usage.ru_stime}
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    try:
        send(conn, reply)
    except (pickle.PicklingError, TypeError, AttributeError) as err:
        send(conn, {"error": WorkerError(f"the stage's result cannot be sent back: {err}")})
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


if __name__ == "__main__":  # run as a module: its errors then pickle by the package's names
    importlib.import_module("miracl_eval.jobs.preload_server").launch(sys.argv[1], float(sys.argv[2]))
