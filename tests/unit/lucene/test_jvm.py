"""Which Java runtime the Lucene jobs use, and whether Lucene's vector API is turned on for it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from miracl_eval.lucene.jvm import (
    VECTOR_MODULE,
    has_vector_module,
    java_executable,
    java_home,
    runtime_modules,
    vector_options,
)


def fake_runtime(folder: Path, modules: list[str] | None) -> Path:
    folder.mkdir()
    if modules is not None:
        (folder / "release").write_text(f'JAVA_VERSION="21.0.8"\nMODULES="{" ".join(modules)}"\n', encoding="utf-8")
    return folder


def test_the_vector_option_only_for_a_runtime_that_has_the_module(tmp_path: Path) -> None:
    full = fake_runtime(tmp_path / "full", ["java.base", VECTOR_MODULE, "jdk.localedata"])
    trimmed = fake_runtime(tmp_path / "trimmed", ["java.base", "jdk.localedata"])
    unknown = fake_runtime(tmp_path / "unknown", None)
    assert runtime_modules(full) == {"java.base", VECTOR_MODULE, "jdk.localedata"}
    assert vector_options(full) == ("--add-modules=jdk.incubator.vector",) and has_vector_module(full)
    assert vector_options(trimmed) == () and vector_options(unknown) == () and runtime_modules(unknown) is None


def test_the_default_runtime_is_jdk4pys_java_21_and_its_modules_are_read_right(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MIRACL_EVAL_JAVA_HOME", raising=False)
    home = java_home()
    listed = subprocess.run([java_executable(), "--list-modules"], capture_output=True, text=True, check=True).stdout
    real = {line.split("@")[0] for line in listed.splitlines() if line.strip()}
    assert runtime_modules(home) == real  # the release file says what the runtime holds
    version = subprocess.run([java_executable(), "-version"], capture_output=True, text=True, check=True).stderr
    assert 'version "21.' in version


def test_the_override_names_another_runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = fake_runtime(tmp_path / "jdk", ["java.base", VECTOR_MODULE])
    monkeypatch.setenv("MIRACL_EVAL_JAVA_HOME", str(other))
    assert java_home() == other and has_vector_module()
