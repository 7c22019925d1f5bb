"""Run files: Parquet and 6-column TREC agree; hits whose docid equals the qid are kept."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from miracl_eval.lucene.anserini import anserini_jar
from miracl_eval.lucene.jvm import java_executable
from miracl_eval.runs import read_run, write_run
from tests.helpers import rank_hits, read_trec


def test_rank_hits_orders_by_score_then_docid_and_keeps_qid_docid() -> None:
    table = rank_hits({"10020#0": [("b", 1.0), ("10020#0", 2.0), ("a", 1.0)]})
    assert table.column("docid").to_pylist() == ["10020#0", "a", "b"]
    assert table.column("rank").to_pylist() == [1, 2, 3]


def test_trec_file_round_trips_exact_scores(tmp_path: Path) -> None:
    hits = {"7": [("1#0", 12.345678901234567), ("7", 0.1 + 0.2)], "8": [("x", -1.5)]}
    table = rank_hits(hits)
    write_run(table, tmp_path / "r.parquet", tmp_path / "r.trec", "bm25")
    lines = (tmp_path / "r.trec").read_text().splitlines()
    assert lines[0] == "7 Q0 1#0 1 12.345678901234567 bm25"
    assert all(len(line.split()) == 6 for line in lines)
    assert read_trec(tmp_path / "r.trec").equals(read_run(tmp_path / "r.parquet"))
    assert pq.read_table(tmp_path / "r.parquet").num_rows == 3


def test_run_tag_must_be_a_word(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        write_run(rank_hits({"1": [("a", 1.0)]}), tmp_path / "r.parquet", tmp_path / "r.trec", "two words")
    assert not (tmp_path / "r.trec").exists() and not (tmp_path / "r.parquet").exists()


def test_trec_eval_reads_our_run(tmp_path: Path) -> None:
    """Anserini's trec_eval (a Java port of NIST trec_eval) accepts the file as is."""
    write_run(rank_hits({"q1": [("d1", 2.0), ("q1", 1.0)]}), tmp_path / "r.parquet", tmp_path / "r.trec", "t")
    (tmp_path / "qrels").write_text("q1 0 q1 1\n")
    out = subprocess.run(
        [java_executable(), "-cp", anserini_jar(), "trec_eval", "-m", "recall.100", str(tmp_path / "qrels"), str(tmp_path / "r.trec")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "recall_100" in out.stdout and "1.0000" in out.stdout


@pytest.mark.parametrize(
    ("qid", "docid", "bad"), [("1455#1", "8870 2", "docid '8870 2'"), ("1 2", "d", "query id '1 2'")]
)
def test_an_id_with_whitespace_never_reaches_a_trec_file(tmp_path: Path, qid: str, docid: str, bad: str) -> None:
    """``1455#1 Q0 8870 2 3 1.03 bm25`` has 7 columns: trec_eval and ranx misread it."""
    with pytest.raises(ValueError) as err:
        write_run(rank_hits({qid: [(docid, 1.03)]}), tmp_path / "r.parquet", tmp_path / "r.trec", "bm25")
    assert str(err.value) == (
        f"{bad} contains U+0020 (SPACE): ids must not contain whitespace or invisible characters"
        " (a TREC line cannot hold it)"
    )
    assert list(tmp_path.iterdir()) == []
