"""The stage-costs page's tokens and dollars of API models: their ledgers summed, every run and every job,
failed requests too (not the jobs' latest logs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from miracl_eval.encoders.api_ledger import Ledger
from miracl_eval.report.stage_costs import api_spend, stage_costs_html, stage_costs_stage


def test_the_stage_costs_page_sums_every_run_and_job(tmp_path: Path) -> None:
    folder = tmp_path / "ledger"
    Ledger(folder, "corpus-sw-00000-00003", "s", 0.13).record(1, "ok", 160, 20_000, 20_000, 2, 1.0)
    Ledger(folder, "corpus-sw-00000-00003", "s", 0.13).record(7, "bad answer", 10, 100, 0, 0, 1.0)
    Ledger(folder, "queries-sw", "s", 0.13).record(1, "ok", 12, 150, 150, 0, 1.0)
    killed = Ledger(folder, "queries-sw", "s", 0.13)  # a run killed with its request 1 out
    killed.reserve(1, 300)
    spend = api_spend({"o3": folder, "unused": tmp_path / "none"})
    assert spend[0] | {"usd": 0} == {"model": "o3", "jobs": 2, "runs": 4, "requests": 3, "failed": 1, "retries": 2,
                                     "inputs": 172, "tokens": 20_150, "charged": 0, "unended": 1, "usd": 0,
                                     "unreadable": 0}  # fmt: skip
    assert spend[0]["usd"] == pytest.approx(20_450 * 0.13 / 1e6) and spend[1]["requests"] == 0
    page = stage_costs_html([], "Stage costs", spend)
    assert "Embeddings APIs: tokens and dollars" in page and "20,150" in page and "0.0027" in page
    assert "Embeddings APIs" not in stage_costs_html([], "Stage costs")  # no API model: no table


def test_the_stage_writes_the_ledgers_table(tmp_path: Path) -> None:
    Ledger(tmp_path / "ledger", "queries-sw", "s", 0.13).record(1, "ok", 12, 150, 150, 0, 1.0)
    stage_costs_stage(tmp_path / "stats", {}, tmp_path / "costs.tsv", tmp_path / "costs.html",
                      ledgers={"o3": tmp_path / "ledger"})  # fmt: skip
    assert "<td>o3</td>" in (tmp_path / "costs.html").read_text()
