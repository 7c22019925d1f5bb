"""Judged passages that are not in the corpus: listed per partition and counted in the log."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

from miracl_eval import schemas
from miracl_eval.inputs.judged import COLUMNS, judged_not_in_corpus, judged_notice, judged_stage
from miracl_eval.tsv import read_tsv


def _write(tmp_path: Path, docids: list[str], qrels: list[tuple[str, str, int]]) -> tuple[Path, Path]:
    corpus = tmp_path / "corpus.parquet"
    schemas.write_table(
        pa.table({"docid": docids, "title": [""] * len(docids), "text": docids, "contents": docids}),
        corpus,
        schemas.CORPUS,
    )
    path = tmp_path / "qrels.parquet"
    q, d, r = zip(*qrels, strict=True)
    schemas.write_table(pa.table({"qid": q, "docid": d, "relevance": r}), path, schemas.QRELS)
    return path, corpus


def test_missing_judged_passages_are_listed_and_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    qrels = [
        ("1", "a", 1), ("1", "gone1", 1),  # one relevant passage left
        ("2", "gone2", 2), ("2", "b", 0),  # its only relevant passage is missing: scores 0
        ("3", "gone3", 0), ("3", "c", 1),
    ]  # fmt: skip
    qrels_path, corpus = _write(tmp_path, ["a", "b", "c", "unjudged"], qrels)
    out = tmp_path / "judged_not_in_corpus.tsv"
    stats = judged_stage(qrels_path, corpus, out)
    assert stats == {"judged": 6, "missing": 3, "relevant_missing": 2, "queries_without_relevant": 1}
    header, rows = read_tsv(out)
    assert tuple(header) == COLUMNS
    assert rows == [["1", "gone1", "1"], ["2", "gone2", "2"], ["3", "gone3", "0"]]
    assert (
        f"3 of 6 judged passages (2 of them relevant) are not in the corpus {corpus}, e.g. 1/gone1, 2/gone2, 3/gone3; "
        f"1 queries have no relevant passage left in it" in caplog.text
    )


def test_complete_corpus_gives_an_empty_list(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    qrels_path, corpus = _write(tmp_path, [f"d{i}" for i in range(10)], [("1", "d3", 1), ("2", "d9", 0)])
    assert judged_not_in_corpus(qrels_path, corpus, batch_rows=3).num_rows == 0, "found in different batches"
    out = tmp_path / "judged_not_in_corpus.tsv"
    assert judged_stage(qrels_path, corpus, out)["missing"] == 0
    assert read_tsv(out) == (list(COLUMNS), [])
    assert not caplog.records


def test_the_end_of_run_notice_names_each_partition_with_missing_passages(tmp_path: Path) -> None:
    qrels = [("1", "a", 1), ("1", "gone1", 1), ("2", "gone2", 2), ("3", "gone3", 0)]
    sw = tmp_path / "sw"
    sw.mkdir()
    qrels_path, corpus = _write(sw, ["a"], qrels)
    judged_stage(qrels_path, corpus, sw / "judged.tsv")
    yo = tmp_path / "yo"
    yo.mkdir()
    yo_qrels, yo_corpus = _write(yo, ["a"], [("9", "a", 1)])
    judged_stage(yo_qrels, yo_corpus, yo / "judged.tsv")
    listings = {
        "sw": (sw / "judged.tsv", [qrels_path, corpus]),
        "yo": (yo / "judged.tsv", [yo_qrels, yo_corpus]),
        "zh": (tmp_path / "absent.tsv", []),
    }
    assert judged_notice(listings) == [
        f"sw: 3 judged passage(s) not in the corpus, no method can retrieve them (2 queries lose a relevant "
        f"passage: 1, 2); listed in {sw / 'judged.tsv'}"
    ]
    os.utime(qrels_path, (time.time() + 60, time.time() + 60))  # data newer than the listing: says nothing
    assert judged_notice(listings) == []
