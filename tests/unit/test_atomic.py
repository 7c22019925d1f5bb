"""Atomic outputs: what a killed stage left for an output is removed by the next stage that writes it."""

from __future__ import annotations

from pathlib import Path

from miracl_eval.atomic import write_text_atomic


def test_next_write_removes_only_the_leftovers_of_its_own_output(tmp_path: Path) -> None:
    (tmp_path / ".run.trec.tmp-0123abcd").write_text("partial")
    (tmp_path / ".run.trec.tmp-scratch-ab_cd123").mkdir()
    (tmp_path / ".run.trec.tmp-scratch-ab_cd123" / "part-000.jsonl").write_text("{}")
    others = [".run.trec.tmp-other.trec", ".run.parquet.tmp-0123abcd", "run.trec.tmp-0123abcd"]
    for name in others:
        (tmp_path / name).write_text("not ours")
    write_text_atomic(tmp_path / "run.trec", "done\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*others, "run.trec"])
    assert (tmp_path / "run.trec").read_text() == "done\n"
