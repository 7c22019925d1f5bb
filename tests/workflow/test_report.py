"""The report of a sample run: every page, table and chart, built by Snakemake."""

from __future__ import annotations

import base64
import csv
import json
import math
import re
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from miracl_eval.evaluation import published, significance
from miracl_eval.evaluation.published import published_rows
from miracl_eval.lucene.release import installed_release
from miracl_eval.report import plan as report_plan
from miracl_eval.report import stage_costs
from miracl_eval.report.sensitivity import SENSITIVITY_LABEL
from miracl_eval.tsv import read_tsv
from tests.helpers import PYSERINI_2CR, SAMPLE, m3_config, planned_jobs, snakemake, write_config
from tests.unit.report.test_report import CHARTS, LANGS, METHODS, PAIRS, REPORT_FILES, tsv_dicts, tsv_header

# =========================================================================== the report of a sample run


def report_config() -> dict:
    return m3_config(LANGS)


@pytest.fixture(scope="module")
def sample_report(m3_run: Path) -> Path:
    """The BGE-M3 run of the tables, then the default target (every report input) and
    ``snakemake --report report.html``."""
    cfg = write_config(m3_run, report_config(), "report.yaml")
    snakemake(m3_run, cfg)
    snakemake(m3_run, cfg, args=("--report", str(m3_run / "report.html")))
    return m3_run


def embedded(work: Path) -> dict[str, dict]:
    """The report's results (path → entry with a base64 ``data_uri``) and categories."""
    text = (work / "report.html").read_text(encoding="utf-8")
    results = json.loads(re.search(r"var results = (\{.*?\});\s*$", text, re.M | re.S).group(1))
    return results


def decode(data_uri: str) -> bytes:
    head, _, payload = data_uri.partition(",")
    assert head.endswith(";base64"), head
    return base64.b64decode(payload)


def test_report_holds_the_tables_charts_and_settings(sample_report: Path) -> None:
    results = embedded(sample_report)
    assert set(REPORT_FILES) <= set(results), sorted(set(REPORT_FILES) - set(results))
    for path in REPORT_FILES:  # every file is embedded exactly as the workflow wrote it
        assert decode(results[path]["data_uri"]) == (sample_report / path).read_bytes(), path
    for chart in CHARTS:
        assert results[chart]["mime_type"] == "image/svg+xml"
        ET.fromstring(decode(results[chart]["data_uri"]))  # well-formed SVG
    text = (sample_report / "report.html").read_text(encoding="utf-8")
    categories = json.loads(re.search(r"var categories = (\{.*?\});\s*$", text, re.M | re.S).group(1))
    assert set(categories["Results"]) == {"nDCG@10", "Recall@100"}
    assert {"Results vs published", "Significance", "Sensitivity (fusion weight)", "Run settings and costs"} <= set(
        categories
    )
    sens = (sample_report / "results/miracl_sensitivity.svg").read_text(encoding="utf-8")
    assert SENSITIVITY_LABEL[1:] in sens  # the label is real text of the chart
    assert SENSITIVITY_LABEL[1:] in results["results/miracl_sensitivity.svg"]["caption"]
    settings = {(r["setting"]): r["value"] for r in tsv_dicts(sample_report / "results/miracl_settings.tsv")}
    assert settings["dataset"] == "miracl" and settings["split"] == "dev" and settings["languages"] == "sw, yo"
    assert settings["version"] == "v1.0"
    m3 = "models.bge-m3."
    assert settings["methods"] == ", ".join(METHODS) and settings[m3 + "checkpoint"] == "resources/models/tiny-bge-m3"
    assert settings[m3 + "query_max_length"] == "256" and settings[m3 + "passage_max_length"] == "512"
    assert [settings[m3 + f"weights.{c}"] for c in ("dense", "sparse", "multivec")] == ["1", "0.3", "1"]
    assert (settings["bm25.k1"], settings["bm25.b"]) == ("0.9", "0.4")
    sw = len((SAMPLE / "miracl/sw/corpus.jsonl").read_text(encoding="utf-8").splitlines())
    assert settings["encoder.shard_size"] == "60" and settings["sw"] == f"{sw} passages, 3 encoding shards of up to 60"
    # BGE-M3 (the preset's trained_on: MIRACL's training split) is in-domain on MIRACL; BM25 zero-shot
    trained = {r["row"]: r["training"] for r in tsv_dicts(sample_report / "results/miracl_training.tsv")}
    assert trained == {m: "zero-shot" if m == "bm25" else "in-domain" for m in METHODS}
    page = (sample_report / "results/miracl_ndcg.html").read_text(encoding="utf-8")
    assert "bge-m3/dense†" in page and "bm25†" not in page and "not zero-shot" in page
    assert "Reproduction (results/miracl_reproduction.tsv): no published number of this measure is comparable" in page
    # a sample is not the full data: no MTEB result is written, and a note says why
    exported = sorted(p.name for p in (sample_report / "results/mteb/miracl").iterdir() if not p.name.startswith("."))
    assert (
        exported == ["README.md"] and "no MTEB result" in (sample_report / "results/mteb/miracl/README.md").read_text()
    )


