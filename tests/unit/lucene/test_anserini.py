"""Anserini: BM25 indexing (empty passages, what a killed indexing job leaves behind) and the JVM of short jobs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from miracl_eval import schemas
from miracl_eval.errors import MiraclEvalError
from miracl_eval.inputs.preprocess import build_corpus
from miracl_eval.lucene.anserini import INDEX_FILE, build_index, index_documents, indexed_counts
from miracl_eval.lucene.bm25 import build_bm25_index
from miracl_eval.lucene.jvm import SHORT_JOB_DOCUMENTS, SHORT_JOB_OPTIONS, job_options
from tests.helpers import REPO, count_documents


def _corpus(tmp_path: Path, passages: dict[str, str]) -> Path:
    src = tmp_path / "corpus.jsonl"
    src.write_text("".join(json.dumps({"docid": d, "title": "", "text": t}) + "\n" for d, t in passages.items()))
    out = tmp_path / "corpus.parquet"
    build_corpus([src], out, "{title} {text}")
    return out


def test_a_document_anserini_skips_fails_the_index_with_its_counter(tmp_path: Path) -> None:
    """Anserini only logs a document it leaves out: the job fails, naming the counter that says why."""

    def write(folder: Path) -> int:  # two documents claimed, one of which Anserini skips as empty
        (folder / "part-000.jsonl").write_text('{"id": "a", "contents": "alpha"}\n{"id": "b", "contents": ""}\n')
        return 2

    def args(inp: Path, index: Path) -> list[str]:
        return ["-collection", "JsonCollection", "-input", str(inp), "-index", str(index), "-threads", "1"]

    with pytest.raises(MiraclEvalError, match=r"holds 1 documents but 2 were given to Anserini: .*\(1 empty\)"):
        build_index(tmp_path / "index", write, args, tmp_path / "index.log", "1g")
    assert not (tmp_path / "index").exists()
    assert "indexed:" in (tmp_path / "index.log").read_text()


def test_indexed_counts_read_the_final_counters() -> None:
    out = (
        "2026-12-01 17:17:02,152 INFO  [main] index.AbstractIndexer (AbstractIndexer.java:294) - indexed:   1,234,161\n"
        "2026-12-01 17:17:02,152 INFO  [main] index.AbstractIndexer (AbstractIndexer.java:296) - empty:       2\n"
        "2026-12-01 17:17:02,153 INFO  [main] index.AbstractIndexer (AbstractIndexer.java:298) - errors:      0\n"
    )
    assert indexed_counts(out) == {"indexed": 1234161, "empty": 2, "errors": 0}
    with pytest.raises(MiraclEvalError, match="without its final counters"):
        indexed_counts("Exception in thread main\n")


def test_empty_passages_are_counted_and_left_out_of_the_index(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    passages = {"1#0": "", "2#0": " \t ", "3#0": "\u00a0", "4#0": "alpha beta", "5#0": "gamma"}
    corpus = _corpus(tmp_path, passages)
    result = build_bm25_index(corpus, tmp_path / "bm25", "en", log_path=tmp_path / "index.log")
    # "3#0" is not empty to Anserini (Java's trim keeps U+00A0): indexed without terms
    assert result.documents == count_documents(tmp_path / "bm25") == 3
    assert (
        "2 of 5 passages are empty after analysis and are not indexed (BM25 cannot retrieve them), e.g. docids 1#0, 2#0"
        in caplog.text
    )


def _state(pid: int) -> str | None:
    """The process's state letter from /proc (Z: exited, not yet reaped), or None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def _wait_for(condition, what: str, limit: float = 120.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_killed_indexing_job_leaves_nothing_after_the_next_run(tmp_path: Path) -> None:
    """SIGKILL while Anserini runs: Anserini dies too, and the next run removes the partial index and
    the JSONL copy of the corpus that the killed one left."""
    corpus = _corpus(tmp_path, {f"{i}#0": f"passage {i}" for i in range(20)})
    indexes = tmp_path / "indexes"
    indexes.mkdir()  # as Snakemake creates an output's folder
    fake_java = tmp_path / "jdk" / "bin" / "java"  # stands for Anserini: writes its pid, then waits
    fake_java.parent.mkdir(parents=True)
    fake_java.write_text(
        '#!/bin/sh\necho $$ > "$FAKE_JAVA_PID.tmp" && mv "$FAKE_JAVA_PID.tmp" "$FAKE_JAVA_PID"\nexec sleep 600\n'
    )
    fake_java.chmod(0o755)
    pid_file = tmp_path / "java.pid"
    env = os.environ | {
        "MIRACL_EVAL_JAVA_HOME": str(fake_java.parents[1]),
        "FAKE_JAVA_PID": str(pid_file),
        "PYTHONPATH": str(REPO),
    }
    code = f"from miracl_eval.lucene.bm25 import build_bm25_index; build_bm25_index({str(corpus)!r}, {str(indexes / 'bm25')!r}, 'en')"
    job = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        _wait_for(lambda: pid_file.exists() or job.poll() is not None, "the indexing job to start Anserini")
        assert pid_file.exists(), f"the job ended (exit {job.returncode}) before it started Anserini"
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait()
    left = sorted(p.name for p in indexes.iterdir())
    assert len(left) == 2 and all(name.startswith(".bm25.tmp-") for name in left), left
    assert any((indexes / name / "part-000.jsonl").is_file() for name in left), "the corpus copy was left"
    java = int(pid_file.read_text())
    try:
        _wait_for(lambda: _state(java) in (None, "Z"), "Anserini to die with the job", limit=30)
    finally:
        if _state(java) not in (None, "Z"):
            os.kill(java, signal.SIGKILL)

    result = build_bm25_index(corpus, indexes / "bm25", "en")
    assert sorted(p.name for p in indexes.iterdir()) == ["bm25"]
    assert result.documents == 20


