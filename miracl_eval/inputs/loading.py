"""Loaders of the raw inputs: corpus JSONL (plain or gzipped) or Parquet, topics TSV, TREC qrels.

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


#: a Parquet corpus's passage id column, the first of these it has
ID_COLUMNS = ("docid", "id", "_id")


def _iter_corpus_parquet(path: Path) -> Iterator[tuple[int, Passage]]:
    try:
        pfile = pq.ParquetFile(path)
    except Exception as err:  # noqa: BLE001 - pyarrow raises several types
        raise InputError(path, f"cannot read Parquet file ({err})") from err
    names = pfile.schema_arrow.names
    # the passage id: docid (MIRACL's, MessIRve's), or id / _id (MTEB's corpora, BEIR's)
    key = next((c for c in ID_COLUMNS if c in names), None)
    if key is None:
        raise InputError(path, "Parquet corpus has no 'docid' column (nor MTEB's 'id' or '_id')")
    if "text" not in names:
        raise InputError(path, "Parquet corpus has no 'text' column")
    cols = [c for c in (key, "title", "text") if c in names]
    n = 0
    for batch in pfile.iter_batches(batch_size=8192, columns=cols):
        for rec in batch.to_pylist():
            n += 1
            if key != "docid":
                rec["docid"] = rec.pop(key)
            yield n, _passage(rec, path, f"record {n} ", None)


def iter_topics(path: str | os.PathLike[str]) -> Iterator[tuple[int, str, str]]:
    """Yield ``(line, qid, query)`` from a ``qid<TAB>query`` file; blank lines are skipped.

    A first line that is a header (such as ``qid<TAB>query``) is skipped with a warning.
    """
    path = Path(path)
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
    """Yield ``(line, qid, docid, relevance)`` from a TREC qrels file (``qid Q0 docid rel``)."""
    path = Path(path)
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
