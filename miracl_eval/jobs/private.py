"""This user's own folder for what jobs on one machine share: GPU lock files, the preload servers' frozen
markers and logs.

The machine's temporary folder (``/tmp``) is shared by its users: a folder of fixed name there belongs to
whoever makes it first (a second user's jobs could not create their lock files in it), and a file of a name
another user can guess may be planted there first (a link that makes a job write elsewhere). So each user
gets ``{tempdir}/miracl-eval-{uid}`` (:func:`private_dir`; ``tempdir`` is ``$TMPDIR`` or ``/tmp``), made
with mode 0700 in one ``mkdir`` (atomic: never a moment when another user can write in it), and used only
when it is a real folder (not a link), owned by this user and writable by no one else; otherwise the job
stops with one message that names the folder and says what to do. ``$XDG_RUNTIME_DIR`` is not used: the
system removes it when the user's last session ends, which a workflow left running outlives.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from miracl_eval.errors import MiraclEvalError

#: the folder's name in the temporary folder: ``miracl-eval-{uid}``
PREFIX = "miracl-eval-"


class UnsafeFolderError(MiraclEvalError):
    """A folder a job would keep its locks or markers in is not this user's alone."""


def unsafe(path: Path, st: os.stat_result, uid: int) -> str | None:
    """Why a folder with ``lstat`` result ``st`` may not hold user ``uid``'s locks and markers; None if it may."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if st.st_uid != uid:
        return f"belongs to user id {st.st_uid}, not to this user ({uid})"
    writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if writable:
        who = "everyone" if st.st_mode & stat.S_IWOTH else "its group"
        return f"is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def private_dir(base: str | os.PathLike[str] | None = None) -> Path:
    """This user's folder ``{base}/miracl-eval-{uid}`` (``base``: the temporary folder), created with mode 0700
    when absent. Raises :class:`UnsafeFolderError` when it exists but is not this user's alone (:func:`unsafe`)."""
    uid = os.getuid()
    path = Path(base if base is not None else tempfile.gettempdir()) / f"{PREFIX}{uid}"
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as err:
        raise UnsafeFolderError(
            f"cannot create {path} for this user's GPU locks and preload markers ({err.strerror}): set TMPDIR to a "
            "folder of your own"
        ) from err
    why = unsafe(path, os.lstat(path), uid)
    if why is not None:
        raise UnsafeFolderError(
            f"{path} {why}: it would hold this user's GPU locks and preload markers. Remove it (or, if it is "
            f"yours, `chmod 700 {path}`), or set TMPDIR to a folder of your own"
        )
    return path