def test_significance_table_has_every_pair_language_and_mean(sample_report: Path) -> None:
    path = sample_report / "results/miracl_significance.tsv"
    assert tsv_header(path) == list(significance.COLUMNS)
    rows = tsv_dicts(path)
    expected = [(m, a, b, p) for m in ("nDCG@10", "R@100") for a, b in PAIRS for p in (*LANGS, "mean")]
    assert [(r["measure"], r["method_a"], r["method_b"], r["partition"]) for r in rows] == expected
    ndcg = {r[0]: dict(zip(["sw", "yo", "mean"], r[1:], strict=True)) for r in read_tsv(
        sample_report / "results/miracl_ndcg.tsv")[1]}  # fmt: skip
    n = {
        lang: len((SAMPLE / "miracl" / lang / "topics.tsv").read_text(encoding="utf-8").splitlines()) for lang in LANGS
    }
    n["mean"] = sum(n.values())
    for r in rows:
        assert r["n_queries"] == str(n[r["partition"]])
        assert 0 < float(r["p_value"]) <= 1 and float(r["ci_low"]) <= float(r["diff"]) <= float(r["ci_high"])
        if r["measure"] == "nDCG@10":  # the means are the result table's numbers
            assert f"{float(r['mean_a']):.4f}" == ndcg[r["method_a"]][r["partition"]]
            assert f"{float(r['mean_b']):.4f}" == ndcg[r["method_b"]][r["partition"]]


def test_published_table_of_the_sample_is_empty_and_says_why(sample_report: Path) -> None:
    # the sample is not the full data the published numbers were computed on: nothing beside them
    assert tsv_header(sample_report / "results/miracl_published.tsv") == list(published.SIDE_BY_SIDE_COLUMNS)
    assert tsv_dicts(sample_report / "results/miracl_published.tsv") == []
    checks = {r["partition"]: r for r in tsv_dicts(sample_report / "results/miracl_comparability.tsv")}
    for lang, full in (("sw", "131,924"), ("yo", "49,043")):
        n = len((SAMPLE / "miracl" / lang / "corpus.jsonl").read_text(encoding="utf-8").splitlines())
        assert checks[lang]["comparable"] == "no" and checks[lang]["reason"].startswith(f"{n} of {full} passages")
    page = (sample_report / "results/miracl_published.html").read_text(encoding="utf-8")
    assert "No published number is shown" in page and checks["sw"]["reason"] in page


