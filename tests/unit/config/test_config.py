"""Config validation: defaults, and errors that name the key."""

from __future__ import annotations

import pytest
import yaml

from miracl_eval.config.validate import validate
from miracl_eval.errors import ConfigError
from tests.helpers import REPO, SAMPLE, load_config


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
        ({"languages": ["sw"], "methods": ["bm26"]}, "methods.0", "unknown method 'bm26'"),
        ({"languages": ["sw"], "colour": 1}, "colour", "is not a known setting"),
        ({"languages": ["sw"], "source": {"corpus": "c"}}, "source.topics", "is required"),
        ({}, "languages", "is required"),
        ({"languages": ["sw"], "fusion": {"sparse": 0.3}}, "fusion", "models: {bge-m3: {weights:"),
        ({"languages": ["sw"], "model": "BAAI/bge-m3"}, "model", "models: {bge-m3: {checkpoint:"),
        ({"languages": ["sw"], "models": {"bge-m3": {}}, "methods": ["dense"]}, "methods.0", "'bge-m3/dense'"),
        ({"languages": ["sw"], "models": {"me5-largish": {}}}, "models.me5-largish.family", "presets: bge-m3, mdpr"),
        (
            {"languages": ["sw"], "models": {"me5-large": {}}, "methods": ["me5-large/sparse"]},
            "methods.0",
            "has no method 'sparse' (it has: me5-large/dense)",
        ),
        (
            {"languages": ["sw"], "models": {"m": {"family": "dense", "checkpoint": "x", "pooling": "median"}}},
            "models.m.pooling",
            "is not one of ['cls', 'mean', 'last', 'lasttoken', 'max', 'mean_sqrt_len_tokens', 'weightedmean', None]",
        ),
        (
            {"languages": ["sw"], "models": {"m": {"family": "sparse", "checkpoint": "x"}}},
            "models.m.family",
            "unknown family 'sparse'; valid: bge-m3, dense, openai, splade",
        ),
        (
            {"languages": ["sw"], "models": {"m": {"family": "dense", "checkpoint": "x", "query_template": "Q: "}}},
            "models.m.query_template",
            "must contain '{query}'",
        ),
        (
            {"languages": ["sw"], "models": {"me5-large": {"quantization": {}}}},
            "models.me5-large.quantization",
            "is not a known setting",
        ),
        (
            {"languages": ["sw"], "methods": ["bm25", "h"], "hybrids": {"h": {"systems": ["bm25", "x/dense"]}}},
            "hybrids.h.systems.1",
            "'x/dense' is not in `methods`",
        ),
        (
            {
                "languages": ["sw"],
                "models": {"bge-m3": {}},
                "methods": ["bm25", "bge-m3/dense", "h"],
                "hybrids": {"h": {"systems": ["bm25", "bge-m3/dense"], "method": "mix"}},
            },
            "hybrids.h.method",
            "is not one of",
        ),
        (
            {"languages": ["sw"], "models": {"bm25": {"family": "dense", "checkpoint": "x"}}},
            "models.bm25",
            "not 'bm25'",
        ),
        (
            {
                "languages": ["sw"],
                "models": {"m": {"checkpoint": "resources/models/tiny-bge-m3", "revision": "v2", "family": "bge-m3"}},
            },
            "models.m.revision",
            "the checkpoint 'resources/models/tiny-bge-m3' is a local folder",
        ),
        (
            {"languages": ["sw"], "models": {"openai-3-small": {"revision": "v2"}}},
            "models.openai-3-small.revision",
            "is not a known setting",  # an API's model: no hub revision
        ),
    ],
)
def test_errors_name_the_key(config: dict, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate(config)
    assert err.value.key == key
    assert f"config key '{key}'" in str(err.value) and words in str(err.value)


def test_nested_command_line_values_are_converted_where_the_schema_wants_numbers() -> None:
    """Snakemake hands nested --config values over as strings (YAML BaseLoader)."""
    cfg = validate(
        {
            "languages": ["sw"],
            "bm25": {"k1": "1.2", "b": "0.75"},
            "hits": "100",
            "models": {
                "me5-large": {"query_max_length": "128", "normalize": "false"},
                "bge-m3": {"weights": {"sparse": "0.5"}},
            },
            "dense_index": {"gpu": "False"},
        }
    )
    assert cfg["bm25"]["k1"] == 1.2 and cfg["bm25"]["b"] == 0.75 and cfg["hits"] == 100
    assert cfg["models"]["me5-large"]["query_max_length"] == 128 and cfg["models"]["me5-large"]["normalize"] is False
    assert cfg["models"]["bge-m3"]["weights"] == {"dense": 1.0, "sparse": 0.5, "multivec": 1.0}
    assert cfg["dense_index"]["gpu"] is False
    # strings stay strings where the schema wants a string, and a bad number keeps the error naming the key
    assert (
        validate({"languages": ["sw"], "models": {"m": {"family": "dense", "checkpoint": "123"}}})["models"]["m"][
            "checkpoint"
        ]
        == "123"
    )
    with pytest.raises(ConfigError, match="models.me5-large.query_max_length"):
        validate({"languages": ["sw"], "models": {"me5-large": {"query_max_length": "12x"}}})


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


def test_a_local_checkpoint_folder_must_hold_config_weights_and_tokenizer(tmp_path) -> None:
    folder = tmp_path / "my-e5"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")
    spec = {"family": "dense", "checkpoint": str(folder), "pooling": "mean", "normalize": True}
    cfg = {"languages": ["sw"], "models": {"my-e5": spec}}
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert err.value.key == "models.my-e5.checkpoint"
    assert f"{folder}: missing the tokenizer: tokenizer.json" in str(err.value)
    (folder / "tokenizer.json").write_text("{}")
    (folder / "model.safetensors").unlink()
    with pytest.raises(ConfigError, match="missing the model weights: model.safetensors"):
        validate(cfg)
    (folder / "model.safetensors").write_bytes(b"")
    assert validate(cfg)["models"]["my-e5"]["checkpoint"] == str(folder)


def test_the_old_auto_messirve_release_says_what_to_write() -> None:
    with pytest.raises(ConfigError, match=r"'hub\.messirve_version': 'auto' is no longer a value: write latest"):
        validate({"dataset": "messirve", "languages": ["ar"], "hub": {"messirve_version": "auto"}})
    assert validate({"dataset": "messirve", "languages": ["ar"]})["hub"]["messirve_version"] == "v1.0"
    assert validate({"dataset": "messirve", "languages": ["ar"], "hub": {"messirve_version": "latest"}})


def test_whole_numbers_written_as_floats_are_integers() -> None:
    """JSON schema counts 128.0 as an integer; it is converted, so that it can slice and count (YAML's 1000.0,
    --config's '1e3'); 2.5 stays an error naming the key."""
    cfg = validate({"languages": ["sw"], "hits": 1000.0, "threads": "2.0", "encoder": {"batch_size": "1e2"}})
    assert (cfg["hits"], cfg["threads"], cfg["encoder"]["batch_size"]) == (1000, 2, 100)
    assert type(cfg["hits"]) is int
    with pytest.raises(ConfigError, match=r"'hits': 2\.5 is not of type 'integer'"):
        validate({"languages": ["sw"], "hits": 2.5})


@pytest.mark.parametrize(
    ("change", "key", "words"),
    [
        ({"bm25": {"k1": float("nan")}}, "bm25.k1", "nan is not a finite number"),
        ({"bm25": {"k1": "nan"}}, "bm25.k1", "nan is not a finite number"),
        ({"models": {"oa": {"family": "openai", "model": "m", "timeout": "inf"}}}, "models.oa.timeout", "inf is not"),
        ({"title_join": "{title}\ud800{text}"}, "title_join", "unpaired surrogate \\ud800"),
        ({"source": {"corpus": "c\udc00.jsonl", "topics": "t", "qrels": "q"}}, "source.corpus", "unpaired surrogate"),
        ({"methods": ["bm25", "m\ud83d/dense"]}, "methods.1", "unpaired surrogate \\ud83d"),
    ],
)
def test_strings_utf8_cannot_hold_and_numbers_that_are_not_finite_name_their_key(
    change: dict, key: str, words: str
) -> None:
    with pytest.raises(ConfigError) as err:
        validate({"languages": ["sw"], **change})
    assert err.value.key == key and words in err.value.reason
