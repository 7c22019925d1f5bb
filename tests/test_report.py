"""The report: its library (tables, charts, settings, stage costs) and Snakemake's HTML report of
a sample run, opened in headless Chromium."""

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
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLE, m3_config, planned_jobs, snakemake, write_config

from miracl_eval import published, report, report_plan, schemas, significance, stage_costs

LANGS = ["sw", "yo"]
METHODS = ["bm25", "bge-m3/dense", "bge-m3/sparse", "bge-m3/multivec", "bge-m3/dense+sparse", "bge-m3/all"]
PAIRS = [
    ("bge-m3/dense", "bm25"),
    ("bge-m3/sparse", "bm25"),
    ("bge-m3/multivec", "bm25"),
    ("bge-m3/dense+sparse", "bm25"),
    ("bge-m3/all", "bm25"),
    ("bge-m3/dense+sparse", "bge-m3/dense"),
    ("bge-m3/all", "bge-m3/dense"),
]
REPORT_FILES = [
    f"results/miracl_{name}"
    for name in (
        "ndcg.tsv", "ndcg.html", "ndcg.svg", "recall100.tsv", "recall100.html", "recall100.svg",
        "published.tsv", "published.html", "comparability.tsv", "significance.tsv", "significance.html",
        "top_differences.tsv", "top_differences.html", "sensitivity.tsv", "sensitivity.svg",
        "settings.tsv", "settings.html", "stage_costs.tsv", "stage_costs.html",
    )
]  # fmt: skip
CHARTS = ["results/miracl_ndcg.svg", "results/miracl_recall100.svg", "results/miracl_sensitivity.svg"]


