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
    }
    assert get_family("splade").resolve({"checkpoint": "c", "quantization": {"scale": 10}})["quantization"] == {
        "scale": 10,
        "rounding": "round",
    }
    spec = get_family("dense").resolve({"family": "dense", "checkpoint": "/m", "pooling": "last", "normalize": False})
    assert spec == {
        "family": "dense",
        "checkpoint": "/m",
        "query_max_length": 512,
        "passage_max_length": 512,
        "title_join": None,
        "trained_on": None,
        "pooling": "last",
        "normalize": False,
        "query_prefix": None,  # left to the checkpoint's sentence-transformers files (none: no prompt)
        "passage_prefix": None,
        "query_template": None,
        "query_instruction": None,
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
        ("dense", {"checkpoint": "c", "pooling": "max"}, "models.m.pooling", "'max' is not one of"),
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
