"""The Makefile's choice of Python: the newest python3.13 or python3.12 on the PATH that runs, ``PYTHON=``
otherwise, and one sentence saying what to install when there is none."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO

MAKE = shutil.which("make")
pytestmark = pytest.mark.skipif(MAKE is None, reason="make is not installed")


def fake_pythons(folder: Path, versions: dict[str, tuple[int, int] | None]) -> Path:
    """``name -> (major, minor)`` interpreters that answer the Makefile's version check (None: a broken one,
    as a pyenv shim of a version that is not selected)."""
    folder.mkdir()
    for name, version in versions.items():
        script = folder / name
        if version is None:
            script.write_text(f"#!/bin/sh\necho 'pyenv: {name}: command not found' >&2\nexit 127\n")
        else:
            ok = version >= (3, 12)
            script.write_text(
                "#!/bin/sh\n"
                f'case "$*" in *platform*) echo {version[0]}.{version[1]}.0;; *) exit {0 if ok else 1};; esac\n'
            )
        script.chmod(0o755)
    return folder


def make(tmp_path: Path, versions: dict[str, tuple[int, int] | None], *args: str) -> subprocess.CompletedProcess[str]:
    work = tmp_path / "work"
    work.mkdir()
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(REPO / name, work / name)
    bin_dir = fake_pythons(tmp_path / "bin", versions)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    return subprocess.run([MAKE or "make", *args], cwd=work, env=env, capture_output=True, text=True, timeout=60)


def chosen(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stderr
    return next(line.split()[0] for line in proc.stdout.splitlines() if " -m venv --clear " in line)


@pytest.mark.parametrize(
    ("versions", "expected"),
    [
        ({"python3.13": (3, 13), "python3.12": (3, 12), "python3": (3, 11)}, "python3.13"),
        ({"python3.12": (3, 12), "python3": (3, 11)}, "python3.12"),
        ({"python3.13": None, "python3.12": (3, 12)}, "python3.12"),  # a shim of an unselected version
        ({"python3": (3, 14)}, "python3"),
    ],
    ids=["newest", "only-3.12", "broken-3.13", "python3-is-new"],
)
def test_the_newest_python_that_runs_is_chosen(tmp_path: Path, versions: dict, expected: str) -> None:
    assert chosen(make(tmp_path, versions, "-n", "-B", "venv")) == expected


def test_python_given_wins(tmp_path: Path) -> None:
    versions = {"python3.13": (3, 13), "python3.12": (3, 12)}
    assert chosen(make(tmp_path, versions, "-n", "-B", "venv", "PYTHON=python3.12")) == "python3.12"


def test_no_python_says_what_to_install(tmp_path: Path) -> None:
    proc = make(tmp_path, {"python3": (3, 11), "python3.13": None}, "venv")
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("make: no Python")]
    assert len(lines) == 1 and "install one" in lines[0] and "python3.12" in lines[0]
    assert not (tmp_path / "work" / ".venv").exists()


def test_an_old_python_given_is_refused_with_its_version(tmp_path: Path) -> None:
    proc = make(tmp_path, {"python3.11": (3, 11)}, "venv", "PYTHON=python3.11")
    assert proc.returncode != 0
    assert "make: python3.11 is Python 3.11.0; miracl-eval needs 3.12 or later" in proc.stderr
    assert not (tmp_path / "work" / ".venv").exists()
