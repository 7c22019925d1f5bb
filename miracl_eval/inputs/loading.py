"""Loaders of the raw inputs: corpus JSONL (plain or gzipped) or Parquet, topics TSV, TREC qrels (or MTEB's
queries and qrels Parquet files).

Every loader validates as it reads and raises :class:`InputError` naming the file and line
(or record) of the first bad input. Loaders stream: nothing holds a whole corpus in memory.
A UTF-8 byte-order mark at the start of a file (as Windows editors write one) is dropped, and
every query and passage id must be one a TREC file can hold (:mod:`miracl_eval.ids`).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pyarrow.parquet as pq

from miracl_eval.errors import InputError
from miracl_eval.ids import id_problem

log = logging.getLogger(__name__)

GZIP_MAGIC = b"\x1f\x8b"
BOM = "\ufeff"
#: a JSON escape of a UTF-16 surrogate; json.loads keeps an unpaired one, which UTF-8 cannot encode
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
#: the first line of a topics file that is a header (``qid<TAB>query``), not a query
_HEADER_IDS = frozenset({"qid", "query_id", "queryid", "query-id", "id", "_id", "topic", "topic_id", "topicid"})
_HEADER_TEXTS = frozenset({"query", "text", "question", "title", "query_text", "topic"})


@dataclass(frozen=True)
class Passage:
    docid: str
    title: str
    text: str


def _open_binary(path: Path) -> IO[bytes]:
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
    except OSError as err:
        raise InputError(path, f"cannot open ({err.strerror})") from err
    if magic == GZIP_MAGIC:
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def iter_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` of a plain or gzipped UTF-8 text file, without line ends."""
    path = Path(path)
    with _open_binary(path) as fh:
        lineno = 0
        try:
            for lineno, raw in enumerate(fh, start=1):  # noqa: B007
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise InputError(path, f"not valid UTF-8 ({err.reason})", lineno) from err
                if lineno == 1 and text.startswith(BOM):
                    log.info("%s starts with a UTF-8 byte-order mark; it is ignored", path)
                    text = text[1:]
                yield lineno, text.rstrip("\r\n")
        except (OSError, EOFError) as err:  # truncated or corrupt gzip
            raise InputError(path, f"cannot read past this line ({err})", lineno + 1) from err


