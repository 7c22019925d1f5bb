"""Which rows are zero-shot: the models' trained_on (presets give it with its source) per dataset."""

from __future__ import annotations

from pathlib import Path

import pytest

from miracl_eval.config.models import presets
from miracl_eval.config.systems import training
from miracl_eval.config.validate import validate
from miracl_eval.encoders.registry import encoding_settings
from miracl_eval.errors import ConfigError
from miracl_eval.evaluation.training import write_training
from miracl_eval.tsv import read_tsv

OWN = {"family": "dense", "checkpoint": "/models/mine", "pooling": "mean", "normalize": True}


def _config(dataset: str = "miracl", **models: dict) -> dict:
    languages = ["sw"] if dataset == "miracl" else ["ar"]
    return validate({"dataset": dataset, "languages": languages, "models": models, "methods": ["bm25"]})


def test_every_preset_says_what_it_was_trained_on_and_how_that_is_known() -> None:
    for name, preset in presets().items():
        known = preset.settings.get("trained_on")
        assert isinstance(known, list) or (known is None and "unknown" in preset.training_source), name
        assert len(preset.training_source) > 40, name  # a source, not a word
    assert presets()["openai-3-large"].settings["trained_on"] is None  # OpenAI publishes no training data
    assert presets()["bge-m3"].settings["trained_on"] == ["miracl"]  # MTEB: MIRACL train in its fine-tuning data
    assert presets()["mdpr"].settings["trained_on"] == []
    assert presets()["me5-large-ft-messirve"].settings["trained_on"] == ["miracl", "messirve"]


def test_rows_are_in_domain_zero_shot_or_unknown_per_dataset() -> None:
    models = {"bge-m3": {}, "mdpr": {}, "mine": OWN, "told": {**OWN, "trained_on": []}}
    methods = ["bm25", "bge-m3/dense", "mdpr/dense", "mine/dense", "told/dense", "zs", "mixed", "unsure"]
    hybrids = {
        "zs": {"systems": ["bm25", "mdpr/dense"]},
        "mixed": {"systems": ["mdpr/dense", "bge-m3/dense"]},
        "unsure": {"systems": ["bm25", "mine/dense"]},
    }
    cfg = validate({"languages": ["sw"], "models": models, "methods": methods, "hybrids": hybrids})
    got = {label: (r["training"], r["trained_on"]) for label, r in training(cfg).items()}
    assert got == {
        "bm25": ("zero-shot", "-"),
        "bge-m3/dense": ("in-domain", "miracl"),
        "mdpr/dense": ("zero-shot", "-"),
        "mine/dense": ("unknown", "?"),
        "told/dense": ("zero-shot", "-"),
        "zs": ("zero-shot", "-"),
        "mixed": ("in-domain", "miracl"),
        "unsure": ("unknown", "?"),
    }
    # on MessIRve, BGE-M3 is zero-shot and the MessIRve fine-tune in-domain
    messirve = validate(
        {"dataset": "messirve", "languages": ["ar"], "models": {"bge-m3": {}, "me5-large-ft-messirve": {}},
         "methods": ["bge-m3/dense", "me5-large-ft-messirve/dense"]}
    )  # fmt: skip
    assert {k: v["training"] for k, v in training(messirve).items()} == {
        "bge-m3/dense": "zero-shot",
        "me5-large-ft-messirve/dense": "in-domain",
    }


def test_a_reranked_row_is_in_domain_when_its_first_stage_or_its_reranker_is() -> None:
    rerankers = {"bge-reranker-v2-m3": {}, "mmarco-mminilm": {}, "told": {"family": "cross-encoder",
                 "checkpoint": "x/y", "trained_on": ["miracl"]}}  # fmt: skip
    methods = ["mdpr/dense>>mmarco-mminilm", "bge-m3/dense>>mmarco-mminilm", "mdpr/dense>>bge-reranker-v2-m3",
               "bm25>>told", "bm25>>mmarco-mminilm>>mmarco-mminilm"]  # fmt: skip
    cfg = validate({"languages": ["sw"], "models": {"bge-m3": {}, "mdpr": {}}, "rerankers": rerankers,
                    "methods": methods})  # fmt: skip
    got = {label: (r["training"], r["trained_on"]) for label, r in training(cfg).items()}
    assert got == {
        "mdpr/dense>>mmarco-mminilm": ("zero-shot", "-"),  # both trained on MS MARCO (translated) only
        "bge-m3/dense>>mmarco-mminilm": ("in-domain", "miracl"),
        "mdpr/dense>>bge-reranker-v2-m3": ("unknown", "?"),  # the preset says its training is not stated
        "bm25>>told": ("in-domain", "miracl"),
        "bm25>>mmarco-mminilm>>mmarco-mminilm": ("zero-shot", "-"),
    }


def test_trained_on_changes_no_encoding_and_bad_values_name_the_key() -> None:
    told = _config(mine={**OWN, "trained_on": ["miracl"]})["models"]["mine"]
    plain = _config(mine=OWN)["models"]["mine"]
    assert told["trained_on"] == ["miracl"] and plain["trained_on"] is None
    assert encoding_settings(told) == encoding_settings(plain)  # no re-encoding when it is set
    with pytest.raises(ConfigError, match=r"models\.mine\.trained_on"):
        _config(mine={**OWN, "trained_on": ["msmarco"]})


def test_training_table(tmp_path: Path) -> None:
    out = tmp_path / "t.tsv"
    write_training({"bm25": {"training": "zero-shot", "trained_on": "-"}}, out)
    header, rows = read_tsv(out)
    assert header == ["row", "training", "trained_on"] and rows == [["bm25", "zero-shot", "-"]]
