"""Each user's own folder for GPU locks and preload markers: made 0700, refused when another user could write it
(or owns it, or it is a link), and where the leases, markers and server logs go."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from miracl_eval.jobs import devices, preload
from miracl_eval.jobs.private import PREFIX, UnsafeFolderError, private_dir, unsafe
from tests.unit.jobs.test_devices import _device, _holder, _release


@pytest.fixture
def tmpdir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary folder as ``/tmp`` is (everyone may create in it, sticky), as the jobs' ``TMPDIR``."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setenv("TMPDIR", str(shared))
    monkeypatch.delenv(devices.LOCKS_ENV, raising=False)
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    return shared


def _stat(mode: int, uid: int) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, 0, 0, 0, 0, 0))


def test_a_fresh_folder_is_this_users_alone(tmpdir_env: Path) -> None:
    folder = private_dir()
    assert folder == tmpdir_env / f"{PREFIX}{os.getuid()}"
    st = os.lstat(folder)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700
    assert private_dir() == folder  # found again, unchanged


@pytest.mark.parametrize(
    "mode, why",
    [
        (0o777, "writable by everyone \\(mode 0777\\)"),
        (0o1777, "writable by everyone \\(mode 1777\\)"),
        (0o770, "writable by its group \\(mode 0770\\)"),
    ],
)
def test_a_folder_others_can_write_is_refused(tmpdir_env: Path, mode: int, why: str) -> None:
    """Made by another user before this one's first job (or chmod-ed open): never used, one message naming it."""
    folder = tmpdir_env / f"{PREFIX}{os.getuid()}"
    folder.mkdir()
    folder.chmod(mode)
    with pytest.raises(UnsafeFolderError, match=f"{folder} is {why}.*chmod 700.*TMPDIR") as err:
        private_dir()
    assert "\n" not in str(err.value)
    with pytest.raises(UnsafeFolderError):  # a GPU lease stops with it too, before any lock file is made
        devices.lock_dir()
    assert list(folder.iterdir()) == []


def test_a_link_or_a_file_in_its_place_is_refused(tmpdir_env: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    folder = tmpdir_env / f"{PREFIX}{os.getuid()}"
    folder.symlink_to(elsewhere)  # planted by another user: writes would land where the link points
    with pytest.raises(UnsafeFolderError, match="is a symbolic link"):
        private_dir()
    folder.unlink()
    folder.write_text("")
    with pytest.raises(UnsafeFolderError, match="is not a folder"):
        private_dir()


def test_a_folder_of_another_owner_is_refused(tmpdir_env: Path) -> None:
    """Another user made the folder of this user's name first: refused, whatever its mode."""
    folder = tmpdir_env / f"{PREFIX}{os.getuid()}"
    assert unsafe(folder, _stat(stat.S_IFDIR | 0o700, uid=4242), uid=1000) == (
        "belongs to user id 4242, not to this user (1000)"
    )
    assert unsafe(folder, _stat(stat.S_IFDIR | 0o700, uid=1000), uid=1000) is None
    assert unsafe(folder, _stat(stat.S_IFDIR | 0o755, uid=1000), uid=1000) is None  # readable: fine
    if os.getuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    folder.mkdir(mode=0o700)
    os.chown(folder, 4242, 4242)
    with pytest.raises(UnsafeFolderError, match="belongs to user id 4242, not to this user \\(0\\)"):
        private_dir()


def test_leases_markers_and_server_logs_live_in_the_users_folder(tmpdir_env: Path) -> None:
    """Not in folders and files of fixed names in /tmp that the first user to come owns (a second user's leases
    failed with PermissionError) or that another user could plant first."""
    mine = tmpdir_env / f"{PREFIX}{os.getuid()}"
    assert devices.lock_dir() == mine / "gpu-locks"
    assert preload._marker("miracl-eval-preload-x") == mine / "miracl-eval-preload-x.frozen"
    assert preload._server_log("miracl-eval-preload-x") == mine / "miracl-eval-preload-x.log"
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_JOB_ID", "CUDA_VISIBLE_DEVICES")}
    holder = _holder({**env, "MIRACL_EVAL_GPUS": "2"})  # a real lease, in a process of its own
    try:
        assert _device(holder) == "0"
        assert [p.name for p in (mine / "gpu-locks").iterdir()] == ["gpu-0.lock"]
    finally:
        _release(holder)
    assert stat.S_IMODE(os.lstat(mine).st_mode) == 0o700
    assert sorted(p.name for p in tmpdir_env.iterdir()) == [mine.name]  # nothing else in the shared folder
