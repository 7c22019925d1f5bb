"""The configs the documentation's guides show are files that run: each is run here as the guide says."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from miracl_eval.evaluation.published import read_results_table
from tests.helpers import SAMPLE, planned_jobs, snakemake, write_config


def _in(work: Path, name: str) -> Path:
    """A sample config in a working directory holding the sample data, as in the repository's root."""
    shutil.copytree(SAMPLE / "miracl", work / "sample" / "miracl", dirs_exist_ok=True)
    shutil.copy(SAMPLE / name, work / "sample" / name)
    return work / "sample" / name


def test_own_model_recipe_with_a_real_checkpoint_equals_the_preset_it_spells_out(tmp_path: Path) -> None:
    """sample/your_model.yaml (the "evaluate your own model" recipe; tests/workflow/test_recipe.py runs it as
    shipped) with a real checkpoint put in, as the guide says: its model's settings are multilingual-e5's written
    out by hand, so pointed at multilingual-e5-small it scores exactly as the shipped me5-small preset does."""
    config = _in(tmp_path, "your_model.yaml")
    cfg = yaml.safe_load(config.read_text(encoding="utf-8"))
    cfg["languages"] = ["sw"]  # the recipe's 18 cut to one, for time
    cfg["models"]["my-model"]["checkpoint"] = "resources/models/me5-small"
    cfg["models"]["me5-small"] = {"checkpoint": "resources/models/me5-small"}
    del cfg["rerankers"]  # the reranker is the recipe's own test's
    cfg["methods"] = ["bm25", "my-model/dense", "me5-small/dense"]
    snakemake(tmp_path, write_config(tmp_path, cfg, "mine.yaml"), "results/miracl-hn_ndcg.tsv")
    ours = read_results_table(tmp_path / "results/miracl-hn_ndcg.tsv")
    assert list(ours) == ["bm25", "my-model/dense", "me5-small/dense"]
    assert ours["my-model/dense"] == ours["me5-small/dense"]
    assert all(0 < v <= 1 for v in ours["my-model/dense"].values())


def test_hard_negatives_config_plans_every_language_from_the_hub(tmp_path: Path) -> None:
    """sample/miracl-hn.yaml (the MIRACL hard-negatives guide) validates and plans its downloads from MTEB's
    repository for every language (a dry run: nothing is downloaded)."""
    config = _in(tmp_path, "miracl-hn.yaml")
    jobs = planned_jobs(snakemake(tmp_path, config, "results/miracl-hn_ndcg.tsv", args=("-n",)))
    languages = yaml.safe_load(config.read_text(encoding="utf-8"))["languages"]
    assert len(languages) == 18
    assert jobs["download_corpus"] == jobs["download_topics"] == 18
