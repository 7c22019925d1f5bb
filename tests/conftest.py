"""Shared test helpers: paths, the real MIRACL dev files in ../shared, and Snakemake runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample"
SHARED = Path(os.environ.get("MIRACL_EVAL_SHARED", REPO.parent / "shared"))
MIRACL_DEV = SHARED / "data" / "miracl-v1.0-dev"
MRTYDI_SAMPLE = SHARED / "data" / "mrtydi-1.1-sample"


@pytest.fixture
def miracl_dev() -> Path:
    if not MIRACL_DEV.is_dir():
        pytest.skip("../shared/data/miracl-v1.0-dev is absent")
    return MIRACL_DEV


def sample_config(languages: list[str] | None = None, **overrides: Any) -> dict[str, Any]:
    """The bundled MIRACL sample's config with absolute paths (usable from any working dir)."""
    cfg = yaml.safe_load((SAMPLE / "miracl.yaml").read_text(encoding="utf-8"))
    cfg["source"] = {k: str(REPO / v) for k, v in cfg["source"].items()}
    if languages is not None:
        cfg["languages"] = languages
    cfg.update(overrides)
    return cfg


def write_config(directory: Path, cfg: dict[str, Any], name: str = "config.yaml") -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def snakemake(
    workdir: Path, configfile: Path, *targets: str, args: tuple[str, ...] = (), check: bool = True, timeout: int = 1500
) -> subprocess.CompletedProcess[str]:
    """Run the workflow with ``python -m snakemake`` from another working directory."""
    cmd = [
        sys.executable, "-m", "snakemake", *targets,
        "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--configfile", str(configfile), "--cores", "2", *args,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


def planned_jobs(proc: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """The job counts of a (dry) run, from Snakemake's 'Job stats' table."""
    jobs: dict[str, int] = {}
    lines = (proc.stdout + proc.stderr).splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Job stats:"):
            for row in lines[i + 3 :]:
                parts = row.split()
                if len(parts) != 2 or parts[0] == "total":
                    break
                jobs[parts[0]] = int(parts[1])
            break
    return jobs
