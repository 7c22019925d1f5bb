"""Reproduction verdicts: tolerances per measure and source, OK / FAIL at the boundary, the summary lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from miracl_eval.evaluation import reproduction
from miracl_eval.evaluation.published import SideBySideRow


def cell(partition: str, ours: float, theirs: float, measure: str = "nDCG@10", source: str = "src") -> SideBySideRow:
    return {
        "dataset": "miracl", "split": "dev", "measure": measure, "method": "bm25", "partition": partition,
        "source_id": source, "system": "x", "model": "-", "ours": ours, "theirs": theirs, "diff": ours - theirs,
        "published": str(theirs), "scale": 1,
    }  # fmt: skip


def test_tolerances_per_source_then_measure_then_default() -> None:
    settings = {"tolerance": {"nDCG@10": 0.01}, "sources": {"strict": {"nDCG@10": 0.001}}}
    assert reproduction.tolerance("nDCG@10", "strict", settings) == 0.001
    assert reproduction.tolerance("nDCG@10", "other", settings) == 0.01
    assert reproduction.tolerance("R@100", "strict", settings) == 0.01  # the default of R@100
    assert reproduction.tolerance("nDCG@10", "any") == 0.005
    with pytest.raises(KeyError, match="MRR"):
        reproduction.tolerance("MRR", "any")


def test_verdicts_at_the_boundary_and_the_summary(tmp_path: Path) -> None:
    cells = [
        cell("sw", 0.4481, 0.4476),  # 0.0005 off: OK
        cell("yo", 0.4060, 0.4010),  # exactly 0.005 off (as decimals): OK
        cell("ar", 0.4700, 0.4809),  # 1.09 points below: FAIL
        cell("mean", 0.44, 0.44),
        cell("sw", 0.80, 0.78, measure="R@100"),  # 0.02 above: FAIL at 0.01
    ]
    rows = reproduction.verdicts(cells)
    assert [r["verdict"] for r in rows] == ["OK", "OK", "FAIL", "OK", "FAIL"]
    assert rows[2]["difference"] == pytest.approx(-0.0109) and rows[2]["tolerance"] == 0.005
    assert reproduction.summary(rows) == [
        "bm25: 2 of 3 languages and the mean within 0.5 points of src (nDCG@10); off: ar -1.09",
        "bm25: 0 of 1 language within 1 point of src (R@100); off: sw +2.00",
    ]
    out = tmp_path / "r.tsv"
    reproduction.write_reproduction(rows, out)
    back = reproduction.read_reproduction(out)
    assert list(back[0]) == list(reproduction.COLUMNS) and back[2]["verdict"] == "FAIL"
    assert float(back[2]["difference"]) == rows[2]["difference"]  # exact round trip
    assert reproduction.run_notice(out, [], "miracl")[1:] == ["  " + line for line in reproduction.summary(rows)]
    newer = tmp_path / "table.tsv"
    newer.write_text("x")
    import os

    os.utime(newer, (out.stat().st_mtime + 10, out.stat().st_mtime + 10))
    assert reproduction.run_notice(out, [newer], "miracl") == []  # a stale table says nothing
