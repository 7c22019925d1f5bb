"""Preprocessing to Parquet: title appending, duplicates, empty corpora, atomic outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from miracl_eval import schemas
from miracl_eval.errors import InputError
from miracl_eval.inputs.preprocess import (
    build_corpus,
    build_corpus_from,
    build_qrels,
    build_queries,
    build_topics,
    join_title,
)
from tests.helpers import SAMPLE, rank_hits


def _corpus(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def test_title_join_templates() -> None:
    assert join_title("Albedo", "Albedo is ...", "{title} {text}") == "Albedo Albedo is ..."
    assert join_title("Mate", "El mate es ...", "{title}. {text}") == "Mate. El mate es ..."
    assert join_title("", "sin título", "{title}. {text}") == "sin título"


#: passages with whitespace around title or text, an empty title, a title of spaces
EDGES = [
    {"docid": "1#0", "title": "Nairobi", "text": "Nairobi ni mji mkuu. "},
    {"docid": "1#1", "title": " Nairobi", "text": "\tMji.\n"},
    {"docid": "2#0", "title": "", "text": "  bila kichwa  "},
    {"docid": "3#0", "title": "   ", "text": " nafasi tu "},
    {"docid": "4#0", "title": "Mombasa ", "text": "Mombasa ni mji."},
]


def test_stripped_passages_are_mtebs_text(tmp_path: Path) -> None:
    """``strip`` (MTEB's datasets): contents equal MTEB's own passage text (``_corpus_to_dict``), and so does
    a model's or reranker's own ``"{title} {text}"`` join of the stored title and text; without it,
    whitespace is kept as MIRACL's tools keep it."""
    mteb_loader = pytest.importorskip("mteb._create_dataloaders")
    out = tmp_path / "corpus.parquet"
    edges = [*EDGES, {"docid": "5#0", "title": " Lamu ", "text": "  "}]  # no text left: only the contents hold
    build_corpus([_corpus(tmp_path / "c.jsonl", edges)], out, "{title} {text}", strip=True)
    rows = pq.read_table(out).to_pylist()
    theirs = [mteb_loader._corpus_to_dict({"id": e["docid"], "title": e["title"], "text": e["text"]})["text"]
              for e in edges]  # fmt: skip
    assert [r["contents"] for r in rows] == theirs
    joined = [join_title(r["title"], r["text"], "{title} {text}") for r in rows]
    assert joined[:-1] == theirs[:-1] and joined[-1] == "Lamu  " != theirs[-1] == "Lamu"
    assert [(r["title"], r["text"]) for r in rows][:3] == [("Nairobi", "Nairobi ni mji mkuu."),
                                                           ("Nairobi", "\tMji."), ("", "bila kichwa")]  # fmt: skip
    build_corpus([tmp_path / "c.jsonl"], out, "{title} {text}")
    kept = [r["contents"] for r in pq.read_table(out).to_pylist()]
    assert kept[0] == "Nairobi Nairobi ni mji mkuu. " and kept[2] == "  bila kichwa  "
    assert sum(a != b for a, b in zip(kept, theirs, strict=True)) == 5  # Mombasa's inner spaces stay in both


def test_corpus_parquet_columns_and_contents(tmp_path: Path) -> None:
    out = tmp_path / "corpus.parquet"
    stats = build_corpus_from(SAMPLE / "miracl" / "sw" / "corpus.jsonl", out, "{title} {text}")
    table = pq.read_table(out)
    assert table.schema.equals(schemas.CORPUS)
    assert table.num_rows == stats.passages >= 20
    row = table.slice(0, 1).to_pylist()[0]
    assert row["contents"] == f"{row['title']} {row['text']}"


def test_corpus_streams_in_batches(tmp_path: Path) -> None:
    src = _corpus(tmp_path / "c.jsonl", [{"docid": f"{i}#0", "title": "t", "text": str(i)} for i in range(25)])
    out = tmp_path / "corpus.parquet"
    build_corpus([src], out, "{title} {text}", batch_rows=7)
    assert pq.ParquetFile(out).metadata.num_row_groups == 4
    assert pq.read_table(out).column("docid").to_pylist() == [f"{i}#0" for i in range(25)]


def test_duplicate_docid_names_both_lines_and_leaves_nothing(tmp_path: Path) -> None:
    recs = [{"docid": "1#0", "text": "a"}, {"docid": "2#0", "text": "b"}, {"docid": "1#0", "text": "c"}]
    src = _corpus(tmp_path / "c.jsonl", recs)
    out = tmp_path / "out" / "corpus.parquet"
    with pytest.raises(InputError) as err:
        build_corpus([src], out, "{title} {text}")
    assert err.value.line == 3 and "duplicate docid 1#0" in str(err.value) and "line 1" in str(err.value)
    assert not out.exists() and list(out.parent.iterdir()) == []


def test_duplicate_across_shards(tmp_path: Path) -> None:
    a = _corpus(tmp_path / "a.jsonl", [{"docid": "1#0", "text": "a"}])
    b = _corpus(tmp_path / "b.jsonl", [{"docid": "2#0", "text": "b"}, {"docid": "1#0", "text": "c"}])
    with pytest.raises(InputError) as err:
        build_corpus([a, b], tmp_path / "corpus.parquet", "{title} {text}")
    assert err.value.path == str(b) and err.value.line == 2 and str(a) in str(err.value)


def test_identical_repeats_are_kept_once_and_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A passage repeated with the same title and text (pyserini's tracker reports repeated ids in
    MIRACL Korean) is kept once, where it first occurs, whatever the setting; the log counts it."""
    a = _corpus(tmp_path / "a.jsonl", [{"docid": "1#0", "title": "T", "text": "a"}, {"docid": "2#0", "text": "b"}])
    b = _corpus(
        tmp_path / "b.jsonl",
        [{"docid": "3#0", "text": "c"}, {"text": "a", "title": "T", "docid": "1#0"}, {"docid": "2#0", "text": "b"}],
    )
    out = tmp_path / "corpus.parquet"
    with caplog.at_level("WARNING"):
        stats = build_corpus([a, b], out, "{title} {text}", batch_rows=2)
    table = pq.read_table(out)
    assert table.column("docid").to_pylist() == ["1#0", "2#0", "3#0"]
    assert table.column("contents").to_pylist() == ["T a", "b", "c"]
    assert (stats.passages, stats.repeats) == (3, 2)
    assert "kept once: 2 identical repeated passage(s), e.g. 1#0 (" in caplog.text and f"{b}, line 2" in caplog.text


def test_repeats_with_another_passage_error_or_keep_the_first(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    recs = [
        {"docid": "1#0", "text": "a"},
        {"docid": "1#0", "text": "a"},  # identical: kept once either way
        {"docid": "2#0", "text": "b"},
        {"docid": "1#0", "text": "changed"},
    ]
    src = _corpus(tmp_path / "c.jsonl", recs)
    out = tmp_path / "out" / "corpus.parquet"
    with pytest.raises(InputError, match=r"line 4: duplicate docid 1#0 with another passage \(first seen at line 1\)"):
        build_corpus([src], out, "{title} {text}")
    assert not out.exists() and list(out.parent.iterdir()) == []
    with pytest.raises(ValueError, match="duplicates must be one of error, first"):
        build_corpus([src], out, "{title} {text}", duplicates="last")
    with caplog.at_level("WARNING"):
        stats = build_corpus_from(src, out, "{title} {text}", duplicates="first")
    assert pq.read_table(out).to_pydict()["text"] == ["a", "b"] and stats.repeats == 2
    assert "corpus.duplicates: first: 1 repeated docid(s) with another passage left out, e.g. 1#0" in caplog.text


def test_empty_corpus(tmp_path: Path) -> None:
    src = tmp_path / "empty.jsonl"
    src.write_text("\n", encoding="utf-8")
    out = tmp_path / "corpus.parquet"
    with pytest.raises(InputError, match="empty"):
        build_corpus([src], out, "{title} {text}")
    assert not out.exists()


def test_bad_line_leaves_no_output(tmp_path: Path) -> None:
    src = tmp_path / "c.jsonl"
    src.write_text('{"docid": "1", "text": "a"}\n{oops\n', encoding="utf-8")
    out = tmp_path / "corpus.parquet"
    with pytest.raises(InputError):
        build_corpus([src], out, "{title} {text}")
    assert not any(tmp_path.glob("*corpus.parquet*"))


def test_qrels_of_unknown_queries_are_counted_not_fatal(tmp_path: Path) -> None:
    topics = tmp_path / "t.tsv"
    topics.write_text("1\tuno\n10020#0\tdos\n", encoding="utf-8")
    qrels = tmp_path / "q.tsv"
    qrels.write_text("1 Q0 a 1\n10020#0 Q0 10020#0 0\n99 Q0 b 1\n99 Q0 c 0\n", encoding="utf-8")
    build_queries(topics, tmp_path / "queries.parquet")
    stats = build_qrels(qrels, tmp_path / "queries.parquet", tmp_path / "qrels.parquet")
    assert (stats.unknown_queries, stats.unknown_judgements, stats.judgements) == (1, 2, 2)
    table = pq.read_table(tmp_path / "qrels.parquet").to_pylist()
    assert {"qid": "10020#0", "docid": "10020#0", "relevance": 0} in table


def test_byte_order_marks_change_neither_qids_nor_scores(tmp_path: Path) -> None:
    """A BOM used to turn qid 12 into '\\ufeff12', which the run's 12 did not match: nDCG@10 fell from 1 to 0.5."""
    from miracl_eval.evaluation.metrics import evaluate_run, load_qrels, mean_by_measure
    from miracl_eval.runs import write_run

    (tmp_path / "t.tsv").write_text("\ufeff12\tuno\n13\tdos\n", encoding="utf-8")
    (tmp_path / "q.tsv").write_text("\ufeff12 Q0 a 1\n12 Q0 b 0\n13 Q0 b 1\n", encoding="utf-8")
    stats = build_topics(
        tmp_path / "t.tsv", tmp_path / "q.tsv", tmp_path / "queries.parquet", tmp_path / "qrels.parquet"
    )
    assert (stats.queries, stats.judgements, stats.unknown_queries) == (2, 3, 0)
    assert pq.read_table(tmp_path / "queries.parquet").column("qid").to_pylist() == ["12", "13"]
    run = rank_hits({"12": [("a", 2.0), ("b", 1.0)], "13": [("b", 1.0)]})  # both perfect
    write_run(run, tmp_path / "run.parquet", tmp_path / "run.trec", "bm25")
    per_query = evaluate_run(tmp_path / "run.parquet", load_qrels(tmp_path / "qrels.parquet"))
    assert sorted(set(per_query.column("qid").to_pylist())) == ["12", "13"]
    assert mean_by_measure(per_query) == {"nDCG@10": 1.0, "R@100": 1.0}


def test_empty_passage_is_kept(tmp_path: Path) -> None:
    src = _corpus(tmp_path / "c.jsonl", [{"docid": "1#0", "title": "", "text": ""}, {"docid": "2#0", "text": "b"}])
    stats = build_corpus([src], tmp_path / "corpus.parquet", "{title} {text}")
    assert stats.passages == 2
    assert pq.read_table(tmp_path / "corpus.parquet").column("contents").to_pylist() == ["", "b"]
