"""Config validation: defaults, and errors that name the key."""

from __future__ import annotations

import pytest
import yaml
from conftest import REPO, SAMPLE

from miracl_eval.config import load_config, validate
from miracl_eval.errors import ConfigError


def test_shipped_configs_are_valid() -> None:
    full = load_config(REPO / "config.yaml")
    assert len(full["languages"]) == 18 and full["split"] == "dev" and "source" not in full
    assert full["title_join"] == "{title} {text}" and full["bm25"] == {"k1": 0.9, "b": 0.4, "thai": "auto"}
    sample = load_config(SAMPLE / "miracl.yaml")
    assert sample["source"]["corpus"] == "sample/miracl/{lang}/corpus.jsonl"


@pytest.mark.parametrize(
    ("config", "key", "words"),
    [
        ({"languages": "sw"}, "languages", "is not of type 'array'"),
        ({"languages": ["sw"], "bm25": {"k1": "high"}}, "bm25.k1", "is not of type 'number'"),
        ({"languages": ["sw"], "hits": 0}, "hits", "minimum"),
        ({"languages": ["sw"], "methods": ["bm26"]}, "methods.0", "is not one of"),
        ({"languages": ["sw"], "colour": 1}, "(top level)", "'colour' was unexpected"),
        ({"languages": ["sw"], "source": {"corpus": "c"}}, "source.topics", "is required"),
        ({}, "languages", "is required"),
        ({"languages": ["sw"], "fusion": {"sparse": "x"}}, "fusion.sparse", "is not of type 'number'"),
    ],
)
def test_errors_name_the_key(config: dict, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate(config)
    assert err.value.key == key
    assert f"config key '{key}'" in str(err.value) and words in str(err.value)


def test_unknown_language_lists_the_valid_ones() -> None:
    with pytest.raises(ConfigError) as err:
        validate({"languages": ["sw", "xx"]})
    assert err.value.key == "languages"
    assert "'xx'" in str(err.value) and "ar, bn, en" in str(err.value) and "yo" in str(err.value)


def test_local_sources_need_a_placeholder_for_several_languages() -> None:
    with pytest.raises(ConfigError, match="source.topics"):
        validate({"languages": ["sw", "yo"], "source": {"corpus": "c/{lang}", "topics": "t.tsv", "qrels": "q/{lang}"}})


def test_title_join_must_use_both_fields() -> None:
    with pytest.raises(ConfigError, match="title_join"):
        validate({"languages": ["sw"], "title_join": "{title}"})


def test_invalid_yaml_names_the_file(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("languages: [sw\n")
    with pytest.raises(ConfigError, match=str(path)):
        load_config(path)


def test_messirve_defaults() -> None:
    cfg = validate({"dataset": "messirve", "languages": ["full", "ar"]})
    assert cfg["split"] == "test" and cfg["title_join"] == "{title}. {text}"
    assert yaml.safe_dump(cfg)  # plain data, serialisable
