"""The stage-costs page's tokens and dollars of API models, from their encoding jobs' logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from miracl_eval.report.stage_costs import api_spend, stage_costs_html

LINE = (
    "2026-12-03 09:00:00,000 INFO miracl_eval.encoders.openai: embeddings API text-embedding-3-large: {inputs} inputs "
    "({cut} cut to the token limit) in {requests} requests, {tokens} tokens billed, ${usd:.6f} at $0.13 per 1M tokens, "
    "1.0 s (100 inputs/s)\n"
)


def _log(path: Path, **values: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("a job's first line\n" + LINE.format(**values), encoding="utf-8")


def test_api_spend_adds_up_each_models_jobs(tmp_path: Path) -> None:
    logs = tmp_path / "logs" / "miracl"
    _log(
        logs / "encode_corpus_api_dense/o3/sw/00000-00003.log", inputs=160, cut=2, requests=16, tokens=20000, usd=0.0026
    )
    _log(logs / "encode_queries_api_dense/o3/sw.log", inputs=12, cut=0, requests=2, tokens=150, usd=0.0000195)
    _log(logs / "encode_queries_api_dense/other/sw.log", inputs=5, cut=0, requests=1, tokens=50, usd=0.0)
    (logs / "encode_corpus_dense/me5/sw").mkdir(parents=True)  # a local model's jobs: no usage line
    spend = api_spend(logs, ["o3"])
    usd = spend[0].pop("usd")
    assert spend == [{"model": "o3", "jobs": 2, "inputs": 172, "cut": 2, "requests": 18, "tokens": 20150}]
    assert usd == pytest.approx(0.0026 + 0.0000195, abs=2e-6)  # each job's dollars as logged, to 6 decimals
    spend[0]["usd"] = usd
    page = stage_costs_html([], "Stage costs", spend)
    assert "Embeddings APIs: tokens and dollars" in page and "20,150" in page and "0.0026" in page
    assert "Embeddings APIs" not in stage_costs_html([], "Stage costs")  # no API model: no table
