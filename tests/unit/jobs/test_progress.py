"""Progress in a job's log: items, rate and time left at least every EVERY seconds, counted by batch."""

from __future__ import annotations

import logging
import sys
import time

import pytest

from miracl_eval.jobs import progress as progress_module
from miracl_eval.jobs.progress import Progress

log = logging.getLogger("miracl_eval.test.progress")


def test_the_line_says_done_rate_and_time_left() -> None:
    now = [100.0]
    p = Progress(131_924, "encode shard 0", "texts", log, clock=lambda: now[0])
    p.started = 100.0
    assert p.line() == "encode shard 0: 0 of 131,924 texts (0.0 %), 0.0 texts/s, time left unknown (no batch done yet)"
    now[0] = 130.0
    p.update(4096)
    assert p.line() == "encode shard 0: 4,096 of 131,924 texts (3.1 %), 136.5 texts/s, about 16 min left"
    assert Progress(None, "x", "pairs", log, clock=lambda: now[0]).line().startswith("x: 0 pairs, ")


def test_a_line_comes_every_period_even_when_no_batch_ends(caplog: pytest.LogCaptureFixture) -> None:
    """A batch that takes longer than the period (a CPU, long passages, a slow API) does not silence it."""
    with caplog.at_level(logging.INFO, logger=log.name), Progress(10, "slow stage", "texts", log, every=0.01):
        deadline = time.monotonic() + 30
        while len(caplog.records) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) >= 3 and all(line.startswith("slow stage: 0 of 10 texts") for line in lines)


def test_encoding_counts_by_batch(tiny_checkpoints, tmp_path, monkeypatch) -> None:
    """The encode stage's progress moves by batch (at most batch_size texts), not by window."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from miracl_eval.encoders.encode import encode_corpus_shard
    from miracl_eval.encoders.registry import get_family
    from tests.helpers import sample_passages

    seen: list[int] = []
    real = Progress.update
    monkeypatch.setattr(Progress, "update", lambda self, n: (seen.append(n), real(self, n))[1])
    texts = sample_passages(per_lang=3)
    corpus = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"docid": [f"d{i}" for i in range(len(texts))], "title": [""] * len(texts),
                             "text": texts, "contents": texts}), corpus)  # fmt: skip
    spec = get_family("dense").resolve(
        {"checkpoint": str(tiny_checkpoints("xlm-r")), "pooling": "mean", "normalize": True}
    )
    outputs = {"dense": tmp_path / "dense.parquet"}
    encode_corpus_shard(corpus, 0, len(texts), outputs, spec, 4, "cpu")
    assert sum(seen) == len(texts) and max(seen) <= 4 and len(seen) >= len(texts) // 4


def test_rerankers_count_by_batch(tiny_checkpoints) -> None:
    from miracl_eval.rerankers import cross_encoder

    seen: list[int] = []
    reranker = cross_encoder.load({"family": "cross-encoder", "checkpoint": str(tiny_checkpoints("cross-encoder")),
                                   "max_length": 64, "sigmoid": False}, device="cpu")  # fmt: skip
    pairs = [(f"query {i}", "a passage " * (i % 7 + 1)) for i in range(23)]
    reranker.score(pairs, 5, seen.append)
    assert sum(seen) == 23 and max(seen) == 5


def test_the_period_is_thirty_seconds() -> None:
    assert progress_module.EVERY == 30.0


def test_set_counts_what_a_stage_reads_elsewhere() -> None:
    now = [0.0]
    p = Progress(1000, "index x", "passages", log, clock=lambda: now[0])
    p.started, now[0] = 0.0, 10.0
    p.set(250)
    p.set(250)  # the same count read again adds nothing
    assert p.line() == "index x: 250 of 1,000 passages (25.0 %), 25.0 passages/s, about 30 s left"


FAKE_JAVA = """#!{python}
import os, sys, time

def wait(name):  # the test says when to go on: no step depends on timing
    for _ in range(6000):
        if os.path.exists(name):
            return
        time.sleep(0.01)
    sys.exit("the test never said go")

# IndexCollection's progress line once a minute, here in pieces (a read may end inside a line)
sys.stdout.write("2024-01-01 00:00:00 IndexCollection - 50.00% of files completed, 1,2"); sys.stdout.flush()
wait({first!r})
sys.stdout.write("34 documents indexed\\n"); sys.stdout.flush()
wait({second!r})
sys.stdout.write("2024-01-01 00:01:00 IndexCollection - indexed:        2,468\\n")
"""


def _until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(6000):
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError(f"never: {what}")


def test_lucene_indexing_reports_anserinis_count_while_it_runs(
    tmp_path, monkeypatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Anserini logs its count once a minute: the index job's progress lines (at least every period) carry it,
    with the rate and the time left; a count cut between two reads is read whole. The fake Anserini waits for
    the test at each step, so the read that ends inside the line always happens."""
    import os
    import threading

    from miracl_eval.lucene import anserini

    first, second = tmp_path / "first", tmp_path / "second"
    java = tmp_path / "java"
    java.write_text(FAKE_JAVA.format(python=sys.executable, first=str(first), second=str(second)))
    java.chmod(0o755)
    reads: list[bytes] = []
    real_pread = os.pread

    def pread(fd: int, n: int, offset: int) -> bytes:
        data = real_pread(fd, n, offset)
        reads.append(data)
        return data

    monkeypatch.setattr(anserini, "java_executable", lambda: str(java))
    monkeypatch.setattr(anserini, "POLL_SECONDS", 0.02)
    monkeypatch.setattr(anserini.os, "pread", pread)
    monkeypatch.setattr(progress_module, "EVERY", 0.05)

    def write(folder) -> int:
        (folder / "part-000.jsonl").write_text("")
        return 2468

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"index {tmp_path / 'index'}: ")]

    failed: list[BaseException] = []

    def run() -> None:
        try:
            anserini.build_index(tmp_path / "index", write, lambda i, o: [], None, "1g")
        except BaseException as err:  # noqa: BLE001 - reported by the test
            failed.append(err)

    with caplog.at_level(logging.INFO, logger=anserini.log.name):
        job = threading.Thread(target=run)
        job.start()
        _until(lambda: any(r.endswith(b"1,2") for r in reads), "a read ending inside the count")
        first.touch()
        _until(lambda: any("1,234 of 2,468" in line for line in lines()), "a progress line with the count")
        second.touch()
        job.join(60)
    assert not failed and not job.is_alive()
    counts = {line.split(": ")[1].split(" of ")[0] for line in lines()}
    assert counts <= {"0", "1,234", "2,468"}, lines()  # never the cut count (2 or 34)
    assert any("1,234 of 2,468 passages (50.0 %)" in line and "passages/s, about" in line for line in lines())
    assert (tmp_path / "index").is_dir()
