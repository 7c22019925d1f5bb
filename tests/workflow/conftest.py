"""The real Snakemake runs that several workflow test modules share: each is made once per session; a module
that builds more in it (a report, the published table) only adds outputs, and dry runs against it plan from
what is there."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests import helpers
from tests.helpers import BM25_LANGS, SAMPLE, m3_config, sample_config, snakemake, write_config


@pytest.fixture(scope="session", autouse=True)
def checkpoint_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkpoints runs would build, built once per test process and put into each run's working
    directory (:func:`tests.helpers.seed_checkpoints`)."""
    helpers.CHECKPOINT_CACHE = tmp_path_factory.mktemp("checkpoints")
    return helpers.CHECKPOINT_CACHE


@pytest.fixture(scope="session")
def sample_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """BM25 on the sample (BM25_LANGS), with relative source paths, in a fresh working directory."""
    work = tmp_path_factory.mktemp("work")
    shutil.copytree(SAMPLE / "miracl", work / "data")
    cfg = sample_config(BM25_LANGS, threads=1, methods=["bm25"])
    cfg["source"] = {
        "corpus": "data/{lang}/corpus.jsonl",
        "topics": "data/{lang}/topics.tsv",
        "qrels": "data/{lang}/qrels.tsv",
    }
    snakemake(work, write_config(work, cfg), "results/miracl_ndcg.tsv")
    return work


@pytest.fixture(scope="session")
def m3_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every BGE-M3 method on the tiny checkpoint (``m3_config()``): the tables."""
    work = tmp_path_factory.mktemp("m3")
    snakemake(work, write_config(work, m3_config()), "results/miracl_ndcg.tsv", seed=False)  # its model built
    return work


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of this tier is a workflow test (``-m "not workflow"`` leaves the tier out)."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.workflow)
