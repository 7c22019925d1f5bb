"""The benchmark scripts a GPU lease runs (benchmarks/device_session.sh) work, run here on the CPU.

A GPU lease is rare and short: a script that broke since the last one would waste it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _run(*args: str) -> str:
    proc = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_gpu_checks_on_the_cpu():
    pytest.importorskip("FlagEmbedding")
    out = _run("benchmarks/gpu_checks.py", "--device", "cpu")
    assert len(re.findall(r"^PASS ", out, re.M)) == 7, out
    assert "FAIL" not in out and out.rstrip().endswith("all checks passed")


@pytest.mark.parametrize("family,reference", [("bge-m3", "FlagEmbedding"), ("dense", "sentence-transformers")])
def test_encode_speed_prints_figures(family, reference):
    pytest.importorskip("FlagEmbedding" if family == "bge-m3" else "sentence_transformers")
    out = _run(
        "benchmarks/encode_speed.py",
        *("--family", family, "--n", "64", "--rounds", "1", "--tokens", "40", "--max-length", "64"),
        *("--threads", "1", "--skip-stream"),
    )
    mean = float(re.search(r"passages: ([\d.]+) tokens on average", out).group(1))  # type: ignore[union-attr]
    assert 30 <= mean <= 55  # about 40 tokens plus <s> and </s>
    for name in ("miracl_eval.encoders", reference):
        assert re.search(rf"{re.escape(name)}\s*:\s*[\d.]+ passages/s \(median\),\s*\d+ tokens/s", out), out
    assert re.search(rf"throughput ratio ours/{reference}: [\d.]+x", out)
