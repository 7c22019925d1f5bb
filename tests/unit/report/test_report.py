"""The report: its library (tables, charts, settings, stage costs) and Snakemake's HTML report of
a sample run, opened in headless Chromium."""

from __future__ import annotations

import csv
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from miracl_eval import schemas
from miracl_eval.evaluation import significance
from miracl_eval.report import plan as report_plan
from miracl_eval.report import stage_costs
from miracl_eval.report.html import html_table
from miracl_eval.report.results import results_views_stage
from miracl_eval.report.sensitivity import sensitivity_weights
from miracl_eval.report.settings import format_setting, settings_rows, with_commits
from miracl_eval.report.significance import significance_stage
from miracl_eval.report.top_differences import TOP_DIFFERENCES_COLUMNS, top_differences_stage

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
        "published.tsv", "published.html", "comparability.tsv", "context.tsv", "significance.tsv", "significance.html",
        "top_differences.tsv", "top_differences.html", "sensitivity.tsv", "sensitivity.svg",
        "settings.tsv", "settings.html", "forecast.tsv", "forecast.html", "stage_costs.tsv", "stage_costs.html",
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
    # a reranked row against bm25 and against its first stage when that is a row (not a fused row's pair)
    reranked = ["bm25", "m/all", "m/dense>>ce", "m/all>>ce", "m/all>>ce>>llm", "bm25>>ce"]
    assert report_plan.comparison_pairs(reranked) == [
        ("m/all", "bm25"), ("m/dense>>ce", "bm25"), ("m/all>>ce", "bm25"), ("m/all>>ce>>llm", "bm25"),
        ("bm25>>ce", "bm25"), ("m/all>>ce", "m/all"), ("m/all>>ce>>llm", "m/all>>ce"),
    ]  # fmt: skip
    assert report_plan.swept_rows(reranked) == ["m/all"]


def test_report_inputs_and_settings_follow_the_configured_rows() -> None:
    files = [f"results/miracl_{p}.{e}" for p, e in report_plan.report_pages(["ndcg", "recall100"], METHODS)]
    assert files == [
        f for f in REPORT_FILES if "stage_costs" not in f and not f.endswith(("ndcg.tsv", "recall100.tsv"))
    ]
    bm25 = [f"{p}.{e}" for p, e in report_plan.report_pages(["ndcg"], ["bm25"])]
    assert bm25 == ["ndcg.html", "ndcg.svg", "published.tsv", "published.html", "comparability.tsv", "context.tsv",
                    "settings.tsv", "settings.html", "forecast.tsv", "forecast.html"]  # fmt: skip
    from miracl_eval.config.validate import validate

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
    # the settings page lists the rerankers, what each reranks, and the models of first stages that are not rows
    cfg = validate({"languages": ["sw"], "models": {"me5-small": {}}, "rerankers": {"bge-reranker-v2-gemma": {}},
                    "methods": ["bm25", "me5-small/dense>>bge-reranker-v2-gemma"]})  # fmt: skip
    settings = report_plan.run_settings(cfg, "miracl", True)
    assert list(settings) == ["data", "retrieval", "bm25", "model me5-small", "encoder", "dense index",
                              "reranker bge-reranker-v2-gemma"]  # fmt: skip
    gemma = settings["reranker bge-reranker-v2-gemma"]
    assert gemma["reranks"] == ["me5-small/dense"] and "'Yes'" in str(gemma["score"])
    assert gemma["rerankers.bge-reranker-v2-gemma.depth"] == 100
    assert gemma["rerankers.bge-reranker-v2-gemma.checkpoint"] == "BAAI/bge-reranker-v2-gemma"


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
    from miracl_eval.evaluation.metrics import format_table

    path.write_text(format_table(values, list(values), parts, mean), encoding="utf-8")


def test_results_views_html_marks_the_best_and_chart_has_every_method(tmp_path: Path) -> None:
    values = {"bm25": {"sw": 0.4, "yo": 0.6}, "dense": {"sw": 0.7, "yo": 0.5}, "all": {"sw": 0.2, "yo": 0.1}}
    table = tmp_path / "t.tsv"
    write_results(table, values, ["sw", "yo"])
    page, chart = tmp_path / "t.html", tmp_path / "t.svg"
    results_views_stage(table, "R@100", "miracl", "dev", page, chart)
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
    results_views_stage(table, "R@100", "miracl", "dev", page, again)
    assert again.read_bytes() == chart.read_bytes()


