"""Thin access to Anserini's searchers, the Java classes that pyserini's searchers wrap.

``pyserini.search.lucene`` imports torch, transformers and faiss (about 9 s per process) because
its package also holds neural encoders; a workflow with hundreds of small search jobs pays that
each time. This module reaches the same Anserini classes (``SimpleSearcher`` for BM25,
``SimpleImpactSearcher`` for impact indexes) through pyserini's class path in a fraction of a
second, and makes the same calls as pyserini's ``LuceneSearcher.batch_search`` and
``LuceneImpactSearcher.batch_search``. The tests check the results against pyserini's own
searchers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

Hits = dict[str, list[tuple[str, float]]]


def autoclass(name: str) -> Any:
    """The Java class ``name``, from a JVM started by :func:`miracl_eval.java.ensure_jvm` (never pyserini's default)."""
    from .java import ensure_jvm

    ensure_jvm()
    from pyserini.pyclass import autoclass

    return autoclass(name)


def _hits(results: Any) -> Hits:
    out: Hits = {}
    for entry in results.entrySet().toArray():
        out[entry.getKey()] = [(h.docid, float(h.score)) for h in entry.getValue()]
    return out


def _java_list(values: Sequence[Any]) -> Any:
    jlist = autoclass("java.util.ArrayList")()
    for v in values:
        jlist.add(v)
    return jlist


class BM25Searcher:
    """Anserini ``SimpleSearcher`` with BM25, as pyserini's ``LuceneSearcher``."""

    def __init__(self, index: str | os.PathLike[str], k1: float = 0.9, b: float = 0.4) -> None:
        self._searcher = autoclass("io.anserini.search.SimpleSearcher")(str(index))
        self._searcher.set_bm25(float(k1), float(b))

    def set_language(self, language: str) -> None:
        self._searcher.set_language(language)

    def set_analyzer(self, analyzer: Any) -> None:
        self._searcher.set_analyzer(analyzer)

    def batch_search(self, queries: Sequence[str], qids: Sequence[str], k: int, threads: int = 1) -> Hits:
        results = self._searcher.batch_search(_java_list(queries), _java_list(qids), int(k), int(threads))
        return _hits(results)

    def close(self) -> None:
        self._searcher.close()


class ImpactSearcher:
    """Anserini ``SimpleImpactSearcher``: the score is the dot product of integer term weights."""

    def __init__(self, index: str | os.PathLike[str]) -> None:
        self._searcher = autoclass("io.anserini.search.SimpleImpactSearcher")(str(index))

    def batch_search(self, queries: Sequence[Mapping[str, int]], qids: Sequence[str], k: int, threads: int = 1) -> Hits:
        jmap = autoclass("java.util.HashMap")
        jint = autoclass("java.lang.Integer")
        jqueries = []
        for query in queries:
            weights = jmap()
            for term, weight in query.items():
                weights.put(term, jint(int(weight)))
            jqueries.append(weights)
        results = self._searcher.batch_search(_java_list(jqueries), _java_list(qids), int(k), int(threads))
        return _hits(results)

    def close(self) -> None:
        self._searcher.close()


def whitespace_analyzer() -> Any:
    return autoclass("org.apache.lucene.analysis.core.WhitespaceAnalyzer")()


def count_documents(index: str | os.PathLike[str]) -> int:
    """Number of documents in a Lucene index."""
    paths = autoclass("java.nio.file.Paths")
    directory = autoclass("org.apache.lucene.store.FSDirectory").open(paths.get(str(index)))
    reader = autoclass("org.apache.lucene.index.DirectoryReader").open(directory)
    try:
        return int(reader.numDocs())
    finally:
        reader.close()
        directory.close()
