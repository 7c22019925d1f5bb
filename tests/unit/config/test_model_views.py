"""Views of a model's encodings in the config (``view_of``, ``dimensions``, ``storage``): what they take from
their model, what they may change, and that a view is never compared with a source's full vectors."""

from __future__ import annotations

import pytest

from miracl_eval.config.validate import validate
from miracl_eval.encoders.registry import encoding_settings
from miracl_eval.errors import ConfigError
from miracl_eval.evaluation import published
from miracl_eval.inputs.datasets import MIRACL_LANGUAGES


def run(models: dict, methods: list[str], **more: object) -> dict:
    return validate({"languages": ["sw"], "models": models, "methods": methods, **more})


def test_a_view_is_its_model_with_other_search_settings() -> None:
    cfg = run({"me5-large": {}, "me5-large@256": {"view_of": "me5-large", "dimensions": "256", "storage": "int8"}},
              ["me5-large/dense", "me5-large@256/dense"])  # fmt: skip
    base, view = cfg["models"]["me5-large"], cfg["models"]["me5-large@256"]
    assert (view["dimensions"], view["storage"], view["view_of"]) == (256, "int8", "me5-large")  # strings converted
    assert view["checkpoint"] == base["checkpoint"] and view["query_prefix"] == base["query_prefix"]
    for role in ("query", "passage"):  # the same encodings: nothing is encoded for the view
        assert encoding_settings(view, role) == encoding_settings(base, role)