def tsv_dicts(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def tsv_header(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()[0].split("\t")


# =========================================================================== unit tests


def test_comparison_pairs_follow_from_the_rows() -> None:
    assert report_plan.comparison_pairs(METHODS) == PAIRS
    assert report_plan.comparison_pairs(["bm25"]) == []
    assert report_plan.comparison_pairs(["m/dense"]) == []
    assert report_plan.comparison_pairs(["m/all", "m/dense", "m/dense+sparse", "n/all"]) == [
        ("m/all", "m/dense"),
        ("m/dense+sparse", "m/dense"),
    ]
    assert report_plan.comparison_pairs(["e5/dense", "bm25", "e5/dense"]) == [("e5/dense", "bm25")]
    hybrids = {"h": {"systems": ["bm25", "e5/dense"]}}
    assert report_plan.comparison_pairs(["bm25", "e5/dense", "h"], hybrids) == [
        ("e5/dense", "bm25"),
        ("h", "bm25"),
        ("h", "e5/dense"),
    ]


def test_report_inputs_and_settings_follow_the_configured_rows() -> None:
    files = report_plan.report_inputs("miracl", ["ndcg", "recall100"], METHODS)
    assert files == [
        f for f in REPORT_FILES if "stage_costs" not in f and not f.endswith(("ndcg.tsv", "recall100.tsv"))
    ]
    bm25 = report_plan.report_inputs("miracl", ["ndcg"], ["bm25"])
    assert bm25 == [f"results/miracl_{n}" for n in ("ndcg.html", "ndcg.svg", "published.tsv", "published.html",
                                                     "comparability.tsv", "settings.tsv", "settings.html")]  # fmt: skip
    from miracl_eval.config import validate

    cfg = validate(
        {
            "languages": ["sw"],
            "models": {
                "bge-m3": {"weights": {"multivec": 2}},
                "me5-small": {},
                "unused": {"family": "dense", "checkpoint": "x"},
            },
            "methods": ["bm25", "bge-m3/multivec", "me5-small/dense"],
        }
    )
    pairs = report_plan.comparison_pairs(cfg["methods"])
    settings = report_plan.run_settings(cfg, "miracl", True, pairs, {"n_bootstrap": 5})
    assert list(settings) == ["data", "retrieval", "bm25", "model bge-m3", "model me5-small", "encoder", "dense index",
                              "multi-vector rerank and fusion", "significance"]  # fmt: skip
    assert settings["data"]["source"] == "Hugging Face hub, revision main" and settings["data"]["split"] == "dev"
    m3 = settings["model bge-m3"]
    assert m3["models.bge-m3.checkpoint"] == "BAAI/bge-m3" and m3["models.bge-m3.passage_max_length"] == 512
    assert m3["models.bge-m3.weights.multivec"] == 2 and m3["models.bge-m3.weights.sparse"] == 0.3
    assert settings["model me5-small"]["models.me5-small.query_prefix"] == "query: "
    assert settings["dense index"] == {"dense_index.type": "flat", "dense_index.gpu": True}
    assert settings["significance"] == {
        "pairs (A vs B)": ["bge-m3/multivec vs bm25", "me5-small/dense vs bm25"],
        "bootstrap resamples": 5,
    }
    only_bm25 = report_plan.run_settings(validate({"languages": ["sw"]}), "miracl")
    assert list(only_bm25) == ["data", "retrieval", "bm25"]


def test_row_colours_are_fixed_per_row_and_distinct() -> None:
    colors = report_plan.row_colors(METHODS + ["me5/dense", "h"])
    assert colors["bm25"] == report_plan.BM25_COLOR
    assert len(set(colors.values())) == len(colors)
    assert report_plan.row_colors(["a/dense", "bm25", "b/dense"]) == {
        "a/dense": report_plan.PALETTE[0],
        "bm25": report_plan.BM25_COLOR,
        "b/dense": report_plan.PALETTE[1],
    }


def write_results(path: Path, values: dict[str, dict[str, float]], parts: list[str], mean: bool = True) -> None:
    from miracl_eval.metrics import format_table

    path.write_text(format_table(values, list(values), parts, mean), encoding="utf-8")


def test_results_views_html_marks_the_best_and_chart_has_every_method(tmp_path: Path) -> None:
    values = {"bm25": {"sw": 0.4, "yo": 0.6}, "dense": {"sw": 0.7, "yo": 0.5}, "all": {"sw": 0.2, "yo": 0.1}}
    table = tmp_path / "t.tsv"
    write_results(table, values, ["sw", "yo"])
    page, chart = tmp_path / "t.html", tmp_path / "t.svg"
    report.results_views_stage(table, "R@100", "miracl", "dev", page, chart)
    text = page.read_text(encoding="utf-8")
    assert "Recall@100 — miracl dev" in text
    bold = re.findall(r'<td class="num best[^"]*">([0-9.]+)</td>', text)
    assert bold == ["0.6000", "0.7000", "0.6000"]  # row by row: bm25 (yo), dense (sw, mean 0.6 > 0.5)
    svg = ET.parse(chart).getroot()
    texts = {t.text.strip() for t in svg.iter("{http://www.w3.org/2000/svg}text") if t.text and t.text.strip()}
    assert {"bm25", "dense", "all", "sw", "yo", "mean", "Recall@100"} <= texts
    # one bar per (method, column): matplotlib's patches carry the method colours
    body = chart.read_text(encoding="utf-8")
    for method in values:
        assert body.count(f"fill: {report_plan.row_colors(list(values))[method]}") >= 3 + 1  # 3 bars and the legend
    assert "Date" not in body  # reproducible: no time stamp
    again = tmp_path / "again.svg"
    report.results_views_stage(table, "R@100", "miracl", "dev", page, again)
    assert again.read_bytes() == chart.read_bytes()


def test_html_escapes_text() -> None:
    out = report.html_table(["q"], [["<script>alert(1)</script> & co"]])
    assert "<script>" not in out and "&lt;script&gt;" in out and "&amp; co" in out


def per_query_file(path: Path, values: dict[str, float], measure: str = "nDCG@10") -> Path:
    rows = {"qid": list(values), "measure": [measure] * len(values), "value": list(values.values())}
    other = {"qid": list(values), "measure": ["R@100"] * len(values), "value": [1.0] * len(values)}
    table = pa.concat_tables([pa.table(rows, schema=schemas.PER_QUERY), pa.table(other, schema=schemas.PER_QUERY)])
    schemas.write_table(table, path, schemas.PER_QUERY)
    return path


def test_significance_stage_writes_pairs_partitions_measures(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    methods, parts = ["bm25", "dense", "all"], ["sw", "yo", "zh"]
    files = []
    for p in parts:
        for m in methods:
            vals = {f"{p}{q}": float(v) for q, v in enumerate(rng.random(30))}
            files.append(per_query_file(tmp_path / f"{p}-{m}.parquet", vals))
    pairs = report_plan.comparison_pairs(methods)
    out, page = tmp_path / "sig.tsv", tmp_path / "sig.html"
    kw = {"n_permutations": 200, "n_bootstrap": 200}
    report.significance_stage(files, methods, parts, pairs, ["nDCG@10", "R@100"], out, page, **kw)
    rows = tsv_dicts(out)
    assert tsv_header(out) == list(significance.COLUMNS)
    assert len(rows) == len(pairs) * (len(parts) + 1) * 2
    assert [r["partition"] for r in rows[:4]] == ["sw", "yo", "zh", "mean"]
    assert {(r["method_a"], r["method_b"]) for r in rows} == set(pairs)
    same = [r for r in rows if r["measure"] == "R@100"]  # identical values: no difference, p = 1
    assert all(float(r["diff"]) == 0 and float(r["p_value"]) == 1 for r in same)
    html_text = page.read_text(encoding="utf-8")
    assert "nDCG@10: difference A − B" in html_text and "Recall@100: difference A − B" in html_text
    report.significance_stage(files, methods, parts, pairs, ["nDCG@10"], out, page, mean_row=False, **kw)
    assert "mean" not in {r["partition"] for r in tsv_dicts(out)}


def test_top_differences_rows_carry_query_text(tmp_path: Path) -> None:
    a = per_query_file(tmp_path / "a.parquet", {"q1": 1.0, "q2": 0.0, "q3": 0.5, "q4": 0.5})
    b = per_query_file(tmp_path / "b.parquet", {"q1": 0.2, "q2": 0.9, "q3": 0.4, "q4": 0.5})
    queries = tmp_path / "queries.parquet"
    schemas.write_table(
        pa.table({"qid": ["q1", "q2", "q3", "q4"], "query": ["one", "two", "three", "four"]}, schema=schemas.QUERIES),
        queries,
        schemas.QUERIES,
    )
    out, page = tmp_path / "top.tsv", tmp_path / "top.html"
    report.top_differences_stage([a, b], ["a", "b"], ["sw"], [queries], [("a", "b")], out, page, n=5)
    rows = tsv_dicts(out)
    assert tsv_header(out) == list(report.TOP_DIFFERENCES_COLUMNS)
    assert [(r["direction"], r["rank"], r["qid"], r["query"]) for r in rows] == [
        ("win", "1", "q1", "one"),
        ("win", "2", "q3", "three"),
        ("loss", "1", "q2", "two"),
    ]
    assert float(rows[0]["diff"]) == pytest.approx(0.8)
    assert "three" in page.read_text(encoding="utf-8")


def test_sensitivity_weights_keep_the_fixed_weight_on_the_grid() -> None:
    assert report.sensitivity_weights(0.3) == [i / 10 for i in range(11)]
    assert report.sensitivity_weights(0.25)[3] == 0.25 and len(report.sensitivity_weights(0.25)) == 12


def test_settings_rows_count_passages_and_shards(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"docid": [f"d{i}" for i in range(25)]}), corpus)
    rows = report.settings_rows(
        {"BGE-M3": {"model": "BAAI/bge-m3", "encoder.passage_max_length": 512}, "data": {"languages": ["sw", "yo"]}},
        {"sw": corpus},
        shard_size=10,
    )
    assert rows == [
        {"section": "BGE-M3", "setting": "model", "value": "BAAI/bge-m3"},
        {"section": "BGE-M3", "setting": "encoder.passage_max_length", "value": "512"},
        {"section": "data", "setting": "languages", "value": "sw, yo"},
        {"section": "corpus", "setting": "sw", "value": "25 passages, 3 encoding shards of up to 10"},
    ]
    assert report.settings_rows({}, {"sw": corpus})[0]["value"] == "25 passages"
    assert report.format_setting({"dense": 1.0, "sparse": 0.3}) == "dense=1; sparse=0.3"


BENCH_HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def bench(path: Path, *runs: tuple[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = "".join(f"{s}\t0:00:01\t{rss}\t1\t1\t1\t0\t0\t0\t0\n" for s, rss in runs)
    path.write_text(BENCH_HEADER + lines, encoding="utf-8")


def test_stage_costs_attribute_files_to_rules_and_filter_other_runs(tmp_path: Path) -> None:
    patterns = {
        "tiny_model": "stats/models/tiny-bge-m3.tsv",
        "encode_corpus_shard": "stats/{dataset}/encode_corpus/{corpus}/{shard}.tsv",
        "evaluate": "stats/{dataset}/evaluate/{part}/{method}.tsv",
        "tables": "stats/{dataset}/tables.tsv",
        "odd": "stats/{dataset}/odd/{x,[0-9]+}.tsv",
    }
    stats = tmp_path / "stats"
    bench(stats / "models/tiny-bge-m3.tsv", ("10.5", "400"))
    bench(stats / "miracl/encode_corpus/sw/00000.tsv", ("3.0", "480.5"))
    bench(stats / "miracl/encode_corpus/sw/00001.tsv", ("5.0", "470"))
    bench(stats / "miracl/encode_corpus/zh/00000.tsv", ("99", "9999"))  # a language not in this run
    bench(stats / "miracl/evaluate/sw/bm25.tsv", ("1.0", "100"), ("3.0", "120"))  # repeated: mean 2 s
    bench(stats / "miracl/evaluate/sw/dense+sparse.tsv", ("2.0", "NA"))
    bench(stats / "miracl/evaluate/sw/sparse.tsv", ("7.0", "700"))  # a method not in this run
    bench(stats / "messirve/tables.tsv", ("50", "50"))  # another dataset
    bench(stats / "miracl/tables.tsv", ("0.5", "-"))
    bench(stats / "miracl/odd/abc.tsv", ("1", "1"))  # fails the wildcard's own regex
    bench(stats / "miracl/odd/12.tsv", ("1.25", "1"))
    (stats / "miracl/notes.tsv").write_text("x\n1\n")  # matches no rule
    allowed = {"dataset": ["miracl"], "part": ["sw"], "corpus": ["sw"], "method": ["bm25", "dense+sparse"]}
    rows = stage_costs.stage_costs(
        sorted(stats.rglob("*.tsv")), patterns, allowed, skip_rules=["tiny_model"], root=tmp_path
    )
    assert rows[0] == {"rule": "encode_corpus_shard", "jobs": 2, "total_s": 8.0, "max_s": 5.0, "max_rss_mb": 480.5}
    # a preloaded job: its benchmark file measured its relay; its log has the forked process's peak
    logs = {"encode_corpus_shard": "logs/{dataset}/encode_corpus/{corpus}/{shard}.log", "evaluate": "logs/none.log"}
    job_log = tmp_path / "logs/miracl/encode_corpus/sw/00001.log"
    job_log.parent.mkdir(parents=True)
    job_log.write_text("x INFO miracl_eval.preload: preloaded process: peak RSS 912 MB, CPU 3.0 s\n", encoding="utf-8")
    rows = stage_costs.stage_costs(
        sorted(stats.rglob("*.tsv")), patterns, allowed, skip_rules=["tiny_model"], root=tmp_path, logs=logs
    )
    assert rows == [
        {"rule": "encode_corpus_shard", "jobs": 2, "total_s": 8.0, "max_s": 5.0, "max_rss_mb": 912.0},
        {"rule": "evaluate", "jobs": 2, "total_s": 4.0, "max_s": 3.0, "max_rss_mb": 120.0},
        {"rule": "tables", "jobs": 1, "total_s": 0.5, "max_s": 0.5, "max_rss_mb": None},
        {"rule": "odd", "jobs": 1, "total_s": 1.25, "max_s": 1.25, "max_rss_mb": 1.0},
    ]
    out, page = tmp_path / "costs.tsv", tmp_path / "costs.html"
    stage_costs.stage_costs_stage(stats, patterns, out, page, allowed, root=tmp_path)
    got = tsv_dicts(out)
    assert tsv_header(out) == list(stage_costs.STAGE_COSTS_COLUMNS)
    assert got[0] == {"rule": "tiny_model", "jobs": "1", "total_s": "10.5", "max_s": "10.5", "max_rss_mb": "400.0"}
    assert got[3]["max_rss_mb"] == ""
    assert re.search(r"all rules</td><td class=\"num\">7</td><td class=\"num\">24\.2</td>", page.read_text())


def test_identify_benchmark_prefers_the_most_specific_pattern() -> None:
    patterns = {"generic": "stats/{dataset}/{name}.tsv", "tables": "stats/{dataset}/tables.tsv"}
    assert stage_costs.identify_benchmark("stats/miracl/tables.tsv", patterns) == ("tables", {"dataset": "miracl"})
    assert stage_costs.identify_benchmark("stats/miracl/x.tsv", patterns) == (
        "generic",
        {"dataset": "miracl", "name": "x"},
    )
    assert stage_costs.identify_benchmark("stats/miracl/a/x.tsv", patterns) is None
    assert stage_costs.plain_pattern("s/{part,sw|yo}/{x,[0-9]{2}}/{m}.tsv") == "s/{part}/{x}/{m}.tsv"
    assert stage_costs.pattern_regex("a/{x}/{x}.tsv").match("a/1/1.tsv") and not stage_costs.pattern_regex(
        "a/{x}/{x}.tsv"
    ).match("a/1/2.tsv")


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


@pytest.mark.workflow
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
    assert report.SENSITIVITY_LABEL[1:] in sens  # the label is real text of the chart
    assert report.SENSITIVITY_LABEL[1:] in results["results/miracl_sensitivity.svg"]["caption"]
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


@pytest.mark.workflow
def test_significance_table_has_every_pair_language_and_mean(sample_report: Path) -> None:
    path = sample_report / "results/miracl_significance.tsv"
    assert tsv_header(path) == list(significance.COLUMNS)
    rows = tsv_dicts(path)
    expected = [(m, a, b, p) for m in ("nDCG@10", "R@100") for a, b in PAIRS for p in (*LANGS, "mean")]
    assert [(r["measure"], r["method_a"], r["method_b"], r["partition"]) for r in rows] == expected
    ndcg = {r[0]: dict(zip(["sw", "yo", "mean"], r[1:], strict=True)) for r in report.read_tsv(
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


@pytest.mark.workflow
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


@pytest.mark.workflow
def test_published_side_by_side_matches_the_shipped_bm25_numbers(sample_report: Path) -> None:
    # the sample's tables, as if its two languages were the full data: the matching on configuration
    tables = {m: sample_report / f"results/miracl_{k}.tsv" for m, k in (("nDCG@10", "ndcg"), ("R@100", "recall100"))}
    from miracl_eval.config import validate

    rows = report.published_rows(tables, "miracl", "dev", validate(report_config()), set(LANGS))
    shipped = {
        (r["measure"], r["partition"]): r
        for r in csv.DictReader(
            [
                ln
                for ln in published.data_dir()
                .joinpath("pyserini_miracl_bm25.tsv")
                .read_text(encoding="utf-8")
                .splitlines()
                if not ln.startswith("#")
            ],
            delimiter="\t",
        )
    }
    # the tiny model is not BAAI/bge-m3 and the BGE-M3 paper's BM25 rows need another tokenizer or
    # all 18 languages: only pyserini's per-language BM25 numbers match this configuration
    assert {(r["method"], r["source_id"]) for r in rows} == {("bm25", "pyserini-1.6.0-2cr")}
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
    assert report.published_rows(tables, "miracl", "dev", validate(report_config()), {"sw"}) == [
        r for r in rows if r["partition"] == "sw"
    ]


@pytest.mark.workflow
def test_sensitivity_at_the_fixed_weight_is_the_headline_number(sample_report: Path) -> None:
    rows = tsv_dicts(sample_report / "results/miracl_sensitivity.tsv")
    ndcg = published.read_results_table(sample_report / "results/miracl_ndcg.tsv")
    fused = ("bge-m3/dense+sparse", "bge-m3/all")
    assert {(r["partition"], r["method"]) for r in rows} == {(p, m) for p in LANGS for m in fused}
    assert len(rows) == 2 * 2 * 11
    for r in rows:
        if r["sparse_weight"] == "0.3":
            assert round(float(r["ndcg10"]), 4) == ndcg[r["method"]][r["partition"]]


@pytest.mark.workflow
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
    assert jobs["evaluate"] == 12 and jobs["tables"] == 1 and jobs["encode_corpus_dense_sparse"] == 6
    assert jobs["tiny_model"] == 1 and jobs["report_significance"] == 1 and "report_stage_costs" not in jobs
    for r in costs.values():
        assert float(r["total_s"]) >= float(r["max_s"]) > 0 and float(r["max_rss_mb"]) > 0
    # the encoding jobs ran preloaded (the sample's setting): their memory is the forked process's
    # (torch and a model: hundreds of MB), not their relay's (tens of MB, in their benchmark files)
    relay = stage_costs.read_benchmark(sample_report / "stats/miracl/encode_queries_dense_sparse/bge-m3/sw.tsv")[0][
        "max_rss"
    ]
    assert float(costs["encode_queries_dense_sparse"]["max_rss_mb"]) > 150 > relay


@pytest.mark.workflow
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


@pytest.mark.workflow
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


@pytest.mark.workflow
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
