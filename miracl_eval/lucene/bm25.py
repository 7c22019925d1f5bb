"""BM25 with pyserini's MIRACL settings (rules ``bm25_index``, ``bm25_search``).

The corpus is indexed with the language's Lucene analyzer (:mod:`miracl_eval.lucene.analyzers`)
by Anserini's ``IndexCollection``, and searched with Anserini's ``SimpleSearcher`` (k1=0.9, b=0.4
by default) in query chunks, the analysis read back from the index so that queries are analysed
as the passages were.

A passage's Lucene document is its title and text on two lines (:data:`DOCUMENT`), as Anserini's
``MrTyDiCollection`` writes it: the collection pyserini's MIRACL indexes and MessIRve's authors' index were
built from. Most analyzers split a newline as they split a space, but not all: Korean's (Lucene's
KoreanAnalyzer, pyserini 2.3.0 and later) tokenizes ``title text`` otherwise than ``title\ntext``, and only
the latter gives pyserini's scores.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from miracl_eval import schemas
from miracl_eval.errors import InputError
from miracl_eval.lucene.analyzers import analysis_for
from miracl_eval.lucene.anserini import (
    ANALYSIS_FILE,
    JAVA_BLANK,
    BM25Searcher,
    IndexResult,
    build_index,
    hits_table,
    index_analysis,
    index_documents,
    iter_query_chunks,
    json_strings,
    log_long_queries,
    search_heap,
    write_collection,
)
from miracl_eval.lucene.jvm import ensure_jvm, job_options
from miracl_eval.runs import RunWriter

log = logging.getLogger(__name__)

#: a passage's Lucene document, as Anserini's MrTyDiCollection makes it (the rule's param: a change re-indexes)
DOCUMENT = "{title}\n{text}"


def build_bm25_index(
    corpus: str | os.PathLike[str],
    output: str | os.PathLike[str],
    language: str,
    thai: str = "auto",
    threads: int = 1,
    log_path: str | os.PathLike[str] | None = None,
    heap: str = "4g",
) -> IndexResult:
    """Index ``corpus.parquet``'s passages (:data:`DOCUMENT`) with the language's analysis, as pyserini does.

    The analysis used is recorded in the index folder; :func:`index_analysis` reads it back.
    """
    analysis = analysis_for(language, thai)
    log.info("analysis: %s", analysis.describe())
    empty: list[str] = []

    def chunks() -> Iterator[pa.Array]:
        for batch in schemas.iter_batches(corpus, columns=["docid", "title", "text"]):
            docids = batch.column("docid")
            document = pc.binary_join_element_wise(batch.column("title"), batch.column("text"), "\n")
            contents = analysis.prepare_document_array(document)
            blank = pc.match_substring_regex(contents, JAVA_BLANK)
            if pc.any(blank).as_py():
                empty.extend(pc.filter(docids, blank).to_pylist())
                keep = pc.invert(blank)
                docids, contents = pc.filter(docids, keep), pc.filter(contents, keep)
            ids, texts = json_strings(docids), json_strings(contents)
            yield pc.binary_join_element_wise('{"id": ', ids, ', "contents": ', texts, "}\n", "")

    def args(inp: Path, index: Path) -> list[str]:
        return [
            "-collection", "JsonCollection", "-input", str(inp), "-index", str(index),
            "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads),
            *analysis.index_args(),
        ]  # fmt: skip

    def write(folder: Path) -> int:
        written = write_collection(chunks(), folder, threads, total=schemas.count_rows(corpus))
        if empty:
            log.warning(
                "%d of %d passages are empty after analysis and are not indexed (BM25 cannot retrieve them), "
                "e.g. docids %s", len(empty), written + len(empty), ", ".join(empty[:5]),
            )  # fmt: skip
        if not written:
            raise InputError(corpus, "every passage is empty: nothing to index")
        return written

    def describe(index: Path) -> None:
        (index / ANALYSIS_FILE).write_text(json.dumps({"language": language, "mode": analysis.mode}), encoding="utf-8")

    return build_index(output, write, args, log_path, heap, describe)


def bm25_search(
    index: str | os.PathLike[str],
    queries: str | os.PathLike[str],
    run_parquet: str | os.PathLike[str],
    run_trec: str | os.PathLike[str],
    k1: float = 0.9,
    b: float = 0.4,
    k: int = 1000,
    threads: int = 1,
    tag: str = "bm25",
) -> int:
    """Search every query of ``queries.parquet`` with BM25 and write the run. Returns #queries.

    Queries are analysed as the index's passages were (see :func:`indexing.index_analysis`).
    """
    ensure_jvm(search_heap(k), job_options(index_documents(index)))
    searcher = BM25Searcher(index, k1, b)
    analysis = index_analysis(index)
    analysis.configure_searcher(searcher)
    n = 0
    with RunWriter(run_parquet, run_trec, tag) as writer:
        for qids, texts in iter_query_chunks(queries):
            log_long_queries(queries, qids, [set(t.split()) for t in texts])
            results = searcher.batch_search(analysis.prepare_queries(texts), qids, k=k, threads=threads)
            writer.write(hits_table(qids, results, k))
            n += len(qids)
    searcher.close()
    return n