@pytest.mark.parametrize(
    ("models", "key", "message"),
    [
        ({"v": {"view_of": "nope"}}, "models.v.view_of", "'nope' is not under `models`"),
        ({"a": {"view_of": "me5-large"}, "me5-large": {}, "b": {"view_of": "a"}}, "models.b.view_of", "a view itself"),
        (
            {"bge-m3": {}, "v": {"view_of": "bge-m3"}},
            "models.v.view_of",
            "bge-m3 model; views are of dense and openai models",
        ),
        (
            {"me5-large": {}, "v": {"view_of": "me5-large", "pooling": "cls"}},
            "models.v.pooling",
            "shares the encodings",
        ),
        ({"me5-large": {}, "v": {"view_of": "me5-large", "storage": "int4"}}, "models.v.storage", "int4"),
        ({"me5-large": {}, "v": {"view_of": "me5-large", "dimensions": 0}}, "models.v.dimensions", "minimum"),
        ({"me5-large": {}, "v": {"view_of": ["me5-large"]}}, "models.v.view_of", "must be the name of a model"),
        ({"me5-large": {}, "v": {"view_of": 3}}, "models.v.view_of", "must be the name of a model of this run, not 3"),
        ({"me5-large": {}, "v": {"view_of": "me5-large", "dimensions": -8}}, "models.v.dimensions", "minimum"),
        ({"me5-large": {}, "v": {"view_of": "me5-large", "dimensions": 128.5}}, "models.v.dimensions", "not of type"),
        ({"me5-large": {}, "v": {"view_of": "me5-large", "dimensions": "wide"}}, "models.v.dimensions", "not of type"),
        ({"me5-large": {}, "v": {"view_of": "me5-large", "dimensions": True}}, "models.v.dimensions", "not of type"),
        ({"me5-large": {}, "v": {"view_of": "me5-large", "storage": "ubinary"}}, "models.v.storage", "not one of"),
        ({"me5-large": {}, "v": {"view_of": "me5-large", "storage": "int8", "rescore": -1}}, "models.v.rescore",
         "minimum"),
        ({"me5-large": {}, "v": {"view_of": "me5-large", "storage": "binary", "calibration_passages": 1000}},
         "models.v.calibration_passages", "calibrates int8 storage only, and this model's storage is binary"),
        ({"me5-large": {"calibration_passages": 1000}}, "models.me5-large.calibration_passages", "storage is float32"),
        ({"me5-large": {}, "v": {"view_of": "me5-large", "storage": "int8", "calibration_passages": 0}},
         "models.v.calibration_passages", "minimum"),
        ({"oa": {"family": "openai", "model": "text-embedding-3-small", "dimensions": 256},
          "v": {"view_of": "oa", "dimensions": 512}}, "models.v.dimensions",
         "512 is more than the 256 dimensions the API returns for 'oa' (models.oa.dimensions)"),
    ],
)  # fmt: skip
def test_bad_views_name_their_key(models: dict, key: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        run(models, ["bm25"])
    assert err.value.key == key and message in err.value.reason


def test_view_settings_as_a_careful_user_writes_them() -> None:
    """A whole number written as a float (YAML's 128.0, --config's '128.0') is that integer; rescoring more hits
    than the run keeps is sentence-transformers' recipe (rescore_multiplier), and int8 without rescoring is
    plain int8; an API model's view narrower than the API's vectors, or without dimensions, is fine."""
    cfg = run({"me5-large": {}, "a": {"view_of": "me5-large", "dimensions": 128.0},
               "b": {"view_of": "me5-large", "dimensions": "128.0", "storage": "int8", "rescore": "1e3"},
               "c": {"view_of": "me5-large", "storage": "int8", "rescore": 0, "calibration_passages": 10**9},
               "oa": {"family": "openai", "model": "text-embedding-3-small", "dimensions": 256},
               "oa@128": {"view_of": "oa", "dimensions": 128}, "oa@int8": {"view_of": "oa", "storage": "int8"}},
              ["bm25"], hits=100)  # fmt: skip
    models = cfg["models"]
    assert type(models["a"]["dimensions"]) is int and models["a"]["dimensions"] == 128
    assert (models["b"]["dimensions"], models["b"]["rescore"]) == (128, 1000)
    assert (models["c"]["rescore"], models["c"]["calibration_passages"]) == (0, 10**9)  # clamped by the job (logged)
    assert models["oa@128"]["dimensions"] == 128 and models["oa@int8"]["dimensions"] == 256


def test_rescoring_needs_vectors_held_otherwise_than_float32() -> None:
    with pytest.raises(ConfigError, match=r"'models\.v\.rescore'.*float16, int8 or binary"):
        run({"me5-large": {}, "v": {"view_of": "me5-large", "dimensions": 64, "rescore": 100}}, ["v/dense"])
    cfg = run({"me5-large": {}, "v": {"view_of": "me5-large", "storage": "binary", "rescore": 100}}, ["v/dense"])
    assert cfg["models"]["v"]["rescore"] == 100


def test_views_are_searched_exactly_only() -> None:
    with pytest.raises(ConfigError, match=r"'models\.me5-large\.storage'.*exact search only.*hnsw"):
        run({"me5-large": {"storage": "binary"}}, ["me5-large/dense"], dense_index={"type": "hnsw"})


def test_a_view_never_meets_a_published_full_vector_row() -> None:
    cfg = validate({"languages": list(MIRACL_LANGUAGES), "models": {"me5-large": {},
                    "me5-large@256": {"view_of": "me5-large", "dimensions": 256}, "me5-large@int8": {"view_of":
                    "me5-large", "storage": "int8"}}, "methods": ["me5-large/dense", "me5-large@256/dense",
                    "me5-large@int8/dense"]})  # fmt: skip
    ours = {label: dict.fromkeys(MIRACL_LANGUAGES, 0.5) for label in cfg["methods"]}
    rows = published.side_by_side(ours, "miracl", "dev", "nDCG@10", cfg)
    assert {r["method"] for r in rows} == {"me5-large/dense"} and rows
    mE5 = next(r for r in published.load_published() if r.system == "mE5-large" and r.partition == "sw")
    assert "model.dimensions is 256" in str(published.mismatch(mE5, published.row_facts(cfg, "me5-large@256/dense")))
