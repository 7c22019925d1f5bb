"""Preprocessing: raw corpus, topics and qrels files to the Parquet tables every later stage reads.

The corpus is streamed: passages are validated and written in record batches, and duplicate
docids are found from 8-byte hashes (a second pass over the input names the exact lines only
when two hashes collide), so memory stays small on corpora of tens of millions of passages.
"""

from __future__ import annotations

import logging
import os
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from miracl_eval import schemas
from miracl_eval.errors import InputError
from miracl_eval.inputs.loading import error_at, iter_corpus, iter_qrels, iter_topics, position

log = logging.getLogger(__name__)


def join_title(title: str, text: str, template: str) -> str:
    """Append the title to the passage as ``template`` says (``"{title} {text}"`` for MIRACL).

    A passage without a title keeps its text unchanged.
    """
    if not title:
        return text
    return template.format(title=title, text=text)


def strip_passage(title: str, text: str) -> tuple[str, str]:
    """A passage's title and text as MTEB reads them: ``title + " " + text`` is MTEB's
    ``(title + " " + text).strip()`` (``text.strip()`` without a title), so that a model's or reranker's
    own ``"{title} {text}"`` join reads MTEB's passage too (a title of spaces is no title)."""
    title = title.lstrip()
    return (title, text.rstrip()) if title else ("", text.strip())


def check_template(template: str) -> None:
    try:
        out = template.format(title="T", text="X")
    except (KeyError, IndexError, ValueError) as err:
        raise ValueError(f"title join template {template!r} is invalid ({err})") from None
    if "T" not in out or "X" not in out:
        raise ValueError(f"title join template {template!r} must use both {{title}} and {{text}}")


@dataclass
class CorpusStats:
    passages: int
    files: int
    repeats: int = 0  #: repeated passages left out


#: what to do with a docid that occurs twice with different passages (setting ``corpus.duplicates``)
DUPLICATES = ("error", "first")


class _Rewrite(Exception):
    """Raised inside the corpus writer to drop what it wrote (duplicates to leave out were found)."""


def _duplicates(paths: Sequence[Path], suspects: set[int], policy: str) -> set[tuple[int, int]]:
    """The ``(file index, line)`` of every repeated passage to leave out, among docids whose hash is in
    ``suspects``: identical repeats (same title and text) always; repeats with another passage when
    ``policy`` is ``first``, else the error naming both lines."""
    first: dict[str, tuple[Path, int, str, str]] = {}
    skip: set[tuple[int, int]] = set()
    identical: list[str] = []
    differing: list[str] = []
    for index, path in enumerate(paths):
        for lineno, passage in iter_corpus(path):
            if hash(passage.docid) not in suspects:
                continue
            if passage.docid not in first:
                first[passage.docid] = (path, lineno, passage.title, passage.text)
                continue
            fpath, fline, title, text = first[passage.docid]
            where = position(fpath, fline) if fpath == path else f"{fpath}, {position(fpath, fline)}"
            if (passage.title, passage.text) == (title, text):
                identical.append(f"{passage.docid} ({path}, {position(path, lineno)}; first at {where})")
            elif policy == "first":
                differing.append(f"{passage.docid} ({path}, {position(path, lineno)}; first at {where})")
            else:
                raise error_at(
                    path,
                    f"duplicate docid {passage.docid} with another passage (first seen at {where}); "
                    "corpus.duplicates: first keeps the first",
                    lineno,
                )
            skip.add((index, lineno))
    if identical:
        log.warning("kept once: %d identical repeated passage(s), e.g. %s", len(identical), "; ".join(identical[:3]))
    if differing:
        log.warning(
            "corpus.duplicates: first: %d repeated docid(s) with another passage left out, e.g. %s",
            len(differing), "; ".join(differing[:3]),
        )  # fmt: skip
    return skip


def _write_corpus(
    paths: Sequence[Path],
    writer: schemas.StreamWriter,
    template: str,
    batch_rows: int,
    skip: set[tuple[int, int]],
    strip: bool,
) -> np.ndarray:
    """Write every passage but those in ``skip``; returns the sorted hashes of the docids written."""
    hashes = array("q")
    cols: dict[str, list[str]] = {name: [] for name in schemas.CORPUS.names}
    for index, path in enumerate(paths):
        for lineno, p in iter_corpus(path):
            if skip and (index, lineno) in skip:
                continue
            hashes.append(hash(p.docid))
            title, text = strip_passage(p.title, p.text) if strip else (p.title, p.text)
            cols["docid"].append(p.docid)
            cols["title"].append(title)
            cols["text"].append(text)
            contents = join_title(title, text, template)
            cols["contents"].append(contents.strip() if strip else contents)  # MTEB's: the join, stripped
            if len(cols["docid"]) >= batch_rows:
                writer.write(cols)
                cols = {name: [] for name in schemas.CORPUS.names}
    if cols["docid"]:
        writer.write(cols)
    h = np.frombuffer(hashes, dtype=np.int64).copy()
    h.sort()
    return h


