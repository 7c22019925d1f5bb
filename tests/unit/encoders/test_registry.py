"""The family registry: no torch at import, every setting documented, specs resolved with defaults."""

from __future__ import annotations

import subprocess
import sys

import pytest

from miracl_eval.encoders.registry import COMMON_SETTINGS, FAMILIES, get_family
from miracl_eval.errors import ConfigError
from tests.helpers import REPO


def test_importing_the_registry_imports_neither_torch_nor_transformers():
    code = (
        "import sys; import miracl_eval.encoders.registry as r; r.get_family('dense').resolve({'checkpoint': 'x'}); "
        "print(sorted(m for m in ('torch', 'transformers', 'tokenizers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_families():
    assert list(FAMILIES) == ["bge-m3", "dense", "openai", "splade"]
    assert FAMILIES["bge-m3"].methods == ("dense", "sparse", "multivec", "dense+sparse", "all")
    assert FAMILIES["bge-m3"].outputs == ("dense", "sparse")
    assert (FAMILIES["dense"].methods, FAMILIES["dense"].outputs) == (("dense",), ("dense",))
    assert (FAMILIES["splade"].methods, FAMILIES["splade"].outputs) == (("sparse",), ("sparse",))
    for family in FAMILIES.values():
        assert family.module == f"miracl_eval.encoders.{family.name.replace('-', '_')}"
        assert set(family.settings).isdisjoint(COMMON_SETTINGS)
        for name, prop in family.properties().items():
            assert prop.get("description"), f"{family.name}.{name} has no description"
            assert "default" in prop or name == "checkpoint", f"{family.name}.{name} has no default"
            for sub, subprop in prop.get("properties", {}).items():
                assert subprop.get("description") and "default" in subprop, f"{family.name}.{name}.{sub}"


def test_resolve_fills_every_default():
    assert get_family("bge-m3").resolve({"checkpoint": "BAAI/bge-m3"}) == {
        "family": "bge-m3",
        "checkpoint": "BAAI/bge-m3",
        "query_max_length": 256,
        "passage_max_length": 512,
        "title_join": None,
        "trained_on": None,
        "weights": {"dense": 1.0, "sparse": 0.3, "multivec": 1.0},
        "rerank_depth": 200,
        "quantization": {"scale": 100, "rounding": "ceil"},
        "revision": None,  # the hub's main when fetched
    }
    assert get_family("splade").resolve({"checkpoint": "c", "quantization": {"scale": 10}})["quantization"] == {
        "scale": 10,
        "rounding": "round",
    }
    spec = get_family("dense").resolve({"family": "dense", "checkpoint": "/m", "pooling": "last", "normalize": False})
    assert spec == {
        "family": "dense",
        "checkpoint": "/m",
        "query_max_length": None,  # left to the checkpoint's sentence-transformers files (none: 512)
        "passage_max_length": None,
        "title_join": None,
        "trained_on": None,
        "pooling": "last",
        "normalize": False,
        "query_prefix": None,  # left to the checkpoint's sentence-transformers files (none: no prompt)
        "passage_prefix": None,
        "query_template": None,
        "query_instruction": None,
        "revision": None,
        "view_of": None,  # how the vectors are searched: as encoded
        "dimensions": None,
        "storage": "float32",
        "calibration_passages": 100_000,
        "rescore": 0,
    }


@pytest.mark.parametrize(
    "family,settings,key,message",
    [
        ("dense", {}, "models.m.checkpoint", "is required"),
        ("dense", {"checkpoint": "c", "pooling": "median"}, "models.m.pooling", "'median' is not one of"),
        ("dense", {"checkpoint": "c", "revision": "../main"}, "models.m.revision", "does not match"),
        ("splade", {"checkpoint": "c", "revision": "a..b"}, "models.m.revision", "does not match"),
        ("dense", {"checkpoint": "c", "colour": 1}, "models.m", "'colour' was unexpected"),
        ("dense", {"checkpoint": "c", "query_template": "no placeholder"}, "models.m.query_template", "query"),
        ("splade", {"checkpoint": "c", "passage_max_length": 4}, "models.m.passage_max_length", "less than"),
        ("bge-m3", {"checkpoint": "c", "weights": {"sparse": "x"}}, "models.m.weights.sparse", "not of type"),
        ("bge-m3", {"checkpoint": "c", "title_join": "{title}"}, "models.m.title_join", "text"),
        ("splade", {"family": "dense", "checkpoint": "c"}, "models.m.family", "'splade' was expected"),
    ],
)
def test_resolve_errors_name_the_setting(family, settings, key, message):
    with pytest.raises(ConfigError, match=message) as err:
        get_family(family).resolve(settings, key="models.m")
    assert err.value.key == key


def test_unknown_family_and_mismatched_spec():
    with pytest.raises(ConfigError, match="unknown model family 'colbert'; valid: bge-m3, dense, openai, splade"):
        get_family("colbert")
    with pytest.raises(ValueError, match="'dense'"):
        get_family("splade").load(get_family("dense").resolve({"checkpoint": "c"}))


def test_a_pinned_revision_is_part_of_what_the_encodings_depend_on():
    """A model's own revision is in its encoding jobs' params (with the folder it was fetched into); the
    default (left out, or main) adds nothing, so that encodings made before revisions were a setting stay."""
    from miracl_eval.encoders.registry import encoding_settings

    spec = get_family("dense").resolve({"checkpoint": "org/m", "pooling": "cls", "normalize": True, "revision": "v2"})
    for role in (None, "query", "passage"):
        assert encoding_settings(spec, role)["revision"] == "v2"
        for default in (None, "main"):
            assert "revision" not in encoding_settings({**spec, "revision": default}, role)


def test_models_by_what_they_store_or_the_methods_they_have():
    from miracl_eval.encoders.registry import models_with

    models = {f: {"family": f} for f in ("bge-m3", "dense", "splade", "openai")}
    assert models_with(models, "dense") == ["bge-m3", "dense", "openai"]
    assert models_with(models, "sparse") == ["bge-m3", "splade"]
    assert models_with(models, "multivec") == ["bge-m3"]  # a method, stored by no family
    assert models_with({}, "dense") == []


def test_a_models_vectors_are_searched_as_its_view_says():
    from miracl_eval.encoders.registry import searched_view

    assert searched_view({"family": "dense", "normalize": True}) == {
        "dimensions": None,
        "storage": "float32",
        "normalize": True,
    }
    view = {"family": "dense", "view_of": "me5", "dimensions": 128, "storage": "int8", "normalize": False}
    assert searched_view(view) == {"dimensions": 128, "storage": "int8", "normalize": False}
    # an API model's own dimensions are the size its vectors come at; a view of them truncates and normalises
    assert searched_view({"family": "openai", "dimensions": 512}) == {
        "dimensions": None,
        "storage": "float32",
        "normalize": True,
    }
    assert searched_view({"family": "openai", "view_of": "api", "dimensions": 256})["dimensions"] == 256
