"""The `rerankers` section and `{row}>>{reranker}` rows: presets, resolved specs, and one error naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from miracl_eval.config.rerankers import reranker_presets
from miracl_eval.config.systems import RERANKED, computed_systems, system_facts, systems
from miracl_eval.config.validate import validate
from miracl_eval.errors import ConfigError
from miracl_eval.rerankers.registry import DEFAULT_PROMPT, FAMILIES, scoring_settings

CE = {"family": "cross-encoder", "checkpoint": "/models/my-ce", "max_length": 512}


def _validate(methods: list[str], rerankers: dict | None = None, **extra) -> dict:
    cfg = {"languages": ["sw"], "models": {"bge-m3": {}}, "methods": methods,
           "rerankers": {"bge-reranker-v2-m3": {}, "my-ce": CE} if rerankers is None else rerankers, **extra}  # fmt: skip
    return validate(cfg)


def test_the_issue_example_resolves_presets_and_own_rerankers() -> None:
    cfg = _validate(["bm25", "bge-m3/dense", "bge-m3/dense>>bge-reranker-v2-m3", "bm25>>my-ce"])
    m3 = cfg["rerankers"]["bge-reranker-v2-m3"]
    assert m3 == {"family": "cross-encoder", "checkpoint": "BAAI/bge-reranker-v2-m3", "max_length": 1024,
                  "query_max_length": None, "depth": 100, "batch_size": 64, "title_join": "{title} {text}",
                  "trained_on": None, "revision": None, "sigmoid": False}  # fmt: skip
    assert cfg["rerankers"]["my-ce"]["depth"] == 100 and cfg["rerankers"]["my-ce"]["max_length"] == 512
    rows = {s.label: s for s in systems(cfg)}
    reranked = rows["bge-m3/dense>>bge-reranker-v2-m3"]
    assert (reranked.method, reranked.reranker, reranked.kind) == (RERANKED, "bge-reranker-v2-m3", "reranked")
    assert reranked.first_stage == rows["bge-m3/dense"]
    assert rows["bm25>>my-ce"].first_stage == rows["bm25"]


def test_every_preset_resolves_with_its_source() -> None:
    for name, preset in reranker_presets().items():
        spec = _validate(["bm25"], {name: {}})["rerankers"][name]
        assert spec["family"] in FAMILIES and spec["depth"] == 100, name
        assert len(preset.source) > 80 and len(preset.training_source) > 20, name
    assert reranker_presets()["bge-reranker-v2-gemma"].settings["family"] == "llm"
    gemma = _validate(["bm25"], {"bge-reranker-v2-gemma": {"max_length": "512"}})["rerankers"]["bge-reranker-v2-gemma"]
    assert gemma["max_length"] == 512 and gemma["prompt"] == DEFAULT_PROMPT  # --config values arrive as strings
    assert (gemma["query_instruction"], gemma["passage_instruction"]) == ("A: ", "B: ")


def test_a_first_stage_need_not_be_a_row_and_may_itself_be_reranked() -> None:
    hybrids = {"fused": {"systems": ["bm25", "bge-m3/sparse"]}}
    cfg = _validate(["bm25", "bge-m3/sparse", "bge-m3/dense>>my-ce>>bge-reranker-v2-m3", "fused>>my-ce"],
                    hybrids=hybrids)  # fmt: skip
    assert [s.label for s in systems(cfg)] == ["bm25", "bge-m3/sparse", "bge-m3/dense>>my-ce>>bge-reranker-v2-m3",
                                               "fused>>my-ce"]  # fmt: skip
    assert [s.label for s in computed_systems(cfg)] == [
        "bm25", "bge-m3/sparse", "bge-m3/dense", "bge-m3/dense>>my-ce", "bge-m3/dense>>my-ce>>bge-reranker-v2-m3",
        "fused", "fused>>my-ce",
    ]  # fmt: skip


def test_facts_name_the_reranker_and_the_first_stage() -> None:
    cfg = _validate(["bge-m3/dense>>bge-reranker-v2-m3"])
    facts = system_facts(cfg, "bge-m3/dense>>bge-reranker-v2-m3")
    assert facts["method"] == RERANKED and facts["model"] == "BAAI/bge-reranker-v2-m3"
    assert (facts["reranker.depth"], facts["reranker.max_length"]) == (100, 1024)
    assert (facts["first_stage.method"], facts["first_stage.model"]) == ("dense", "BAAI/bge-m3")


def test_what_the_scores_depend_on_leaves_out_depth_batch_size_and_training() -> None:
    spec = _validate(["bm25"])["rerankers"]["my-ce"]
    assert scoring_settings(spec) == scoring_settings({**spec, "depth": 5, "batch_size": 3, "trained_on": []})
    assert scoring_settings(spec) != scoring_settings({**spec, "max_length": 256})


def test_a_pinned_revision_is_part_of_what_the_scores_depend_on() -> None:
    """A reranker's own revision changes its scores' params; the default (left out or main) adds nothing to
    them, so that the scores of a reranker fetched before revisions were a setting are not computed again."""
    spec = _validate(["bm25"], {"r": {"family": "cross-encoder", "checkpoint": "org/ce", "revision": "v2"}})[
        "rerankers"
    ]["r"]
    assert spec["revision"] == "v2" and scoring_settings(spec)["revision"] == "v2"
    for default in (None, "main"):
        assert "revision" not in scoring_settings({**spec, "revision": default})


@pytest.mark.parametrize(
    ("methods", "rerankers", "key", "message"),
    [
        (["bm25>>nope"], None, "methods.0", "reranks with 'nope', which is not under `rerankers`"),
        (["bm25", "m3/dense>>my-ce"], None, "methods.1",
         "the first stage of 'm3/dense>>my-ce' cannot be computed: 'm3/dense' names the model 'm3'"),
        (["bge-m3/dense2>>my-ce"], None, "methods.0", "cannot be computed: the bge-m3 family of 'bge-m3' has no method"),
        (["fusedx>>my-ce"], None, "methods.0", "cannot be computed: unknown method 'fusedx'"),
        (["bm25>>my-ce"], {"my-ce": {**CE, "depth": 0}}, "rerankers.my-ce.depth", "0 is less than the minimum of 1"),
        (["bm25>>my-ce"], {"my-ce": {**CE, "query_max_length": 512}}, "rerankers.my-ce.query_max_length",
         "leaves no token of max_length"),
        (["bm25>>x"], {"x": {"checkpoint": "/m"}}, "rerankers.x.family", "is required ('x' is not a preset"),
        (["bm25>>x"], {"x": {"family": "colbert", "checkpoint": "/m"}}, "rerankers.x.family", "unknown family"),
        (["bm25>>x"], {"x": {"family": "llm"}}, "rerankers.x.checkpoint", "is required"),
        (["bm25>>x"], {"x": {**CE, "prompt": "p"}}, "rerankers.x.prompt", "is not a known setting"),
        (["bm25>>a/b"], {"a/b": CE}, "rerankers.a/b", "a reranker name is letters"),
        (["bm25>>x"], {"x": {**CE, "revision": "v2"}}, "rerankers.x.revision",
         "names a revision of a Hugging Face hub model, and the checkpoint '/models/my-ce' is a local folder"),
        (["bm25>>x"], {"x": {**CE, "checkpoint": "org/ce", "revision": "../x"}}, "rerankers.x.revision",
         "does not match"),
    ],
)  # fmt: skip
def test_bad_rerankers_and_rows_name_the_key(methods, rerankers, key, message) -> None:
    with pytest.raises(ConfigError) as err:
        _validate(methods, rerankers)
    assert err.value.key == key and message in err.value.reason, err.value


def test_a_checkpoint_without_the_family_head_is_refused_at_start_up(tiny_checkpoints, tmp_path: Path) -> None:
    encoder = tiny_checkpoints("xlm-r")  # a bare encoder: no classification head
    with pytest.raises(ConfigError, match="no sequence-classification head") as err:
        _validate(["bm25>>x"], {"x": {"family": "cross-encoder", "checkpoint": str(encoder)}})
    assert err.value.key == "rerankers.x.checkpoint"
    with pytest.raises(ConfigError, match="not a causal language model") as err:
        _validate(["bm25>>x"], {"x": {"family": "llm", "checkpoint": str(tiny_checkpoints("cross-encoder"))}})
    assert err.value.key == "rerankers.x.checkpoint"
    folder = tmp_path / "empty"
    folder.mkdir()
    with pytest.raises(ConfigError, match="missing config.json"):
        _validate(["bm25>>x"], {"x": {"family": "cross-encoder", "checkpoint": str(folder)}})
    ok = {"family": "cross-encoder", "checkpoint": str(tiny_checkpoints("cross-encoder"))}
    assert _validate(["bm25>>x"], {"x": ok})["rerankers"]["x"]["checkpoint"] == ok["checkpoint"]
