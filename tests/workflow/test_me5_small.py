"""The me5-small checkpoint rule builds the same files as the converter."""

from __future__ import annotations

import shutil

from tests.unit.offline.test_me5_small import _digests


def test_rule_builds_the_checkpoint(me5_small, tmp_path):
    from tests.helpers import sample_config, snakemake, write_config

    target = "resources/models/me5-small"
    snakemake(
        tmp_path, write_config(tmp_path, sample_config(["yo"], methods=["bm25"])), target, timeout=600, seed=False
    )
    try:
        assert _digests(tmp_path / target) == _digests(me5_small)
        assert "converted" in (tmp_path / "logs/models/me5-small.log").read_text(encoding="utf-8")
        assert (tmp_path / "stats/models/me5-small.tsv").read_text(encoding="utf-8").startswith("s\th:m:s")
    finally:
        shutil.rmtree(tmp_path / target)
