"""Loaders: the bundled sample, the real MIRACL dev files, and malformed inputs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from miracl_eval.errors import InputError
from miracl_eval.inputs.datasets import MIRACL
from miracl_eval.inputs.loading import iter_corpus, iter_qrels, iter_topics
from tests.helpers import SAMPLE

# Dev topics per language, as published with MIRACL v1.0 (shared/README.md).
DEV_COUNTS = {
    "ar": 2896, "bn": 411, "en": 799, "es": 648, "fa": 632, "fi": 1271, "fr": 343, "hi": 350, "id": 960,
    "ja": 860, "ko": 213, "ru": 1252, "sw": 482, "te": 828, "th": 733, "zh": 393, "de": 305, "yo": 119,
}  # fmt: skip


@pytest.mark.parametrize("lang", MIRACL.partitions)
def test_sample_language_is_complete(lang: str) -> None:
    passages = [p for _, p in iter_corpus(SAMPLE / "miracl" / lang / "corpus.jsonl")]
    topics = {qid: q for _, qid, q in iter_topics(SAMPLE / "miracl" / lang / "topics.tsv")}
    qrels = list(iter_qrels(SAMPLE / "miracl" / lang / "qrels.tsv"))
    docids = {p.docid for p in passages}
    assert len(passages) >= 150 and len(docids) == len(passages), "enough passages for Recall@100 below 1"
    assert all(p.title for p in passages)
    articles = {d.split("#")[0] for d in docids}
    assert len(articles) < len(passages), "several passages per article"
    assert len(topics) >= 8
    assert {r for *_, r in qrels} == {0, 1}, "relevant and non-relevant judgements"
    for qid in topics:
        judged = [r for _, q, _, r in qrels if q == qid]
        assert 1 in judged and judged.count(0) >= 3, (qid, "several non-relevant judgements per query")
    assert any(qid in docids for qid in topics), "one qid equals a docid"
    assert {q for _, q, _, _ in qrels} == set(topics)


def test_real_miracl_dev_counts(miracl_dev: Path) -> None:
    total = 0
    for lang, expected in DEV_COUNTS.items():
        topics = list(iter_topics(miracl_dev / "topics" / f"topics.miracl-v1.0-{lang}-dev.tsv"))
        qrels = list(iter_qrels(miracl_dev / "qrels" / f"qrels.miracl-v1.0-{lang}-dev.tsv"))
        assert len(topics) == expected, lang
        assert {q for _, q, _, _ in qrels} == {q for _, q, _ in topics}, lang
        total += len(topics)
    assert total == 13495
    yo = {(q, d): r for _, q, d, r in iter_qrels(miracl_dev / "qrels" / "qrels.miracl-v1.0-yo-dev.tsv")}
    assert yo[("10020#0", "10020#0")] == 0, "a qid equal to a judged docid is kept as a string"


def _write(path: Path, text: str, gz: bool = False) -> Path:
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def test_gzipped_and_plain_corpus_read_the_same(tmp_path: Path) -> None:
    lines = [json.dumps({"docid": "1#0", "title": "T", "text": "uno"}), json.dumps({"docid": 7, "text": "dos"})]
    text = "\n".join(lines) + "\n\n"
    plain = [p for _, p in iter_corpus(_write(tmp_path / "c.jsonl", text))]
    gzd = [p for _, p in iter_corpus(_write(tmp_path / "c.jsonl.gz", text, gz=True))]
    assert plain == gzd
    assert plain[1].docid == "7" and plain[1].title == ""


@pytest.mark.parametrize(
    ("content", "line", "words"),
    [
        ('{"docid": "1#0", "text": "a"}\n{"docid": "1#1", "text": \n', 2, "malformed JSON"),
        ('{"docid": "1#0", "text": "a"}\n{"title": "x", "text": "b"}\n', 2, "no 'docid'"),
        ('{"docid": "1#0", "title": "x"}\n', 1, "no 'text'"),
        ('["1#0", "a"]\n', 1, "not a JSON object"),
        ('{"docid": null, "text": "a"}\n', 1, "non-empty string"),
    ],
)
def test_bad_corpus_lines(tmp_path: Path, content: str, line: int, words: str) -> None:
    path = _write(tmp_path / "corpus.jsonl", content)
    with pytest.raises(InputError) as err:
        list(iter_corpus(path))
    assert err.value.line == line
    assert str(path) in str(err.value) and f"line {line}" in str(err.value) and words in str(err.value)


def test_truncated_gzip_names_the_file(tmp_path: Path) -> None:
    data = gzip.compress(("\n".join(json.dumps({"docid": str(i), "text": "x" * 50}) for i in range(200))).encode())
    path = tmp_path / "c.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=str(path)):
        list(iter_corpus(path))


@pytest.mark.parametrize(
    ("content", "line", "words"),
    [
        ("1\tfirst\n2\t   \n", 2, "query 2 is empty"),
        ("1\tfirst\nno tab here\n", 2, "qid<TAB>query"),
        ("1\tfirst\n1\tagain\n", 2, "repeats line 1"),
    ],
)
def test_bad_topics(tmp_path: Path, content: str, line: int, words: str) -> None:
    path = _write(tmp_path / "topics.tsv", content)
    with pytest.raises(InputError) as err:
        list(iter_topics(path))
    assert err.value.line == line and words in str(err.value) and str(path) in str(err.value)


@pytest.mark.parametrize(
    ("content", "line", "words"),
    [
        ("1 Q0 a 1\n1 Q0 b\n", 2, "expected 4 fields"),
        ("1 Q0 a 1\n1 Q0 b yes\n", 2, "'yes' is not an integer"),
        ("1 Q0 a 1\n1 Q0 a 0\n", 2, "judged twice"),
    ],
)
def test_bad_qrels(tmp_path: Path, content: str, line: int, words: str) -> None:
    path = _write(tmp_path / "qrels.tsv", content)
    with pytest.raises(InputError) as err:
        list(iter_qrels(path))
    assert err.value.line == line and words in str(err.value)


def test_ids_stay_strings(tmp_path: Path) -> None:
    topics = _write(tmp_path / "t.tsv", "007\tq\n10020#0\tr\n")
    assert [q for _, q, _ in iter_topics(topics)] == ["007", "10020#0"]
    qrels = _write(tmp_path / "q.tsv", "007\tQ0\t007\t1\n")
    assert list(iter_qrels(qrels)) == [(1, "007", "007", 1)]


BOM = "\ufeff"


def test_byte_order_mark_is_dropped_from_every_file(tmp_path: Path) -> None:
    topics = _write(tmp_path / "t.tsv", f"{BOM}12\tuno\n13\tdos\n")
    qrels = _write(tmp_path / "q.tsv", f"{BOM}12 Q0 a 1\n13 Q0 b 1\n")
    corpus = _write(tmp_path / "c.jsonl", BOM + json.dumps({"docid": "a", "text": "x"}) + "\n", gz=True)
    assert [q for _, q, _ in iter_topics(topics)] == ["12", "13"]
    assert [(q, d) for _, q, d, _ in iter_qrels(qrels)] == [("12", "a"), ("13", "b")]
    assert [p.docid for _, p in iter_corpus(corpus)] == ["a"]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("t.tsv", "1\tq\n1455 1\tq\n", "line 2: query id '1455 1' contains U+0020 (SPACE)"),
        ("t.tsv", "1\u200b\tq\n", "line 1: query id '1\\u200b' contains U+200B (ZERO WIDTH SPACE)"),
        ("q.tsv", "1 Q0 a 1\n1 Q0 \ufeffb 1\n", "line 2: docid '\\ufeffb' contains U+FEFF (ZERO WIDTH NO-BREAK SPACE)"),
        ("c.jsonl", '{"docid": "8870 2", "text": "x"}\n', "line 1: docid '8870 2' contains U+0020 (SPACE)"),
        (
            "c.jsonl",
            '{"docid": "a\\u00a0b", "text": "x"}\n',
            "line 1: docid 'a\\xa0b' contains U+00A0 (NO-BREAK SPACE)",
        ),
    ],
)
def test_ids_that_a_trec_file_cannot_hold(tmp_path: Path, name: str, content: str, message: str) -> None:
    path = _write(tmp_path / name, content)
    loader = {"t.tsv": iter_topics, "q.tsv": iter_qrels, "c.jsonl": iter_corpus}[name]
    with pytest.raises(InputError) as err:
        list(loader(path))
    assert str(err.value) == f"{path}, {message}: ids must not contain whitespace or invisible characters"


def test_unpaired_surrogate_escape_names_file_line_and_field(tmp_path: Path) -> None:
    good = json.dumps({"docid": "1", "text": "emoji \U0001f600"})  # a surrogate pair: valid
    path = _write(tmp_path / "c.jsonl", good + '\n{"docid": "2", "title": "t", "text": "a\\ud800b"}\n')
    with pytest.raises(InputError) as err:
        list(iter_corpus(path))
    assert str(err.value) == f"{path}, line 2: (docid 2) 'text' holds an unpaired surrogate escape \\ud800"
    assert [p.text for _, p in iter_corpus(_write(tmp_path / "ok.jsonl", good))] == ["emoji \U0001f600"]


def test_topics_header_line_is_skipped_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _write(tmp_path / "topics.tsv", "qid\tquery\n7\tuno\n")
    assert [q for _, q, _ in iter_topics(path)] == ["7"]
    assert f"{path}, line 1: 'qid\\tquery' is a header line, not a query; skipped" in caplog.text
    caplog.clear()
    assert [q for _, q, _ in iter_topics(_write(tmp_path / "t2.tsv", "7\tuno\nqid\tquery\n"))] == ["7", "qid"]
    assert not caplog.records, "only a first line is a header"
