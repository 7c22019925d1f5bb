"""What the rows of a run use (rows and the first stages of reranked rows): its models, hybrids, rerankers and
first stages, and the hub checkpoints that the fetch_model rule fetches for them, a folder per revision."""

from __future__ import annotations

from pathlib import Path

from miracl_eval.config.models import hub_checkpoints, hub_folder
from miracl_eval.config.systems import first_stages, used_hybrids, used_models, used_rerankers
from miracl_eval.config.validate import validate

COMMIT = "0123456789abcdef0123456789abcdef01234567"
CONFIG = {
    "languages": ["sw"],
    "models": {
        "me5-small": {},  # a preset: a hub checkpoint at main
        "me5-large": {"revision": COMMIT},  # reranked only: a first stage's model is used
        "tiny": {"family": "bge-m3", "checkpoint": "resources/models/tiny-bge-m3"},  # built by the workflow
        "idle": {"family": "bge-m3", "checkpoint": "resources/models/tiny-bge-m3"},  # no row: no jobs
        "openai-3-small": {},  # behind an API: nothing fetched
    },
    "rerankers": {
        "ce": {"family": "cross-encoder", "checkpoint": "resources/models/tiny-cross-encoder"},
        "bge-reranker-v2-m3": {},
        "unused": {"family": "cross-encoder", "checkpoint": "resources/models/tiny-cross-encoder"},
    },
    "hybrids": {
        "bm25+me5": {"systems": ["bm25", "me5-small/dense"], "method": "rrf"},
        "spare": {"systems": ["bm25", "tiny/dense"], "method": "rrf"},
    },
    "methods": [
        "bm25",
        "me5-small/dense",
        "tiny/dense",
        "openai-3-small/dense",
        "bm25+me5",
        "bm25>>ce",
        "tiny/dense>>bge-reranker-v2-m3",
        "me5-large/dense>>ce",
    ],
}


def test_what_the_rows_use_in_order() -> None:
    config = validate(CONFIG)
    models = used_models(config)
    assert list(models) == ["me5-small", "me5-large", "tiny", "openai-3-small"]  # the config's order
    assert models["tiny"] is config["models"]["tiny"]
    assert used_hybrids(config) == {"bm25+me5": config["hybrids"]["bm25+me5"]}
    assert list(used_rerankers(config)) == ["ce", "bge-reranker-v2-m3"]  # each once, as the rows first use them
    assert first_stages(config) == ["bm25", "tiny/dense", "me5-large/dense"]


def test_hub_checkpoints_are_fetched_a_folder_per_revision(tmp_path: Path) -> None:
    config = validate(CONFIG)
    models, rerankers = used_models(config), used_rerankers(config)
    assert hub_folder(models["me5-small"]) == "intfloat--multilingual-e5-small"
    assert hub_folder(models["me5-large"]) == f"intfloat--multilingual-e5-large@{COMMIT}"
    assert hub_folder(models["tiny"]) is None  # built by the workflow, loaded where it is built
    assert hub_folder({"checkpoint": str(tmp_path)}) is None  # a local folder
    assert hub_checkpoints(models, rerankers) == {
        "intfloat--multilingual-e5-small": ("intfloat/multilingual-e5-small", "main"),
        "intfloat--multilingual-e5-large@" + COMMIT: ("intfloat/multilingual-e5-large", COMMIT),
        "BAAI--bge-reranker-v2-m3": ("BAAI/bge-reranker-v2-m3", "main"),
    }
    # an API's model name is never fetched, whatever it looks like
    assert hub_checkpoints({"api": {"family": "openai", "checkpoint": "org/model"}}, {}) == {}
    # a model and a reranker of one checkpoint share its folder
    same = {"checkpoint": "org/model"}
    assert hub_checkpoints({"m": {"family": "dense", **same}}, {"r": same}) == {"org--model": ("org/model", "main")}