def test_published_side_by_side_matches_the_shipped_bm25_numbers(sample_report: Path) -> None:
    # the sample's tables, as if its two languages were the full data: the matching on configuration
    tables = {m: sample_report / f"results/miracl_{k}.tsv" for m, k in (("nDCG@10", "ndcg"), ("R@100", "recall100"))}
    from tests.helpers import run_config

    rows = published_rows(tables, "miracl", "dev", run_config(report_config()), set(LANGS))
    shipped = {
        (r["measure"], r["partition"]): r
        for r in csv.DictReader(
            [
                ln
                for ln in published.data_dir()
                .joinpath(f"pyserini_{installed_release()}_miracl_bm25.tsv")
                .read_text(encoding="utf-8")
                .splitlines()
                if not ln.startswith("#")
            ],
            delimiter="\t",
        )
    }
    # the tiny model is not BAAI/bge-m3 and the BGE-M3 paper's BM25 rows need another tokenizer or
    # all 18 languages: only pyserini's per-language BM25 numbers match this configuration
    assert {(r["method"], r["source_id"]) for r in rows} == {("bm25", PYSERINI_2CR)}
    assert sorted((r["measure"], r["partition"]) for r in rows) == sorted(
        (m, p) for m in ("nDCG@10", "R@100") for p in LANGS
    )
    ours = {m: published.read_results_table(sample_report / f"results/miracl_{k}.tsv") for m, k in (
        ("nDCG@10", "ndcg"), ("R@100", "recall100"))}  # fmt: skip
    for r in rows:
        src = shipped[(r["measure"], r["partition"])]
        assert r["published"] == src["value"] and str(r["scale"]) == src["scale"] == "1"
        assert Decimal(repr(r["theirs"])) == Decimal(src["value"])  # exactly the shipped number
        assert float(r["ours"]) == ours[r["measure"]]["bm25"][r["partition"]]
        assert math.isclose(float(r["diff"]), float(r["ours"]) - float(r["theirs"]), abs_tol=1e-15)
    assert published_rows(tables, "miracl", "dev", run_config(report_config()), {"sw"}) == [
        r for r in rows if r["partition"] == "sw"
    ]


def test_sensitivity_at_the_fixed_weight_is_the_headline_number(sample_report: Path) -> None:
    rows = tsv_dicts(sample_report / "results/miracl_sensitivity.tsv")
    ndcg = published.read_results_table(sample_report / "results/miracl_ndcg.tsv")
    fused = ("bge-m3/dense+sparse", "bge-m3/all")
    assert {(r["partition"], r["method"]) for r in rows} == {(p, m) for p in LANGS for m in fused}
    assert len(rows) == 2 * 2 * 11
    for r in rows:
        if r["sparse_weight"] == "0.3":
            assert round(float(r["ndcg10"]), 4) == ndcg[r["method"]][r["partition"]]


def test_top_differences_and_stage_costs(sample_report: Path) -> None:
    rows = tsv_dicts(sample_report / "results/miracl_top_differences.tsv")
    assert rows and {(r["method_a"], r["method_b"]) for r in rows} <= set(PAIRS)
    for r in rows:
        pq_a = significance.per_query_values(
            sample_report / f"results/miracl/{r['partition']}/{r['method_a']}.per_query.parquet", "nDCG@10"
        )
        assert float(r["value_a"]) == pq_a[r["qid"]] and r["query"]
        assert float(r["diff"]) == pytest.approx(float(r["value_a"]) - float(r["value_b"]))
        assert (float(r["diff"]) > 0) == (r["direction"] == "win")
    costs = {r["rule"]: r for r in tsv_dicts(sample_report / "results/miracl_stage_costs.tsv")}
    assert tsv_header(sample_report / "results/miracl_stage_costs.tsv") == list(stage_costs.STAGE_COSTS_COLUMNS)
    jobs = {rule: int(r["jobs"]) for rule, r in costs.items()}
    assert jobs["evaluate"] == 6 and jobs["tables"] == 1 and jobs["encode_corpus_dense_sparse"] == 2
    assert jobs["tiny_model"] == 1 and jobs["report_significance"] == 1 and "report_stage_costs" not in jobs
    for r in costs.values():
        assert float(r["total_s"]) >= float(r["max_s"]) > 0
        # a peak is measured, but for a rule of sub-second jobs that may end before Snakemake's first sample
        assert (r["max_rss_mb"] and float(r["max_rss_mb"]) >= 1) or float(r["max_s"]) < 1, r
    # the encoding jobs ran preloaded (the sample's setting): their memory is the forked process's
    # (torch and a model: hundreds of MB), not their relay's (tens of MB, in their benchmark files)
    relay = stage_costs.read_benchmark(sample_report / "stats/miracl/encode_queries_dense_sparse/bge-m3/sw.tsv")[0][
        "max_rss"
    ]
    assert float(costs["encode_queries_dense_sparse"]["max_rss_mb"]) > 150 > relay


def test_table_target_alone_builds_no_report_inputs(sample_report: Path, tmp_path: Path) -> None:
    cfg = write_config(tmp_path, report_config())
    jobs = planned_jobs(snakemake(tmp_path, cfg, "results/miracl_ndcg.tsv", args=("-n",)))
    assert jobs and "tables" in jobs and not [j for j in jobs if j.startswith("report_")]
    assert "Nothing to be done" in snakemake(sample_report, cfg, args=("-n",)).stdout


