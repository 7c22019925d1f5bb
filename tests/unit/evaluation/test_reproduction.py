"""Reproduction verdicts: tolerances per measure and source, OK / OKish / FAIL at the boundaries (pyserini
2CR's levels), the summary lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from miracl_eval.config.validate import validate
from miracl_eval.errors import ConfigError
from miracl_eval.evaluation import reproduction
from miracl_eval.evaluation.published import SideBySideRow


def cell(
    partition: str, ours: float, printed: str, measure: str = "nDCG@10", source: str = "src", scale: int = 1
) -> SideBySideRow:
    theirs = float(printed) / scale
    return {
        "dataset": "miracl", "split": "dev", "measure": measure, "method": "bm25", "partition": partition,
        "source_id": source, "system": "x", "model": "-", "ours": ours, "theirs": theirs, "diff": ours - theirs,
        "published": printed, "scale": scale,
    }  # fmt: skip


def test_tolerances_per_source_then_measure_then_default() -> None:
    settings = {"tolerance": {"nDCG@10": 0.01}, "sources": {"strict": {"nDCG@10": 0.001}}}
    assert reproduction.tolerance("nDCG@10", "strict", settings) == 0.001
    assert reproduction.tolerance("nDCG@10", "other", settings) == 0.01
    assert reproduction.tolerance("R@100", "strict", settings) == 0.0005  # the default of R@100 (2CR's)
    assert reproduction.tolerance("nDCG@10", "any") == 0.0005  # 2CR's OKish
    with pytest.raises(KeyError, match="MRR"):
        reproduction.tolerance("MRR", "any")


def test_verdicts_at_the_boundary_and_the_summary(tmp_path: Path) -> None:
    cells = [
        cell("sw", 0.44806, "0.4481"),  # rounds to the published 4 decimals (as trec_eval prints it): OK
        cell("fi", 0.44816, "0.4481"),  # rounds to 0.4482, 0.6e-4 off: OKish
        cell("yo", 0.4015, "0.4010"),  # exactly 5e-4 off (as decimals): OKish
        cell("ar", 0.4700, "0.4809"),  # 1.09 points below: FAIL
        cell("mean", 0.5494, "54.9", scale=100),  # rounds to 54.9 at the paper's 0.1 point: OK
        cell("sw", 0.80, "0.78", measure="R@100"),  # 0.02 above: FAIL
    ]
    rows = reproduction.verdicts(cells)
    assert [r["verdict"] for r in rows] == ["OK", "OKish", "OKish", "FAIL", "OK", "FAIL"]
    assert rows[3]["difference"] == pytest.approx(-0.0109) and rows[3]["tolerance"] == 0.0005
    assert reproduction.summary(rows) == [
        "bm25: 1 OK, 2 OKish, 1 FAIL of 4 languages; the mean OK against src (nDCG@10; OKish within 0.05 points); "
        "not OK: fi +0.01 (OKish), yo +0.05 (OKish), ar -1.09 (FAIL)",
        "bm25: 0 OK, 0 OKish, 1 FAIL of 1 language against src (R@100; OKish within 0.05 points); not OK: sw +2.00 (FAIL)",
    ]
    # a source printed to one decimal of a point, with half a point of tolerance: what was OK stays OK
    half = reproduction.verdicts([cell("mean", 0.552, "54.9", scale=100)], {"sources": {"src": {"nDCG@10": 0.005}}})
    assert [r["verdict"] for r in half] == ["OKish"]
    out = tmp_path / "r.tsv"
    reproduction.write_reproduction(rows, out)
    back = reproduction.read_reproduction(out)
    assert list(back[0]) == list(reproduction.COLUMNS) and back[3]["verdict"] == "FAIL"
    assert float(back[3]["difference"]) == rows[3]["difference"]  # exact round trip
    assert reproduction.run_notice(out, [], "miracl")[1:] == ["  " + line for line in reproduction.summary(rows)]
    newer = tmp_path / "table.tsv"
    newer.write_text("x")
    import os

    os.utime(newer, (out.stat().st_mtime + 10, out.stat().st_mtime + 10))
    assert reproduction.run_notice(out, [newer], "miracl") == []  # a stale table says nothing


def test_a_tolerance_of_zero_leaves_ok_or_fail() -> None:
    """``reproduction.tolerance: 0`` (a number: both measures): no cell is OKish; what rounds to the published
    value is still OK."""
    settings = validate({"languages": ["sw"], "reproduction": {"tolerance": "0"}})["reproduction"]
    assert settings["tolerance"] == {"nDCG@10": 0.0, "R@100": 0.0}
    rows = reproduction.verdicts([cell("sw", 0.44806, "0.4481"), cell("fi", 0.44816, "0.4481")], settings)
    assert [r["verdict"] for r in rows] == ["OK", "FAIL"]
    assert "OKish within 0 points" in reproduction.summary(rows)[0]


@pytest.mark.parametrize(
    ("settings", "key", "message"),
    [
        ({"tolerance": -0.001}, "reproduction.tolerance", "less than the minimum of 0"),
        ({"tolerance": {"nDCG@10": "-0.001"}}, "reproduction.tolerance.nDCG@10", "less than the minimum of 0"),
        ({"tolerance": "half a point"}, "reproduction.tolerance", "is not of type 'object', 'number'"),
        ({"tolerance": {"nDCG@10": "nan"}}, "reproduction.tolerance.nDCG@10", "nan is not a finite number"),
        ({"tolerance": float("inf")}, "reproduction.tolerance", "inf is not a finite number"),
        ({"tolerance": {"nDCG@10": 0.5}}, "reproduction.tolerance.nDCG@10", "0.5 is 50 points: a tolerance is on"),
        ({"tolerance": {"MRR@10": 0.001}}, "reproduction.tolerance.MRR@10", "not one of the names allowed here: nDCG"),
        ({"sources": {"pyserini-1.6.0-2cr": {"ndcg@10": 0.001}}}, "reproduction.sources.pyserini-1.6.0-2cr.ndcg@10",
         "not one of the names"),
        ({"sources": {"pyserini-1.6.0-2cr": 2}}, "reproduction.sources.pyserini-1.6.0-2cr", "2 is 200 points"),
    ],
)  # fmt: skip
def test_bad_tolerances_name_their_key(settings: dict, key: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate({"languages": ["sw"], "reproduction": settings})
    assert err.value.key == key and message in err.value.reason


def test_a_source_id_that_no_published_source_has_is_an_error() -> None:
    settings = validate({"languages": ["sw"], "reproduction": {"sources": {"pyserini-1.6.0-2cr": 0.005}}})
    assert settings["reproduction"]["sources"] == {"pyserini-1.6.0-2cr": {"nDCG@10": 0.005, "R@100": 0.005}}
    reproduction.check_settings(settings["reproduction"])  # a shipped source's id
    with pytest.raises(ConfigError) as err:
        reproduction.check_settings({"sources": {"pyserini-2cr": {"nDCG@10": 0.005}}})
    assert err.value.key == "reproduction.sources.pyserini-2cr"
    assert "no published source has this id" in err.value.reason and "pyserini-1.6.0-2cr" in err.value.reason
