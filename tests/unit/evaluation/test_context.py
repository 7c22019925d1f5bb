"""The published numbers of the same task beside a run's rows: every one of them, as context (with the revision
it was computed at and whether the run reads that data), never mixed with the verdicts."""

from __future__ import annotations

import csv
from pathlib import Path

from miracl_eval.config.validate import validate
from miracl_eval.evaluation import context, published
from miracl_eval.inputs.datasets import MIRACL_HN_MTEB1_REVISION, MIRACL_HN_REVISION, MIRACL_LANGUAGES
from miracl_eval.report.results import context_html
from tests.helpers import REPO

PUBLISHED = REPO / "miracl_eval" / "data" / "published"


def _shipped(dataset: str, measure: str) -> list[dict[str, str]]:
    """The shipped published numbers of a dataset and measure, read with csv (the oracle)."""
    out = []
    for path in sorted(PUBLISHED.glob("*.tsv")):
        if path.name in ("notes.tsv", "revisions.tsv"):
            continue
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln and not ln.startswith("#")]
        out += [r for r in csv.DictReader(lines, delimiter="\t") if r["dataset"] == dataset and r["measure"] == measure]
    return out


def _checks(partitions: list[str], reason: str | None = None) -> list[dict[str, str]]:
    return [{"partition": p, "comparable": "no" if reason else "yes", "reason": reason or "the full corpus, topics "
             "and qrels"} for p in partitions]  # fmt: skip


def test_every_published_number_has_the_revision_it_was_computed_at() -> None:
    revisions = {context.dataset_revision(r) for r in published.load_published()}
    assert MIRACL_HN_MTEB1_REVISION in revisions and MIRACL_HN_REVISION in revisions
    assert any(r.startswith("MIRACL v1.0") for r in revisions) and any(r.startswith("MessIRve v1.0") for r in revisions)


def test_a_new_models_row_stands_beside_every_published_number_of_the_task() -> None:
    cfg = validate({"languages": list(MIRACL_LANGUAGES), "methods": ["bm25", "my-e5/dense"],
                    "models": {"my-e5": {"family": "dense", "checkpoint": "/models/my-e5", "pooling": "mean",
                                         "normalize": True}}})  # fmt: skip
    cfg = {**cfg, "pyserini.release": "2.4.0"}
    ours = {"nDCG@10": {row: {**dict.fromkeys(MIRACL_LANGUAGES, 0.5), "mean": 0.5} for row in ("bm25", "my-e5/dense")}}
    rows = context.context_rows(ours, "miracl", "dev", list(MIRACL_LANGUAGES), cfg, _checks(list(MIRACL_LANGUAGES)))
    expected = _shipped("miracl", "nDCG@10")
    assert len(rows) == len(expected) > 300
    assert {(r["source_id"], r["system"], r["partition"]) for r in rows} == {
        (r["source_id"], r["system"], r["partition"]) for r in expected
    }
    assert {r["our_data"] for r in rows} == {context.SAME_DATA}
    # our own model gets no verdict; BM25 gets pyserini 2.4.0's (its release) and Table 11's mean, nothing else
    verdicts = {(r["source_id"], r["verdict_rows"]) for r in rows if r["verdict_rows"] != "-"}
    assert verdicts == {("pyserini-2.4.0-2cr", "bm25"), ("bge-m3-table11", "bm25")}
    assert sum(r["verdict_rows"] == "bm25" for r in rows) == 19  # 18 languages and the mean
    page = context_html([{k: str(v) for k, v in r.items()} for r in rows], [*MIRACL_LANGUAGES, "mean"], "nDCG@10",
                        "miracl")  # fmt: skip
    assert "context, not a verdict" in page and "M3-Embedding" in page and "MIRACL v1.0" in page


def test_a_sample_sees_the_published_numbers_with_the_reason_its_data_is_not_theirs() -> None:
    cfg = validate({"languages": ["sw"], "methods": ["bm25"]})
    ours = {"R@100": {"bm25": {"sw": 0.7, "mean": 0.7}}}
    rows = context.context_rows(ours, "miracl", "dev", ["sw"], cfg, _checks(["sw"], "160 of 131,924 passages"))
    assert rows and {r["partition"] for r in rows} == {"sw"}  # no mean over 18 languages beside one
    assert {r["our_data"] for r in rows} == {"sw: 160 of 131,924 passages"}
    assert {r["verdict_rows"] for r in rows} == {"-"}  # nothing is a verdict on other data


def test_mtebs_rows_of_either_revision_meet_a_default_run_and_name_the_revision_to_pin_otherwise() -> None:
    def run(**hub: str) -> list[dict[str, object]]:
        cfg = validate({"dataset": "miracl-hn", "languages": ["ru"], "models": {"bge-m3": {}}, "hub": hub,
                        "methods": ["bge-m3/dense"]})  # fmt: skip
        ours = {"nDCG@10": {"bge-m3/dense": {"ru": 0.7, "mean": 0.7}}}
        return context.context_rows(ours, "miracl-hn", "dev", ["ru"], cfg, _checks(["ru"]))

    default = run()
    assert {r["dataset_revision"] for r in default} == {MIRACL_HN_REVISION, MIRACL_HN_MTEB1_REVISION}
    assert {r["our_data"] for r in default} == {context.SAME_DATA}
    bge = [r for r in default if r["model"] == "BAAI/bge-m3"]
    assert len(bge) == 2 and {r["verdict_rows"] for r in bge} == {"bge-m3/dense"}  # the task and its .v2
    other = run(revision="main")
    assert {r["our_data"] for r in other} == {
        f"computed at dataset revision {rev}, this run reads main: set hub.revision: {MIRACL_HN_REVISION} to meet it"
        for rev in (MIRACL_HN_REVISION, MIRACL_HN_MTEB1_REVISION)
    }
    assert {r["verdict_rows"] for r in other} == {"-"}


def test_the_stage_writes_the_table_and_the_notice_names_it(tmp_path: Path) -> None:
    table = tmp_path / "miracl_ndcg.tsv"
    table.write_text("method\tsw\tmean\nbm25\t0.5\t0.5\n", encoding="utf-8")
    checks = tmp_path / "comparability.tsv"
    from miracl_eval.evaluation.comparability import COLUMNS
    from miracl_eval.tsv import format_tsv

    checks.write_text(format_tsv(COLUMNS, [{**dict.fromkeys(COLUMNS, "-"), "partition": "sw", "comparable": "yes",
                                            "reason": "the full corpus, topics and qrels"}]))  # fmt: skip
    out = tmp_path / "miracl_context.tsv"
    cfg = validate({"languages": ["sw"], "methods": ["bm25"]})
    done = context.context_stage({"nDCG@10": table}, "miracl", "dev", ["sw"], cfg, checks, out)
    rows = context.read_context(out)
    assert done["published"] == len(rows) == len([r for r in _shipped("miracl", "nDCG@10") if r["partition"] == "sw"])
    (line,) = context.context_notice(out, [table], "miracl")
    assert f"{len(rows)} published numbers of this task" in line and "not verdicts" in line
