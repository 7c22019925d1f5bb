"""The stage runner: every error of a stage reaches the job's log, and the exit is non-zero."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from miracl_eval.errors import InputError
from miracl_eval.jobs.runner import run_stage

pytestmark = pytest.mark.usefixtures("restore_logging")


def _job(log: Path) -> SimpleNamespace:
    return SimpleNamespace(log=[str(log)], rule="preprocess_corpus", wildcards={"corpus": "yo"})


def _fail(err: Exception):
    def work() -> None:
        raise err

    return work


def test_known_error_is_one_line_in_the_log(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    with pytest.raises(SystemExit) as exit_:
        run_stage(_job(log), _fail(InputError("c.jsonl", "malformed JSON", 5)))
    assert exit_.value.code == 1
    assert log.read_text().splitlines()[-1].endswith("ERROR miracl_eval.jobs.runner: c.jsonl, line 5: malformed JSON")
    assert "Traceback" not in log.read_text()


def test_unexpected_error_reaches_the_log_with_its_traceback(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    err = UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
    with pytest.raises(SystemExit) as exit_:
        run_stage(_job(log), _fail(err))
    assert exit_.value.code == 1
    text = log.read_text()
    assert "ERROR miracl_eval.jobs.runner: unexpected error in rule preprocess_corpus" in text
    assert "Traceback (most recent call last)" in text and "UnicodeEncodeError" in text and "in work" in text
