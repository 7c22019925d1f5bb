"""A dense model's left-out settings read from checkpoints saved by sentence-transformers itself."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from miracl_eval.config.models import resolve_model
from miracl_eval.encoders import dense
from miracl_eval.encoders.registry import encoding_settings
from miracl_eval.errors import ConfigError, InputError
from tests.helpers import sample_passages, sample_queries

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TOL = 1e-5


def _saved(folder: Path, out: Path, pooling: str, normalize: bool, prompts: dict[str, str]):
    """A SentenceTransformer over a tiny checkpoint, saved with its modules and prompts."""
    st_module = pytest.importorskip("sentence_transformers")
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    modules = [Transformer(str(folder), max_seq_length=64), Pooling(32, pooling_mode=pooling)]
    model = st_module.SentenceTransformer(
        modules=modules + ([Normalize()] if normalize else []), device="cpu", prompts=prompts
    )
    model.save(str(out))
    return model


def test_settings_left_out_come_from_the_checkpoint_and_encode_as_sentence_transformers(
    tiny_checkpoints, tmp_path: Path
) -> None:
    folder = tmp_path / "st-e5"
    st = _saved(tiny_checkpoints("xlm-r"), folder, "mean", True, {"query": "query: ", "document": "passage: "})
    spec = resolve_model("mine", {"family": "dense", "checkpoint": str(folder), "query_max_length": 64,
                                  "passage_max_length": 64})  # fmt: skip
    assert (spec["pooling"], spec["normalize"], spec["query_prefix"], spec["passage_prefix"]) == (
        "mean", True, "query: ", "passage: ",
    )  # fmt: skip
    assert spec["from_checkpoint"] == ["pooling", "normalize", "query_prefix", "passage_prefix"]
    ours = dense.load(spec, device="cpu")
    queries, passages = sample_queries(), sample_passages()
    np.testing.assert_allclose(ours.encode(queries, "query", 4).dense, st.encode_query(queries), atol=TOL)
    np.testing.assert_allclose(ours.encode(passages, "passage", 4).dense, st.encode_document(passages), atol=TOL)
    # the encodings' params do not depend on when the settings were read (now, or when loaded)
    later = resolve_model("mine", {"family": "dense", "checkpoint": str(tmp_path / "not-yet"),
                                   "query_max_length": 64, "passage_max_length": 64})  # fmt: skip
    assert {k: v for k, v in encoding_settings(spec).items() if k != "checkpoint"} == {
        k: v for k, v in encoding_settings(later).items() if k != "checkpoint"
    }
    loaded = dense.load({**later, "checkpoint": str(folder)}, device="cpu")
    np.testing.assert_allclose(loaded.encode(queries, "query", 4).dense, st.encode_query(queries), atol=TOL)


def test_explicit_settings_win_and_passage_prompts_count(tiny_checkpoints, tmp_path: Path) -> None:
    """A prompt named passage in the files (no document prompt: sentence-transformers 6 saves an empty one,
    removed here, as in checkpoints saved by earlier releases) is the passage prefix; a setting given wins."""
    import json

    st_module = pytest.importorskip("sentence_transformers")
    folder = tmp_path / "st-cls"
    _saved(tiny_checkpoints("bert"), folder, "cls", False, {"passage": "doc: "})
    config = json.loads((folder / "config_sentence_transformers.json").read_text())
    config["prompts"] = {"passage": "doc: "}
    (folder / "config_sentence_transformers.json").write_text(json.dumps(config))
    st = st_module.SentenceTransformer(str(folder), device="cpu")
    spec = resolve_model(
        "mine", {"family": "dense", "checkpoint": str(folder), "normalize": True, "passage_max_length": 64}
    )  # sentence-transformers' max_seq_length, as saved
    assert (spec["pooling"], spec["normalize"], spec["query_prefix"], spec["passage_prefix"]) == (
        "cls", True, "", "doc: ",
    )  # fmt: skip
    assert spec["from_checkpoint"] == ["pooling", "query_prefix", "passage_prefix", "query_max_length"]
    assert spec["query_max_length"] == 64  # sentence-transformers' max_seq_length (the tokenizer's, as saved)
    # (sentence-transformers 6 fills in an empty document prompt when loading, which encode_document would
    # prefer: the file's passage prompt is asked for by name)
    want = st.encode(sample_passages(), prompt_name="passage", normalize_embeddings=True)
    np.testing.assert_allclose(dense.load(spec, device="cpu").encode(sample_passages(), "passage", 4).dense, want,
                               atol=TOL)  # fmt: skip


def test_without_sentence_transformers_files_the_missing_settings_are_errors(tiny_checkpoints, tmp_path: Path) -> None:
    plain = tiny_checkpoints("bert")
    with pytest.raises(ConfigError, match=r"'models\.mine\.pooling, models\.mine\.normalize': is not set, and the "
                                          r"checkpoint .* has no sentence-transformers files"):  # fmt: skip
        resolve_model("mine", {"family": "dense", "checkpoint": str(plain)})
    spec = resolve_model("mine", {"family": "dense", "checkpoint": str(plain), "pooling": "mean", "normalize": False})
    assert (spec["query_prefix"], spec["passage_prefix"]) == ("", "")  # no prompt in no file: none
    assert (spec["query_max_length"], spec["passage_max_length"]) == (512, 512)  # no file: the default
    assert spec["from_checkpoint"] == ["query_prefix", "passage_prefix", "query_max_length", "passage_max_length"]
    # a checkpoint not there at start-up (fetched or built later): the job says what it lacks
    copy = tmp_path / "later"
    shutil.copytree(plain, copy)
    unresolved = resolve_model("mine", {"family": "dense", "checkpoint": str(tmp_path / "absent")})
    with pytest.raises(
        InputError, match=r"later: pooling, normalize not set in the config, .* no sentence-transformers"
    ):
        dense.load({**unresolved, "checkpoint": str(copy)}, device="cpu")