def build_corpus(
    inputs: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    template: str,
    batch_rows: int = schemas.BATCH_ROWS,
    duplicates: str = "error",
    strip: bool = False,
) -> CorpusStats:
    """Validate the corpus files and write ``corpus.parquet`` (docid, title, text, contents: the title
    joined by ``template``). ``strip`` (MTEB's datasets): title and text as :func:`strip_passage` gives
    them, the contents without surrounding whitespace.

    Docids are checked for repeats from 8-byte hashes; only when two collide are the files read
    again for the exact lines. A passage repeated identically (a real corpus's quirk: pyserini's
    tracker reports repeated ids in MIRACL Korean) is kept once and counted in the log; a docid
    repeated with another passage is an error naming both lines, unless ``duplicates`` is
    ``first`` (keep the first). Then the corpus is written again without the repeats.
    """
    check_template(template)
    if duplicates not in DUPLICATES:
        raise ValueError(f"duplicates must be one of {', '.join(DUPLICATES)}, not {duplicates!r}")
    paths = [Path(p) for p in inputs]
    if not paths:
        raise ValueError("no corpus files given")
    skip: set[tuple[int, int]] = set()
    while True:
        try:
            with schemas.StreamWriter(output, schemas.CORPUS) as writer:
                h = _write_corpus(paths, writer, template, batch_rows, skip, strip)
                if not len(h):
                    where = paths[0] if len(paths) == 1 else ", ".join(map(str, paths))
                    raise InputError(where, "the corpus is empty")
                dup = h[1:][h[1:] == h[:-1]]
                if dup.size and not skip:
                    skip = _duplicates(paths, {int(x) for x in dup}, duplicates)
                    if skip:
                        raise _Rewrite
        except _Rewrite:
            continue
        return CorpusStats(passages=len(h), files=len(paths), repeats=len(skip))


def build_queries(topics: str | os.PathLike[str], output: str | os.PathLike[str]) -> int:
    """Validate a topics file and write ``queries.parquet`` (qid, query). Returns the count."""
    qids: list[str] = []
    queries: list[str] = []
    for _, qid, query in iter_topics(topics):
        qids.append(qid)
        queries.append(query)
    if not qids:
        raise InputError(topics, "no queries")
    schemas.write_table(schemas.pa.table({"qid": qids, "query": queries}), output, schemas.QUERIES)
    return len(qids)


@dataclass
class QrelsStats:
    judgements: int
    queries: int
    unknown_queries: int
    unknown_judgements: int


def build_qrels(
    qrels: str | os.PathLike[str],
    queries_parquet: str | os.PathLike[str],
    output: str | os.PathLike[str],
) -> QrelsStats:
    """Validate a qrels file and write ``qrels.parquet`` (qid, docid, relevance).

    Judgements of queries that are not in the topics are counted, reported and left out: they
    could never be retrieved. Everything else is kept as given.
    """
    known = set(schemas.read_table(queries_parquet, schemas.QUERIES).column("qid").to_pylist())
    rows: dict[str, list] = {"qid": [], "docid": [], "relevance": []}
    unknown: dict[str, int] = {}
    for _, qid, docid, rel in iter_qrels(qrels):
        if qid not in known:
            unknown[qid] = unknown.get(qid, 0) + 1
            continue
        rows["qid"].append(qid)
        rows["docid"].append(docid)
        rows["relevance"].append(rel)
    if not rows["qid"]:
        raise InputError(qrels, "no judgements for any query of the topics")
    if unknown:
        sample = ", ".join(sorted(unknown)[:5])
        log.warning(
            "%s: %d judgements of %d queries that are not in the topics were left out (e.g. %s)",
            qrels, sum(unknown.values()), len(unknown), sample,
        )  # fmt: skip
    schemas.write_table(schemas.pa.table(rows), output, schemas.QRELS)
    return QrelsStats(
        judgements=len(rows["qid"]),
        queries=len(set(rows["qid"])),
        unknown_queries=len(unknown),
        unknown_judgements=sum(unknown.values()),
    )


def corpus_inputs(source: str | os.PathLike[str]) -> list[Path]:
    """A corpus source is one file, or a folder of shards (as downloaded from the hub)."""
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
        if not files:
            raise InputError(path, "the corpus folder holds no files")
        return files
    if not path.exists():
        raise InputError(path, "the corpus file does not exist")
    return [path]


def build_corpus_from(
    source: str | os.PathLike[str],
    output: str | os.PathLike[str],
    template: str,
    duplicates: str = "error",
    strip: bool = False,
) -> CorpusStats:
    """Stage entry point: preprocess a corpus file or folder of shards."""
    return build_corpus(corpus_inputs(source), output, template, duplicates=duplicates, strip=strip)


def build_topics(
    topics: str | os.PathLike[str],
    qrels: str | os.PathLike[str],
    queries_out: str | os.PathLike[str],
    qrels_out: str | os.PathLike[str],
) -> QrelsStats:
    """Stage entry point: topics and qrels of one partition to Parquet."""
    n = build_queries(topics, queries_out)
    log.info("%s: %d queries", topics, n)
    try:
        return build_qrels(qrels, queries_out, qrels_out)
    except BaseException:
        Path(queries_out).unlink(missing_ok=True)
        raise
