"""Atomic outputs: a stage writes to a temporary sibling and renames it into place on success.

A failed or killed stage therefore never leaves a partial output behind under the final name.
Every temporary of an output ``out`` is named ``.out.tmp-*`` beside it: a failed stage removes
its own, and the next stage that writes ``out`` removes those of an earlier one that was killed
(SIGKILL, the OOM killer, a cluster's time limit), which could not. That is safe because one job
at a time writes a given output (Snakemake locks the working directory).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _tmp_prefix(final: Path) -> str:
    return f".{final.name}.tmp-"


def remove_leftovers(path: str | os.PathLike[str]) -> None:
    """Remove the temporaries of ``path`` that a killed stage left beside it."""
    final = Path(path)
    # the names atomic_output and scratch_dir give (8 characters of uuid4 hex or of tempfile's names)
    ours = re.compile(re.escape(_tmp_prefix(final)) + r"(?:scratch-)?[a-z0-9_]{8}")
    for leftover in final.parent.iterdir():
        if ours.fullmatch(leftover.name):
            log.info("removing %s, left by an earlier run that was killed", leftover)
            _remove(leftover)


@contextmanager
def atomic_output(path: str | os.PathLike[str], directory: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it to ``path`` when the block succeeds.

    With ``directory=True`` the temporary path is created as an empty directory. On any
    exception the temporary path is removed and the exception propagates; an existing
    ``path`` is only replaced once the new content is complete. Temporaries that an earlier,
    killed run left for ``path`` are removed first.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(final)
    tmp = final.with_name(f"{_tmp_prefix(final)}{uuid.uuid4().hex[:8]}")
    if directory:
        tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        _remove(tmp)
        raise
    if not tmp.exists():
        raise FileNotFoundError(f"{tmp}: the stage finished without writing its output")
    if final.exists() or final.is_symlink():
        _remove(final)
    os.replace(tmp, final)


@contextmanager
def scratch_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary folder beside ``path`` for a stage's intermediate files, removed on exit.

    Enter it inside :func:`atomic_output` of the same ``path``, which removes what a killed
    run left of both.
    """
    final = Path(path)
    with tempfile.TemporaryDirectory(prefix=f"{_tmp_prefix(final)}scratch-", dir=final.parent) as tmp:
        yield Path(tmp)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