# --------------------------------------------------------------------------- in a browser

BROWSER_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--virtual-time-budget=15000",
]  # fmt: skip


@pytest.fixture(scope="module")
def chromium() -> str:
    """Debian's Chromium, installed with apt when missing (skip when that is not possible)."""
    found = shutil.which("chromium")
    if found is None and shutil.which("apt-get"):
        env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        try:
            subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=300, check=False)
            subprocess.run(
                ["apt-get", "install", "-y", "-qq", "chromium"], env=env, capture_output=True, timeout=900, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            pass
        found = shutil.which("chromium")
    if found is None:
        pytest.skip("chromium is not installed and could not be installed with apt-get")
    return found


def open_in_report(work: Path, out: Path, script: str) -> Path:
    """A copy of the report with ``script`` run once the report app has loaded (what a click does)."""
    text = (work / "report.html").read_text(encoding="utf-8")
    inject = f"<script>window.addEventListener('load', function () {{ setTimeout(function () {{ {script} }}, 300); }});</script>"
    end = text.rindex("</body>")
    out.write_text(text[:end] + inject + text[end:], encoding="utf-8")
    return out


def run_browser(binary: str, page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    try:
        return subprocess.run(
            [binary, *BROWSER_FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def show(path: str) -> str:
    kind = "img" if path.endswith((".svg", ".png")) else "html"
    return f"app.setView({{content: '{kind}', contentPath: results['{path}'].data_uri, resultPath: '{path}'}});"


def test_charts_load_in_chromium(sample_report: Path, chromium: str, tmp_path: Path) -> None:
    # every image of the report decodes and has a size, after the report's own JavaScript ran
    check = (
        "var paths = Object.keys(results).filter(function (p) { return results[p].mime_type.startsWith('image/'); });"
        "var out = document.createElement('pre'); out.id = 'chart-check'; document.body.appendChild(out);"
        "paths.forEach(function (p) { var im = new Image();"
        "  im.onload = function () { out.textContent += 'ok ' + p + ' ' + im.naturalWidth + 'x' + im.naturalHeight + '\\n'; };"
        "  im.onerror = function () { out.textContent += 'error ' + p + '\\n'; };"
        "  im.src = results[p].data_uri; });" + show(CHARTS[0])
    )
    page = open_in_report(sample_report, tmp_path / "check.html", check)
    proc = run_browser(chromium, page, "--dump-dom")
    dom = proc.stdout
    assert 'id="chart-check"' in dom, proc.stderr[-2000:]
    loaded = dict(re.findall(r"ok (\S+) (\d+x\d+)", dom))
    assert set(loaded) == set(CHARTS), dom[dom.find("chart-check") :][:500]
    for size in loaded.values():
        w, h = map(int, size.split("x"))
        assert w > 300 and h > 200
    assert re.search(r'<img src="data:image/svg\+xml;[^"]*"', dom), "the chart is not shown"


def test_chart_screenshot_is_not_blank(sample_report: Path, chromium: str, tmp_path: Path) -> None:
    import matplotlib.image

    swept = ["bge-m3/dense+sparse", "bge-m3/all"]
    for chart, colours in ((CHARTS[0], METHODS), (CHARTS[2], swept)):
        palette = report_plan.row_colors(colours)
        page = open_in_report(sample_report, tmp_path / "shot.html", show(chart))
        shot = tmp_path / f"{Path(chart).stem}.png"
        proc = run_browser(chromium, page, f"--screenshot={shot}", "--window-size=1600,1000")
        assert shot.is_file(), proc.stderr[-2000:]
        pixels = (matplotlib.image.imread(shot)[:, :, :3] * 255).round().astype(int)
        content = pixels[:, 330:]  # right of the report's menu
        assert len(np.unique(content.reshape(-1, 3), axis=0)) > 20, "blank screenshot"
        for method in colours:  # the bars (or lines) of every method are drawn in their colour
            rgb = [int(palette[method][i : i + 2], 16) for i in (1, 3, 5)]
            near = np.all(np.abs(content - rgb) <= 6, axis=2).sum()
            assert near > 30, f"{chart}: no pixels of {method}'s colour {palette[method]}"