def _id(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _passage(record: object, path: Path, where: str, line: int | None) -> Passage:
    if not isinstance(record, dict):
        raise InputError(path, f"{where}is not a JSON object", line)
    if "docid" not in record:
        raise InputError(path, f"{where}has no 'docid'", line)
    docid = _id(record["docid"])
    if docid is None:
        raise InputError(path, f"{where}'docid' must be a non-empty string", line)
    problem = id_problem(docid)
    if problem:
        raise InputError(path, f"{where}docid {docid!r} {problem}", line)
    if "text" not in record or record["text"] is None:
        raise InputError(path, f"{where}(docid {docid}) has no 'text'", line)
    text = record["text"]
    title = record.get("title") or ""
    if not isinstance(text, str) or not isinstance(title, str):
        raise InputError(path, f"{where}(docid {docid}) 'title' and 'text' must be strings", line)
    return Passage(docid, title, text)


def _check_encodable(passage: Passage, path: Path, line: int) -> None:
    for field in ("title", "text"):
        value = getattr(passage, field)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as err:
            escape = f"\\u{ord(value[err.start]):04x}"
            raise InputError(
                path, f"(docid {passage.docid}) '{field}' holds an unpaired surrogate escape {escape}", line
            ) from None


def iter_corpus(path: str | os.PathLike[str]) -> Iterator[tuple[int, Passage]]:
    """Yield ``(line_or_record_number, passage)`` from a MIRACL-format corpus file.

    JSONL (plain or gzipped) with ``{"docid", "title", "text"}`` per line, or a Parquet file with
    those columns (the layout of the MessIRve corpus on the hub). Blank lines are skipped.
    """
    path = Path(path)
    if path.suffix == ".parquet":
        yield from _iter_corpus_parquet(path)
        return
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(path, f"malformed JSON ({err.msg} at column {err.colno})", lineno) from err
        passage = _passage(record, path, "", lineno)
        if _SURROGATE_ESCAPE.search(line):
            _check_encodable(passage, path, lineno)
        yield lineno, passage


#: a Parquet corpus's passage id columns: ``docid`` (MIRACL's, MessIRve's), or ``id`` / ``_id`` (MTEB's
#: corpora, BEIR's); a file with several must give each passage one id in all of them
ID_COLUMNS = ("docid", "id", "_id")
#: an MTEB queries file's query id columns (``_id`` on the hub, ``id`` in MTEB's own format)
QUERY_ID_COLUMNS = ("_id", "id")
#: an MTEB qrels file's columns
QRELS_COLUMNS = ("query-id", "corpus-id", "score")


def position(path: str | os.PathLike[str], n: int) -> str:
    """Where the ``n``-th item of an input file is: ``line n``, or ``record n`` in a Parquet file."""
    return f"{'record' if Path(path).suffix == '.parquet' else 'line'} {n}"


def error_at(path: str | os.PathLike[str], message: str, n: int) -> InputError:
    """An InputError at the ``n``-th item of ``path`` (:func:`position`)."""
    if Path(path).suffix == ".parquet":
        return InputError(path, f"{position(path, n)}: {message}")
    return InputError(path, message, n)


def _kind(dtype: object) -> str:
    """``string``, ``integer``, ``float`` or ``null`` for a Parquet column's Arrow type, else the type."""
    import pyarrow as pa

    assert isinstance(dtype, pa.DataType)
    if pa.types.is_dictionary(dtype):
        dtype = dtype.value_type
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or pa.types.is_string_view(dtype):
        return "string"
    for kind in ("integer", "floating", "null"):
        if getattr(pa.types, f"is_{kind}")(dtype):
            return {"floating": "float"}.get(kind, kind)
    return str(dtype)


def _parquet(path: Path, columns: dict[str, tuple[str, ...]], what: str) -> pq.ParquetFile:
    """``path`` opened, with each of ``columns`` it has of one of its kinds (:func:`_kind`); InputError names the
    file and the column."""
    try:
        pfile = pq.ParquetFile(path)
    except Exception as err:  # noqa: BLE001 - pyarrow raises several types
        raise InputError(path, f"cannot read Parquet file ({err})") from err
    schema = pfile.schema_arrow
    for name, kinds in columns.items():
        if name in schema.names:
            kind = _kind(schema.field(name).type)
            if kind not in kinds:
                raise InputError(
                    path,
                    f"{what} column '{name}' holds {kind} values, not {' or '.join(k for k in kinds if k != 'null')}",
                )
    return pfile


def _records(pfile: pq.ParquetFile, path: Path, columns: list[str]) -> Iterator[tuple[int, dict[str, object]]]:
    """``(record number, record)`` of ``columns``, from 1."""
    n = 0
    for batch in pfile.iter_batches(batch_size=8192, columns=columns):
        try:
            records = batch.to_pylist()
        except UnicodeDecodeError as err:
            raise InputError(path, f"not valid UTF-8 after record {n} ({err.reason})") from err
        for rec in records:
            n += 1
            yield n, rec


def _one_id(rec: dict[str, object], keys: list[str], path: Path, n: int) -> object:
    """The record's id from its id columns (``keys``), which must agree; a null one is said."""
    values = [rec[k] for k in keys]
    for key, value in zip(keys, values, strict=True):
        if value is None:
            raise InputError(path, f"record {n}: '{key}' is null")
    if len({_id(v) for v in values}) > 1:
        given = ", ".join(f"'{k}' {v!r}" for k, v in zip(keys, values, strict=True))
        raise InputError(path, f"record {n}: its id columns disagree ({given}); keep one of them")
    return values[0]


def _iter_corpus_parquet(path: Path) -> Iterator[tuple[int, Passage]]:
    names = _parquet(path, {}, "corpus").schema_arrow.names
    keys = [c for c in ID_COLUMNS if c in names]
    if not keys:
        raise InputError(path, "Parquet corpus has no 'docid' column (nor MTEB's 'id' or '_id')")
    if "text" not in names:
        raise InputError(path, "Parquet corpus has no 'text' column")
    texts = ("string", "null")
    pfile = _parquet(path, {**dict.fromkeys(keys, ("string", "integer")), "title": texts, "text": texts}, "corpus")
    for n, rec in _records(pfile, path, [*keys, *(c for c in ("title", "text") if c in names)]):
        docid = _one_id(rec, keys, path, n)
        passage = {"docid": docid, "title": rec.get("title"), "text": rec["text"]}
        yield n, _passage(passage, path, f"record {n} ", None)


def _iter_topics_parquet(path: Path) -> Iterator[tuple[int, str, str]]:
    """MTEB's queries: ``_id`` (or ``id``) and ``text``."""
    names = _parquet(path, {}, "queries").schema_arrow.names
    keys = [c for c in QUERY_ID_COLUMNS if c in names]
    if not keys or "text" not in names:
        raise InputError(path, f"MTEB queries need columns _id (or id) and text, not {', '.join(names)}")
    pfile = _parquet(path, {**dict.fromkeys(keys, ("string", "integer")), "text": ("string", "null")}, "queries")
    seen: dict[str, int] = {}
    for n, rec in _records(pfile, path, [*keys, "text"]):
        qid = _id(_one_id(rec, keys, path, n)) or ""
        problem = id_problem(qid)
        if problem:
            raise InputError(path, f"record {n}: query id {qid!r} {problem}")
        text = rec["text"]
        if not isinstance(text, str) or not text.strip():
            raise InputError(path, f"record {n}: query {qid} is {'null' if text is None else 'empty'}")
        if qid in seen:
            raise InputError(path, f"record {n}: query id {qid} repeats record {seen[qid]}")
        seen[qid] = n
        yield n, qid, text.strip()


def _relevance(value: object) -> int | None:
    """An MTEB qrels score as an integer (``1``, ``1.0``, ``"1"``), or None when it is none."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def _iter_qrels_parquet(path: Path) -> Iterator[tuple[int, str, str, int]]:
    """MTEB's qrels: ``query-id``, ``corpus-id`` and an integer ``score``."""
    names = _parquet(path, {}, "qrels").schema_arrow.names
    if not set(QRELS_COLUMNS) <= set(names):
        raise InputError(path, f"MTEB qrels need columns {', '.join(QRELS_COLUMNS)}, not {', '.join(names)}")
    ids = ("string", "integer")
    kinds = {"query-id": ids, "corpus-id": ids, "score": ("integer", "float", "string", "null")}
    pfile = _parquet(path, kinds, "qrels")
    seen: dict[tuple[str, str], int] = {}
    for n, rec in _records(pfile, path, list(QRELS_COLUMNS)):
        qid, docid = (_id(_one_id(rec, [c], path, n)) or "" for c in ("query-id", "corpus-id"))
        for what, value in (("query id", qid), ("docid", docid)):
            problem = id_problem(value)
            if problem:
                raise InputError(path, f"record {n}: {what} {value!r} {problem}")
        relevance = _relevance(rec["score"])
        if relevance is None:
            raise InputError(path, f"record {n}: score {rec['score']!r} of ({qid}, {docid}) is not an integer")
        if (qid, docid) in seen:
            raise InputError(path, f"record {n}: ({qid}, {docid}) is judged twice (first in record {seen[qid, docid]})")
        seen[qid, docid] = n
        yield n, qid, docid, relevance


def iter_topics(path: str | os.PathLike[str]) -> Iterator[tuple[int, str, str]]:
    """Yield ``(line, qid, query)`` from a ``qid<TAB>query`` file; blank lines are skipped.

    A first line that is a header (such as ``qid<TAB>query``) is skipped with a warning. A ``.parquet``
    file holds MTEB's queries (``_id`` or ``id``, ``text``): its record numbers stand for the lines.
    """
    path = Path(path)
    if path.suffix == ".parquet":
        yield from _iter_topics_parquet(path)
        return
    seen: dict[str, int] = {}
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        qid, sep, query = line.partition("\t")
        qid = qid.strip()
        if not sep:
            raise InputError(path, "expected 'qid<TAB>query'", lineno)
        if not qid:
            raise InputError(path, "empty query id", lineno)
        query = query.strip()
        if not seen and qid.lower() in _HEADER_IDS and query.lower() in _HEADER_TEXTS:
            log.warning("%s, line %d: %r is a header line, not a query; skipped", path, lineno, line)
            continue
        problem = id_problem(qid)
        if problem:
            raise InputError(path, f"query id {qid!r} {problem}", lineno)
        if not query:
            raise InputError(path, f"query {qid} is empty", lineno)
        if qid in seen:
            raise InputError(path, f"query id {qid} repeats line {seen[qid]}", lineno)
        seen[qid] = lineno
        yield lineno, qid, query


def iter_qrels(path: str | os.PathLike[str]) -> Iterator[tuple[int, str, str, int]]:
    """Yield ``(line, qid, docid, relevance)`` from a TREC qrels file (``qid Q0 docid rel``), or from an
    MTEB qrels ``.parquet`` file (``query-id``, ``corpus-id``, an integer ``score``; record numbers for lines)."""
    path = Path(path)
    if path.suffix == ".parquet":
        yield from _iter_qrels_parquet(path)
        return
    seen: dict[tuple[str, str], int] = {}
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) < 4:
            raise InputError(path, f"expected 4 fields 'qid Q0 docid relevance', found {len(fields)}", lineno)
        qid, _, docid, rel = fields[:4]
        for what, value in (("query id", qid), ("docid", docid)):
            problem = id_problem(value)
            if problem:
                raise InputError(path, f"{what} {value!r} {problem}", lineno)
        try:
            relevance = int(rel)
        except ValueError:
            raise InputError(path, f"relevance '{rel}' is not an integer", lineno) from None
        key = (qid, docid)
        if key in seen:
            raise InputError(path, f"({qid}, {docid}) is judged twice (first on line {seen[key]})", lineno)
        seen[key] = lineno
        yield lineno, qid, docid, relevance