def test_html_escapes_text() -> None:
    out = html_table(["q"], [["<script>alert(1)</script> & co"]])
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
    significance_stage(files, methods, parts, pairs, ["nDCG@10", "R@100"], out, page, **kw)
    rows = tsv_dicts(out)
    assert tsv_header(out) == list(significance.COLUMNS)
    assert len(rows) == len(pairs) * (len(parts) + 1) * 2
    assert [r["partition"] for r in rows[:4]] == ["sw", "yo", "zh", "mean"]
    assert {(r["method_a"], r["method_b"]) for r in rows} == set(pairs)
    same = [r for r in rows if r["measure"] == "R@100"]  # identical values: no difference, p = 1
    assert all(float(r["diff"]) == 0 and float(r["p_value"]) == 1 for r in same)
    html_text = page.read_text(encoding="utf-8")
    assert "nDCG@10: difference A − B" in html_text and "Recall@100: difference A − B" in html_text
    significance_stage(files, methods, parts, pairs, ["nDCG@10"], out, page, mean_row=False, **kw)
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
    top_differences_stage([a, b], ["a", "b"], ["sw"], [queries], [("a", "b")], out, page, n=5)
    rows = tsv_dicts(out)
    assert tsv_header(out) == list(TOP_DIFFERENCES_COLUMNS)
    assert [(r["direction"], r["rank"], r["qid"], r["query"]) for r in rows] == [
        ("win", "1", "q1", "one"),
        ("win", "2", "q3", "three"),
        ("loss", "1", "q2", "two"),
    ]
    assert float(rows[0]["diff"]) == pytest.approx(0.8)
    assert "three" in page.read_text(encoding="utf-8")


def test_sensitivity_weights_keep_the_fixed_weight_on_the_grid() -> None:
    assert sensitivity_weights(0.3) == [i / 10 for i in range(11)]
    assert sensitivity_weights(0.25)[3] == 0.25 and len(sensitivity_weights(0.25)) == 12


def test_settings_rows_count_passages_and_shards(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"docid": [f"d{i}" for i in range(25)]}), corpus)
    rows = settings_rows(
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
    assert settings_rows({}, {"sw": corpus})[0]["value"] == "25 passages"
    assert format_setting({"dense": 1.0, "sparse": 0.3}) == "dense=1; sparse=0.3"


def test_the_settings_page_shows_the_commit_of_each_fetched_checkpoint(tmp_path: Path) -> None:
    from miracl_eval.config.validate import validate

    cfg = validate({"languages": ["sw"], "models": {"bge-m3": {"revision": "v1.0"}}, "methods": ["bge-m3/dense"]})
    settings = report_plan.run_settings(cfg, "miracl", True)
    assert settings["model bge-m3"]["models.bge-m3.revision"] == "v1.0"  # as asked for
    fetched = tmp_path / "BAAI--bge-m3@v1.0"
    fetched.mkdir()
    (fetched / "miracl-eval-fetch.json").write_text('{"revision": "v1.0", "commit": "' + "c" * 40 + '"}')
    shown = with_commits(settings, {"models.bge-m3.commit": fetched, "rerankers.r.commit": tmp_path / "by-hand"})
    assert shown["model bge-m3"]["models.bge-m3.commit"] == "c" * 40  # what it was computed with
    assert shown["reranker r"]["rerankers.r.commit"].startswith("unknown (")
    assert shown["data"] == settings["data"]


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
    job_log.write_text(
        "x INFO miracl_eval.jobs.preload: preloaded process: peak RSS 912 MB, CPU 3.0 s\n", encoding="utf-8"
    )
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


def test_a_peak_rss_no_job_could_have_is_not_measured(tmp_path: Path) -> None:
    """Snakemake's sample of a sub-second job can catch only the process that starts it (0.02 MB)."""
    header = "s\th:m:s\tmax_rss\tmax_vms\n"
    (tmp_path / "short.tsv").write_text(header + "0.25\t0:00:00\t0.02\t1.62\n")
    (tmp_path / "real.tsv").write_text(header + "3.1\t0:00:03\t412.5\t900\n2.9\t0:00:02\tNA\t1\n")
    assert stage_costs.read_benchmark(tmp_path / "short.tsv") == [{"s": 0.25, "max_rss": None}]
    assert stage_costs.read_benchmark(tmp_path / "real.tsv") == [
        {"s": 3.1, "max_rss": 412.5},
        {"s": 2.9, "max_rss": None},
    ]
