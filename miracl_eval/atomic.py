"""Atomic outputs: a stage writes to a temporary sibling and renames it into place on success.

A failed or killed stage therefore never leaves a partial output behind under the final name.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()


@contextmanager
def atomic_output(path: str | os.PathLike[str], directory: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it to ``path`` when the block succeeds.

    With ``directory=True`` the temporary path is created as an empty directory. On any
    exception the temporary path is removed and the exception propagates; an existing
    ``path`` is only replaced once the new content is complete.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp-{uuid.uuid4().hex[:8]}")
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


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
