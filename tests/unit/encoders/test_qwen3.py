"""Qwen3-Embedding's settings (presets qwen3-embedding-*) on a tiny random Qwen3 built offline: our vectors
equal sentence-transformers' encode_query / encode_document with the model's query prompt, whichever side
sentence-transformers pads, and the task instruction comes from the dataset unless the config gives one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from miracl_eval.config.models import presets
from miracl_eval.config.validate import validate
from miracl_eval.encoders import dense
from miracl_eval.encoders.registry import encoding_settings, get_family
from miracl_eval.errors import ConfigError, InputError
from miracl_eval.inputs.datasets import WIKIPEDIA_QA_INSTRUCTION
from tests.helpers import sample_passages, sample_queries

#: measured (benchmarks-style sweep: our batch sizes 1, 3, 8 x theirs 1, 5, 16, both padding sides): at most
#: 1.8e-7; the dense tolerance of tests.helpers.BATCH_TOL (2e-6) would do, the issue asks for 1e-5
TOL = 1e-5


def qwen3_spec(checkpoint: Path, instruction: str = WIKIPEDIA_QA_INSTRUCTION) -> dict:
    settings = dict(presets()["qwen3-embedding-0.6b"].settings)
    settings.pop("trained_on")
    settings.pop("family")
    return get_family("dense").resolve({**settings, "checkpoint": str(checkpoint), "query_instruction": instruction,
                                        "query_max_length": 256, "passage_max_length": 256})  # fmt: skip


@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_vectors_equal_sentence_transformers_with_the_query_prompt(tiny_checkpoints, padding_side: str) -> None:
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    path = tiny_checkpoints("qwen3")
    ours = dense.load(qwen3_spec(path), device="cpu", dtype="float32")
    assert ours.suffix_ids == ()  # the tokenizer ends every text with <|endoftext|> itself
    transformer = Transformer(str(path), max_seq_length=256)
    transformer.tokenizer.padding_side = padding_side
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="lasttoken")
    model = SentenceTransformer(
        modules=[transformer, pooling, Normalize()],
        device="cpu",
        prompts={"query": f"Instruct: {WIKIPEDIA_QA_INSTRUCTION}\nQuery:", "document": ""},
    )
    queries, passages = sample_queries(), sample_passages(per_lang=3)
    # short texts so that neither side truncates (the cut differs: we keep the EOS, sentence-transformers cuts it)
    passages = [p[:200] for p in passages]
    assert max(ours.tokenize(ours.prepare(queries + passages, "query"), 256)[1]) < 256  # nothing is cut
    want_q = model.encode_query(queries, batch_size=5, convert_to_numpy=True)
    want_p = model.encode_document(passages, batch_size=5, convert_to_numpy=True)
    got_q = ours.encode(queries, "query", batch_size=3).dense
    got_p = ours.encode(passages, "passage", batch_size=4).dense
    np.testing.assert_allclose(got_q, want_q, atol=TOL, rtol=0)
    np.testing.assert_allclose(got_p, want_p, atol=TOL, rtol=0)
    assert ours.prepare(["¿dónde?"], "query") == [f"Instruct: {WIKIPEDIA_QA_INSTRUCTION}\nQuery:¿dónde?"]
    assert ours.prepare(["texto"], "passage") == ["texto"]  # no instruction on passages


def test_the_instruction_is_the_datasets_unless_the_config_gives_one() -> None:
    def spec(dataset: str, **given: object) -> dict:
        cfg = validate({"dataset": dataset, "languages": ["es"], "models": {"qwen3-embedding-8b": given},
                        "methods": ["qwen3-embedding-8b/dense"]})  # fmt: skip
        return cfg["models"]["qwen3-embedding-8b"]

    assert spec("miracl")["query_instruction"] == WIKIPEDIA_QA_INSTRUCTION
    assert spec("messirve")["query_instruction"] == WIKIPEDIA_QA_INSTRUCTION
    own = spec("miracl", query_instruction="Busca pasajes que respondan la pregunta")
    assert own["query_instruction"] == "Busca pasajes que respondan la pregunta"
    # a new instruction re-encodes the queries, never the passages
    base = spec("miracl")
    assert encoding_settings(own, "passage") == encoding_settings(base, "passage")
    assert encoding_settings(own, "query") != encoding_settings(base, "query")
    with pytest.raises(ConfigError, match=r"models\.me5-large\.query_instruction.*no \{task\}"):
        validate({"languages": ["es"], "models": {"me5-large": {"query_instruction": "x"}}})


def test_the_presets_and_a_model_that_needs_its_own_code_are_refused(tmp_path: Path, tiny_checkpoints) -> None:
    for size, checkpoint in (("0.6b", "Qwen/Qwen3-Embedding-0.6B"), ("4b", "Qwen/Qwen3-Embedding-4B"),
                             ("8b", "Qwen/Qwen3-Embedding-8B")):  # fmt: skip
        settings = presets()[f"qwen3-embedding-{size}"].settings
        assert settings["checkpoint"] == checkpoint and settings["pooling"] == "last" and settings["normalize"]
        assert settings["query_template"] == "Instruct: {task}\nQuery:{query}" and settings["passage_prefix"] == ""
    for refused in ("jina-embeddings-v3", "gte-qwen2-7b-instruct"):
        with pytest.raises(ConfigError, match=rf"models\.{refused}': .*its own code.*never runs"):
            validate({"languages": ["es"], "models": {refused: {}}})
    gte = validate({"languages": ["es"], "models": {"gte-qwen2-1.5b-instruct": {}}, "methods": ["bm25"]})
    spec = gte["models"]["gte-qwen2-1.5b-instruct"]
    assert (spec["pooling"], spec["query_template"]) == ("last", "Instruct: {task}\nQuery: {query}")
    assert spec["query_instruction"] == WIKIPEDIA_QA_INSTRUCTION
    import json
    import shutil

    copy = shutil.copytree(tiny_checkpoints("qwen3"), tmp_path / "remote")
    config = json.loads((copy / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "modeling_custom.CustomModel"}
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"needs its own code \(AutoModel: modeling_custom\.CustomModel\)"):
        validate({"languages": ["es"], "models": {"mine": {"family": "dense", "checkpoint": str(copy)}}})
    with pytest.raises(InputError, match="needs its own code"):
        dense.load(qwen3_spec(copy), device="cpu", dtype="float32")


def test_the_settings_page_and_the_mteb_files_say_which_prompt_was_used() -> None:
    from miracl_eval.report.plan import run_settings

    cfg = validate({"languages": ["es"], "models": {"qwen3-embedding-0.6b": {"query_instruction": "Busca la respuesta"}},
                    "methods": ["qwen3-embedding-0.6b/dense"]})  # fmt: skip
    page = run_settings(cfg, "miracl")["model qwen3-embedding-0.6b"]
    assert page["models.qwen3-embedding-0.6b.query_template"] == "Instruct: {task}\nQuery:{query}"
    assert page["models.qwen3-embedding-0.6b.query_instruction"] == "Busca la respuesta"