def test_short_jobs_get_the_c1_compiler_and_long_ones_the_defaults() -> None:
    assert job_options(10) == SHORT_JOB_OPTIONS == ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
    assert job_options(SHORT_JOB_DOCUMENTS) == () and job_options(None) == ()


def test_a_small_index_is_built_and_searched_by_short_job_jvms(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The index records its documents; its indexing JVM and, in a process of its own, its search JVM run
    with the short-job options, and the search ranks as with the JVM's defaults."""
    caplog.set_level("INFO", logger="miracl_eval.lucene")
    corpus = _corpus(tmp_path, {"1#0": "alpha beta", "2#0": "beta gamma", "3#0": "gamma delta alpha"})
    build_bm25_index(corpus, tmp_path / "bm25", "en", log_path=tmp_path / "index.log")
    assert index_documents(tmp_path / "bm25") == 3 and index_documents(tmp_path) is None
    running = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("running "))
    assert " ".join(SHORT_JOB_OPTIONS) in running
    queries = tmp_path / "queries.parquet"
    pq.write_table(pa.table({"qid": ["q1", "q2"], "query": ["alpha", "gamma beta"]}, schema=schemas.QUERIES), queries)
    runs = {}
    for name, documents in (("short", 3), ("long", SHORT_JOB_DOCUMENTS)):
        (tmp_path / "bm25" / INDEX_FILE).write_text(json.dumps({"documents": documents}))
        code = (
            "import sys; from miracl_eval.lucene.bm25 import bm25_search; from miracl_eval.lucene.jvm import "
            "autoclass; bm25_search(*sys.argv[1:5]); print(list(autoclass('java.lang.management.ManagementFactory')"
            ".getRuntimeMXBean().getInputArguments().toArray()))"
        )
        args = [str(tmp_path / "bm25"), str(queries), str(tmp_path / f"{name}.parquet"), str(tmp_path / f"{name}.trec")]
        proc = subprocess.run(
            [sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
        )
        jvm_args = proc.stdout.strip().splitlines()[-1]
        assert all((option in jvm_args) == (name == "short") for option in SHORT_JOB_OPTIONS), jvm_args
        runs[name] = (tmp_path / f"{name}.trec").read_text()
    assert runs["short"] == runs["long"] and runs["short"].count("\n") == 5
