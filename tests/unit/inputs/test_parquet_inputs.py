"""Parquet inputs as MTEB and the hub write them (a corpus with ``docid``, ``id`` or ``_id``; MTEB's queries and
qrels files), and what each broken one gets: the passages as given, or one error naming the file, the record and
the column."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from miracl_eval.errors import InputError
from miracl_eval.inputs.loading import iter_corpus, iter_qrels, iter_topics
from miracl_eval.inputs.preprocess import build_corpus, build_topics


def write(path: Path, columns: dict[str, object]) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


def passages(path: Path) -> list[tuple[str, str, str]]:
    return [(p.docid, p.title, p.text) for _, p in iter_corpus(path)]


@pytest.mark.parametrize(
    ("columns", "want"),
    [
        ({"id": ["a", "b"], "_id": ["a", "b"], "title": ["T", "U"], "text": ["x", "y"]}, [("a", "T", "x"), ("b", "U", "y")]),
        ({"_id": ["a", "b"], "text": ["x", "y"]}, [("a", "", "x"), ("b", "", "y")]),  # no title column: no titles
        ({"_id": ["a"], "title": pa.array([None], pa.string()), "text": ["x"]}, [("a", "", "x")]),
        ({"_id": [7, 8], "title": ["T", "U"], "text": ["x", "y"]}, [("7", "T", "x"), ("8", "U", "y")]),
        ({"docid": [7], "_id": ["7"], "text": ["x"]}, [("7", "", "x")]),  # 7 and '7': one id
        ({"_id": ["a"], "text": ["x"], "emb": [[0.1, 0.2]], "meta": [{"k": 1}]}, [("a", "", "x")]),  # ignored
        ({"_id": pa.array(["a"], pa.large_string()), "text": pa.array(["x"]).dictionary_encode()}, [("a", "", "x")]),
    ],
    ids=["id-and-_id-agree", "no-title", "null-title", "integer-ids", "docid-and-_id-agree", "extra-columns", "types"],
)  # fmt: skip
def test_corpora_read_as_given(tmp_path: Path, columns: dict, want: list) -> None:
    """Agreeing id columns, no title column, a null title, integer ids, extra and nested columns."""
    assert passages(write(tmp_path / "c.parquet", columns)) == want


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"id": ["a", "b"], "_id": ["a", "c"], "text": ["x", "y"]}, r"record 2: its id columns disagree \('id' 'b', '_id' 'c'\)"),
        ({"docid": ["a"], "id": ["z"], "text": ["x"]}, r"record 1: its id columns disagree \('docid' 'a', 'id' 'z'\)"),
        ({"_id": ["a", None], "text": ["x", "y"]}, r"record 2: '_id' is null"),
        ({"_id": ["a", "b"], "text": ["x", None]}, r"record 2 \(docid b\) has no 'text'"),
        ({"_id": [1.0, 2.0], "text": ["x", "y"]}, r"corpus column '_id' holds float values, not string or integer"),
        ({"_id": [True], "text": ["x"]}, r"corpus column '_id' holds bool values"),
        ({"_id": ["a"], "text": [["x"]]}, r"corpus column 'text' holds list<.*> values, not string"),
        ({"_id": ["a"], "text": [{"t": "x"}]}, r"corpus column 'text' holds struct<.*> values, not string"),
        ({"_id": ["a"], "title": [1], "text": ["x"]}, r"corpus column 'title' holds integer values, not string"),
        ({"_id": ["a"], "text": pa.array([b"x"], pa.binary())}, r"corpus column 'text' holds binary values"),
        ({"_id": ["a b"], "text": ["x"]}, r"record 1 docid 'a b' contains U\+0020"),
        ({"key": ["a"], "text": ["x"]}, r"Parquet corpus has no 'docid' column \(nor MTEB's 'id' or '_id'\)"),
        ({"_id": ["a"], "Text": ["x"]}, r"Parquet corpus has no 'text' column"),
    ],
    ids=["id-and-_id-disagree", "docid-and-id-disagree", "null-id", "null-text", "float-ids", "bool-ids", "list-text",
         "struct-text", "integer-title", "binary-text", "space-in-id", "no-id-column", "no-text-column"],
)  # fmt: skip
def test_broken_corpora_name_the_file_and_the_record_or_column(tmp_path: Path, columns: dict, message: str) -> None:
    path = write(tmp_path / "c.parquet", columns)
    with pytest.raises(InputError, match=rf"c\.parquet: {message}"):
        passages(path)
    with pytest.raises(InputError, match=rf"c\.parquet: {message}"):  # the corpus job writes nothing
        build_corpus([path], tmp_path / "corpus.parquet", "{title} {text}")
    assert not (tmp_path / "corpus.parquet").exists()


@pytest.mark.parametrize("content", [b"", b'{"docid": "a", "text": "x"}\n', b"PAR1 cut short"])
def test_a_file_that_is_not_parquet_names_it(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "c.parquet").write_bytes(content)
    with pytest.raises(InputError, match=r"c\.parquet: cannot read Parquet file"):
        passages(tmp_path / "c.parquet")


def test_repeated_ids_name_the_records(tmp_path: Path) -> None:
    path = write(tmp_path / "c.parquet", {"_id": ["a", "b", "a"], "text": ["x", "y", "z"]})
    with pytest.raises(
        InputError, match=r"c\.parquet: record 3: duplicate docid a with another passage \(first seen at record 1\)"
    ):
        build_corpus([path], tmp_path / "corpus.parquet", "{title} {text}")
    assert not (tmp_path / "corpus.parquet").exists()


# ------------------------------------------------------------------------ MTEB's queries and qrels files


def queries(tmp_path: Path, **columns: object) -> Path:
    return write(tmp_path / "queries.parquet", {"_id": ["q1", "q2"], "text": ["one?", "two?"], **columns})


def qrels(tmp_path: Path, **columns: object) -> Path:
    given = {"query-id": ["q1", "q2"], "corpus-id": ["a", "b"], "score": pa.array([1, 0], pa.int64()), **columns}
    return write(tmp_path / "qrels.parquet", given)


def test_mteb_files_read_as_topics_and_qrels(tmp_path: Path) -> None:
    """Local MTEB files (``source.topics``, ``source.qrels`` ending in ``.parquet``) read as the TSV files do; ids
    given as integers, a score as a whole float or a numeral, extra columns, and ``id`` beside ``_id``."""
    q = queries(tmp_path, _id=[1, 2], id=["1", "2"], instruction=["i", "j"])
    assert [(qid, text) for _, qid, text in iter_topics(q)] == [("1", "one?"), ("2", "two?")]
    for score in (pa.array([1.0, 0.0]), pa.array(["1", "0"]), pa.array([1, 0], pa.int8())):
        j = qrels(tmp_path, **{"query-id": [1, 2], "score": score})
        assert [(a, b, r) for _, a, b, r in iter_qrels(j)] == [("1", "a", 1), ("2", "b", 0)]
    stats = build_topics(q, qrels(tmp_path, **{"query-id": ["1", "2"]}), tmp_path / "q.out", tmp_path / "j.out")
    assert (stats.judgements, stats.queries) == (2, 2)


@pytest.mark.parametrize(
    ("kind", "columns", "message"),
    [
        ("queries", {"text": ["one?", None]}, r"record 2: query q2 is null"),
        ("queries", {"text": ["one?", "  "]}, r"record 2: query q2 is empty"),
        ("queries", {"_id": ["q1", None]}, r"record 2: '_id' is null"),
        ("queries", {"_id": ["q1", "q1"]}, r"record 2: query id q1 repeats record 1"),
        ("queries", {"id": ["q1", "x"]}, r"record 2: its id columns disagree \('_id' 'q2', 'id' 'x'\)"),
        ("queries", {"text": [1, 2]}, r"queries column 'text' holds integer values, not string"),
        ("queries", {"_id": [["q1"], ["q2"]]}, r"queries column '_id' holds list<.*> values, not string or integer"),
        ("queries", {"_id": [1.5, 2.5]}, r"queries column '_id' holds float values"),
        ("qrels", {"score": [1.0, 0.5]}, r"record 2: score 0\.5 of \(q2, b\) is not an integer"),
        ("qrels", {"score": ["1", "high"]}, r"record 2: score 'high' of \(q2, b\) is not an integer"),
        ("qrels", {"score": pa.array([1, None], pa.int64())}, r"record 2: score None of \(q2, b\) is not an integer"),
        ("qrels", {"score": [True, False]}, r"qrels column 'score' holds bool values, not integer or float or string"),
        ("qrels", {"score": [[1], [0]]}, r"qrels column 'score' holds list<.*> values"),
        ("qrels", {"corpus-id": ["a", None]}, r"record 2: 'corpus-id' is null"),
        ("qrels", {"query-id": ["q1", "q1"], "corpus-id": ["a", "a"]}, r"record 2: \(q1, a\) is judged twice \(first in record 1\)"),
        ("qrels", {"corpus-id": [1.0, 2.0]}, r"qrels column 'corpus-id' holds float values"),
    ],
    ids=["null-text", "empty-text", "null-id", "repeated-id", "id-columns-disagree", "integer-text", "list-ids",
         "float-ids", "fractional-score", "word-score", "null-score", "bool-score", "list-score", "null-docid",
         "judged-twice", "float-docids"],
)  # fmt: skip
def test_broken_mteb_files_name_the_file_and_the_record_or_column(
    tmp_path: Path, kind: str, columns: dict, message: str
) -> None:
    path = queries(tmp_path, **columns) if kind == "queries" else qrels(tmp_path, **columns)
    with pytest.raises(InputError, match=rf"{kind}\.parquet: {message}"):
        list(iter_topics(path) if kind == "queries" else iter_qrels(path))


@pytest.mark.parametrize(
    ("kind", "columns", "message"),
    [
        ("queries", {"qid": ["q1"], "query": ["one?"]}, r"MTEB queries need columns _id \(or id\) and text, not qid, query"),
        ("qrels", {"query-id": ["q1"], "corpus-id": ["a"]}, r"MTEB qrels need columns query-id, corpus-id, score, not query-id, corpus-id"),
    ],
)  # fmt: skip
def test_mteb_files_without_their_columns_name_them(tmp_path: Path, kind: str, columns: dict, message: str) -> None:
    path = write(tmp_path / f"{kind}.parquet", columns)
    with pytest.raises(InputError, match=rf"{kind}\.parquet: {message}"):
        list(iter_topics(path) if kind == "queries" else iter_qrels(path))
