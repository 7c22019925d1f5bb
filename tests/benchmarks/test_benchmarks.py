"""The benchmark scripts a GPU lease runs (benchmarks/device_session.sh) work, run here on the CPU.

A GPU lease is rare and short: a script that broke since the last one would waste it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


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


def test_scale_compares_stages_with_their_engine_and_extrapolates(tmp_path) -> None:
    """The benchmark's machinery on its Faiss and numpy stages (under a minute; the Lucene stages'
    parity with pyserini is tested in test_workflow and test_sparse, the full run is in the README)."""
    stages = ("dense_flat", "search_flat", "rerank_scores")
    args = ["--sizes", "2500", "5000", "--budget", "0", "--workdir", str(tmp_path), "--stages", *stages[1:]]
    proc = subprocess.run([sys.executable, "benchmarks/scale.py", *args], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    for stage in stages:  # ours s, direct s, CPU ratio, throughput, at each size
        assert len(re.findall(rf"^  {stage} +[\d.]+ +[\d.]+ +[\d.]+ .* [\d,]+ \w+/s ", out, re.M)) == 2, stage
    # both sides agree: the exact search finds the same hits, the rerank scores are numpy's
    direct = re.findall(r"^  (\w+) +q=1000 +round 1 direct .*?(same_hits|max_diff) ([\d.e+-]+)$", out, re.M)
    assert [(stage, key) for stage, key, _ in direct] == [
        ("search_flat", "same_hits"),
        ("rerank_scores", "max_diff"),
    ] * 2
    assert all(float(v) == 1.0 if key == "same_hits" else float(v) < 1e-12 for _, key, v in direct)
    assert "growth from 2,500 to 5,000 passages" in out and "per query, at 2,500 passages" in out
    for target in ("MIRACL English: 32,893,221 passages, 799 queries", "MessIRve full: 14,047,759 passages"):
        assert target in out


def test_scale_affine_fit_is_a_fixed_plus_a_per_passage_cost() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("scale_benchmark", REPO / "benchmarks" / "scale.py")
    assert spec is not None and spec.loader is not None
    scale = importlib.util.module_from_spec(spec)
    sys.modules["scale_benchmark"] = scale  # its dataclasses look their module up
    spec.loader.exec_module(scale)
    xs = [1e5, 3e5, 1e6]
    assert scale.affine(xs, [2 + 3e-5 * x for x in xs]) == pytest.approx((2.0, 3e-5))
    assert scale.affine(xs, [5.0, 4.0, 3.0]) == (4.0, 0.0)  # no cost per passage: the mean
    a, b = scale.affine(xs, [0.5, 3.5, 10.5])  # the line would start below zero: through the origin
    assert a == 0.0 and b == pytest.approx(
        sum(x * y for x, y in zip(xs, [0.5, 3.5, 10.5], strict=True)) / sum(x * x for x in xs)
    )
    # a slope of log-log under 1 (a fixed cost) extrapolates below the linear fit at 33x
    assert scale.slope(xs, [2 + 3e-5 * x for x in xs]) < 0.9
