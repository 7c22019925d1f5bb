"""Comparability in real runs: a sample run shows no published number and says why."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from miracl_eval.evaluation import comparability, published
from miracl_eval.report.plan import plain_report_problem
from miracl_eval.tsv import read_tsv
from tests.helpers import (
    BM25_LANGS,
    PYSERINI_2CR,
    REPO,
    SAMPLE,
    SHARED,
    planned_jobs,
    sample_config,
    snakemake,
    write_config,
)

# =========================================================================== a BM25-only sample run


LANG = "ar"


@pytest.fixture(scope="module")
def bm25_run(sample_run: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The shared BM25 sample run, and the published table built in it."""
    return sample_run, snakemake(sample_run, sample_run / "config.yaml", "results/miracl_published.tsv")


def test_sample_run_shows_no_published_number_and_says_why(
    bm25_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    work, proc = bm25_run
    n = sum(
        1
        for line in (SAMPLE / "miracl" / LANG / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    )
    header, rows = read_tsv(work / "results" / "miracl_published.tsv")
    assert tuple(header) == published.SIDE_BY_SIDE_COLUMNS and rows == []
    checks = comparability.read_comparability(work / "results" / "miracl_comparability.tsv")
    assert [(c["partition"], c["comparable"], c["version"]) for c in checks] == [
        (lang, "no", "v1.0") for lang in BM25_LANGS
    ]
    (ar,) = [c for c in checks if c["partition"] == LANG]
    assert f"{n} of 2,061,414 passages" in ar["reason"]
    page = (work / "results" / "miracl_published.html").read_text(encoding="utf-8")
    assert "none of this run's partitions has the full data" in page and f"{n} of 2,061,414 passages" in page
    # the end of the run says it too
    assert f"  {LANG}: {ar['reason']}" in proc.stdout + proc.stderr


def test_plain_report_problem_only_for_report_without_report_after_run() -> None:
    missing = ["results/miracl_ndcg.html", "results/miracl_ndcg.svg"]
    line = plain_report_problem(["snakemake", "--report", "r.html"], missing)
    assert line is not None and line.startswith("snakemake --report: 2 of the report's files do not exist yet")
    assert "results/miracl_ndcg.html" in line and "\n" not in line
    assert plain_report_problem(["snakemake", "--report=r.html"], missing) == line
    assert plain_report_problem(["snakemake", "--report", "r.html", "--report-after-run"], missing) is None
    assert plain_report_problem(["snakemake", "--report", "r.html"], []) is None
    assert plain_report_problem(["snakemake", "--report-stylesheet", "s.css", "-n"], missing) is None


def test_plain_report_after_a_partial_run_says_what_to_run(
    bm25_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    work, _ = bm25_run
    proc = snakemake(work, work / "config.yaml", args=("--report", str(work / "report.html")), check=False)
    assert proc.returncode != 0 and not (work / "report.html").exists()
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("snakemake --report")]
    assert len(lines) == 1 and "`make report`" in lines[0] and "--report-after-run" in lines[0], proc.stderr[-2000:]


def test_make_report_plans_the_demo_report(tmp_path: Path) -> None:
    """`make report`'s command, dry: from a working directory with the sample, it plans every report view."""
    printed = subprocess.run(
        ["make", "-s", "-n", "-C", str(REPO), "report"], capture_output=True, text=True, check=True
    ).stdout
    command = next(shlex.split(ln) for ln in printed.splitlines() if "snakemake" in ln and "--report" in ln)
    assert command[0].endswith(".venv/bin/snakemake")
    assert command[command.index("--configfile") + 1] == "sample/miracl.yaml"
    assert command[-3:] == ["--report", "report.html", "--report-after-run"]
    shutil.copytree(SAMPLE, tmp_path / "sample")
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), *command[1:], "-n"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    jobs = planned_jobs(proc)
    assert jobs.get("tables") == 1 and jobs.get("comparability") == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    for rule in ("report_published", "report_settings", "report_significance", "report_sensitivity"):
        assert jobs.get(rule) == 1, rule
    assert jobs["report_results"] == 2


# =========================================================================== a comparable run: verdicts

YO_PASSAGES = 49_043  # MIRACL v1.0's Yoruba corpus (the reference sizes)


@pytest.mark.skipif(not (SHARED / "data" / "miracl-v1.0-dev").is_dir(), reason="../shared is absent")
def test_a_comparable_run_gets_a_verdict_per_published_number(tmp_path: Path) -> None:
    """The real Yoruba dev topics and qrels (../shared) with a synthetic corpus of the published passage
    count: the run is comparable, so BM25 is set beside pyserini's 2CR numbers with a verdict each, in
    results/miracl_reproduction.tsv and at the end of the run; a tolerance given for that source decides."""
    dev = SHARED / "data" / "miracl-v1.0-dev"
    qrels = (dev / "qrels" / "qrels.miracl-v1.0-yo-dev.tsv").read_text(encoding="utf-8").split("\n")
    judged = sorted({line.split()[2] for line in qrels if line.strip()})
    topics = {q: t for q, t in (line.split("\t") for line in (dev / "topics" / "topics.miracl-v1.0-yo-dev.tsv")
                                .read_text(encoding="utf-8").splitlines() if line.strip())}  # fmt: skip
    lines = [json.dumps({"docid": d, "title": "", "text": f"passage {d}"}) for d in judged]
    lines += [json.dumps({"docid": f"synthetic-{i}", "title": "", "text": f"filler text number {i}"})
              for i in range(YO_PASSAGES - len(judged))]  # fmt: skip
    (tmp_path / "corpus.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = sample_config(["yo"], threads=1, methods=["bm25"])
    cfg["source"] = {
        "corpus": str(tmp_path / "corpus.jsonl"),
        "topics": str(dev / "topics" / "topics.miracl-v1.0-yo-dev.tsv"),
        "qrels": str(dev / "qrels" / "qrels.miracl-v1.0-yo-dev.tsv"),
    }
    proc = snakemake(tmp_path, write_config(tmp_path, cfg), "results/miracl_ndcg.tsv")
    (check,) = comparability.read_comparability(tmp_path / "results" / "miracl_comparability.tsv")
    assert check["comparable"] == "yes", check
    assert len(topics) == 119
    _, rows = read_tsv(tmp_path / "results" / "miracl_reproduction.tsv")
    cells = {(r[0], r[1], r[2], r[3]): r for r in rows}
    assert set(cells) == {("bm25", PYSERINI_2CR, "yo", m) for m in ("nDCG@10", "R@100")}
    for (_, _, _, _measure), r in cells.items():
        published_value, ours, diff, tol, verdict = float(r[4]), float(r[5]), float(r[6]), float(r[7]), r[8]
        assert tol == 0.0005  # 2CR's OKish
        assert diff == pytest.approx(ours - published_value, abs=1e-12)
        # 2CR's levels: equal at the published 4 decimals, within 5e-4, or not
        assert verdict == ("OK" if round(ours, 4) == published_value else "OKish" if abs(diff) <= tol else "FAIL")
    ndcg = cells[("bm25", PYSERINI_2CR, "yo", "nDCG@10")]
    counts = ", ".join(f"{int(ndcg[8] == v)} {v}" for v in ("OK", "OKish", "FAIL"))
    assert f"bm25: {counts} of 1 language against {PYSERINI_2CR} (nDCG@10" in proc.stdout + proc.stderr
    # a tolerance for that source (below the 0.1 the schema allows) decides the verdict: the tables are rewritten only
    wide = 0.09
    cfg["reproduction"] = {"sources": {PYSERINI_2CR: {"nDCG@10": wide}}}
    again = snakemake(tmp_path, write_config(tmp_path, cfg), "results/miracl_ndcg.tsv")
    assert planned_jobs(again) == {"tables": 1}
    _, rows = read_tsv(tmp_path / "results" / "miracl_reproduction.tsv")
    row = {r[3]: r for r in rows}["nDCG@10"]
    assert float(row[7]) == wide and float(row[6]) == float(ndcg[6])
    published_value, ours, diff = float(row[4]), float(row[5]), float(row[6])
    assert row[8] == ("OK" if round(ours, 4) == published_value else "OKish" if abs(diff) <= wide else "FAIL")
    # the run over the full data as MTEB results: loadable by mteb, equal to the tables
    mteb_results = pytest.importorskip("mteb.results")
    snakemake(tmp_path, write_config(tmp_path, cfg), "results/mteb/miracl")
    # BM25 through Lucene is no hub model: written, but not for submission (the README says why)
    result = tmp_path / "results/mteb/miracl/not_submittable/bm25/no_revision_available/MIRACLRetrieval.json"
    assert "`bm25`" in (tmp_path / "results/mteb/miracl/README.md").read_text()
    loaded = mteb_results.TaskResult.from_disk(result)
    (scores,) = loaded.scores["dev"]
    table = published.read_results_table(tmp_path / "results" / "miracl_ndcg.tsv")["bm25"]["yo"]
    recall = published.read_results_table(tmp_path / "results" / "miracl_recall100.tsv")["bm25"]["yo"]
    assert (scores["hf_subset"], scores["languages"]) == ("yo", ["yor-Latn"])
    assert loaded.get_score() == pytest.approx(table, abs=5e-5) and scores["recall_at_100"] == pytest.approx(
        recall, abs=5e-5
    )
    meta = json.loads(result.with_name("model_meta.json").read_text())
    assert meta["miracl_eval"]["method"] == "bm25" and meta["miracl_eval"]["settings"]["k1"] == 0.9


def test_the_sample_as_miracl_hn_says_what_of_mtebs_corpora_it_holds(tmp_path: Path) -> None:
    """MTEB's hard-negatives corpora as the dataset, from local files: passages joined and stripped as MTEB
    joins them, the comparability lines name its sizes (MTEB's statistics), and no MTEB result is written for
    a sample."""
    mteb_loader = pytest.importorskip("mteb._create_dataloaders")
    cfg = sample_config(["sw", "yo"], dataset="miracl-hn", methods=["bm25"], hybrids={}, rerankers={}, models={})
    source = {}
    for lang in ("sw", "yo"):  # whitespace around some passages (Mr. TyDi's Swahili passages end with a space)
        passages = [json.loads(line) for line in (SAMPLE / "miracl" / lang / "corpus.jsonl").read_text().splitlines()]
        source[lang] = passages
        for i, p in enumerate(passages):
            p["text"] = p["text"] + " " if i % 2 else "\n" + p["text"]
        (tmp_path / "src" / lang).mkdir(parents=True)
        (tmp_path / "src" / lang / "corpus.jsonl").write_text("".join(json.dumps(p) + "\n" for p in passages))
    cfg["source"]["corpus"] = str(tmp_path / "src/{lang}/corpus.jsonl")
    proc = snakemake(tmp_path, write_config(tmp_path, cfg), "results/miracl-hn_ndcg.tsv")
    rows = pq.read_table(tmp_path / "resources/miracl-hn/corpus/sw/corpus.parquet").to_pylist()
    assert [r["contents"] for r in rows] == [mteb_loader._corpus_to_dict(dict(r, id=r["docid"]))["text"] for r in rows]
    assert [r["contents"] for r in rows] == [f"{r['title']} {r['text']}" for r in rows]  # a model's own join too
    assert rows[1]["text"] == source["sw"][1]["text"].rstrip() != source["sw"][1]["text"]
    rows = {
        r["partition"]: r for r in comparability.read_comparability(tmp_path / "results/miracl-hn_comparability.tsv")
    }
    # MTEB's statistics give relevant judgements and judged passages, not qrels lines
    assert rows["sw"]["reason"] == (
        "160 of 131,924 passages; 12 of 482 queries; 14 of 910 relevant judgements; 63 of 3,514 judged passages"
    )
    assert rows["yo"]["reason"] == (
        "161 of 49,043 passages; 13 of 119 queries; 14 of 144 relevant judgements; 68 of 942 judged passages"
    )
    assert (rows["sw"]["judgements"], rows["sw"]["full_judgements"], rows["sw"]["full_relevant"]) == ("69", "-", "910")
    assert "sw: 160 of 131,924 passages" in proc.stdout + proc.stderr
    snakemake(tmp_path, write_config(tmp_path, cfg), "results/mteb/miracl-hn")
    assert "no MTEB result" in (tmp_path / "results/mteb/miracl-hn/README.md").read_text()
