"""A checkpoint's whole sentence-transformers module chain, run as ``SentenceTransformer(folder)`` runs it:
the Transformer's max_seq_length and lower-casing, every Pooling mode, Dense heads (weights, bias,
activation) and Normalize in their order; and every module that cannot be run exactly refused by name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from miracl_eval.config.models import resolve_model
from miracl_eval.encoders import dense
from miracl_eval.encoders.blocks import planned_dim
from miracl_eval.encoders.st_settings import read_st_chain
from miracl_eval.errors import ConfigError, InputError
from miracl_eval.offline.tiny import DenseHeadSpec, add_sentence_transformers_files
from tests.helpers import BATCH_TOL, sample_passages, sample_queries

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TOL = BATCH_TOL["dense heads"]
TANH, GELU = DenseHeadSpec(16), DenseHeadSpec(8, "torch.nn.modules.activation.GELU")
PROMPTS = {"query": "Query: ", "document": "Passage: "}


def _with_chain(tiny_checkpoints, tmp_path: Path, kind: str, **chain) -> Path:
    folder = Path(shutil.copytree(tiny_checkpoints(kind), tmp_path / f"{kind}-st"))
    return add_sentence_transformers_files(folder, **chain)


def _st(folder: Path):
    st_module = pytest.importorskip("sentence_transformers")
    return st_module.SentenceTransformer(str(folder), device="cpu")


def _texts() -> dict[str, list[str]]:
    long = " ".join(sample_passages(["en"], per_lang=3))  # longer than every max length here
    return {"query": [*sample_queries(["en", "ru", "zh", "ar"]), long], "passage": [*sample_passages(), long]}


def _assert_equal(ours: dense.DenseEncoder, st, batch_sizes=(1, 3, 16)) -> None:
    texts = _texts()
    want = {
        "query": st.encode_query(texts["query"], batch_size=5),
        "passage": st.encode_document(texts["passage"], batch_size=5),
    }
    for role in ("query", "passage"):
        for batch in batch_sizes:  # other batch shapes than sentence-transformers': the tolerance holds for all
            got = ours.encode(texts[role], role, batch).dense
            assert got is not None and got.shape == want[role].shape, (role, got.shape if got is not None else None)
            np.testing.assert_allclose(got, want[role], atol=TOL, rtol=TOL, err_msg=f"{role}, batch {batch}")


@pytest.mark.parametrize(
    "kind,chain",
    [
        # LaBSE's chain: CLS pooling, a Tanh Dense head, Normalize, max_seq_length, prompts; lower-cased texts
        (
            "bert",
            {
                "pooling": "cls",
                "dense": [TANH],
                "normalize": True,
                "max_seq_length": 20,
                "do_lower_case": True,
                "prompts": PROMPTS,
            },
        ),
        # two heads (no bias and Identity, weights as pytorch_model.bin; GELU), max pooling, not normalised
        (
            "xlm-r",
            {
                "pooling": "max",
                "dense": [DenseHeadSpec(24, "torch.nn.modules.linear.Identity", False, "pytorch_model.bin"), GELU],
                "max_seq_length": 48,
            },
        ),
        ("bert", {"pooling": "mean_sqrt_len_tokens", "dense": [TANH], "max_seq_length": 40}),
        ("xlm-r", {"pooling": "weightedmean", "dense": [GELU], "normalize": True, "legacy_pooling": False}),
        ("xlm-r", {"pooling": "mean", "normalize": True, "max_seq_length": 12, "prompts": PROMPTS}),
        # last-token pooling as sentence-transformers runs it: the last token, no EOS appended
        ("decoder", {"pooling": "lasttoken", "dense": [TANH], "normalize": True, "max_seq_length": 30}),
    ],
    ids=["labse-like", "max-two-heads", "mean-sqrt-len", "weightedmean", "short-max-seq-length", "lasttoken"],
)
def test_the_module_chain_equals_sentence_transformers(tiny_checkpoints, tmp_path: Path, kind, chain) -> None:
    folder = _with_chain(tiny_checkpoints, tmp_path, kind, **chain)
    spec = resolve_model("mine", {"family": "dense", "checkpoint": str(folder)})  # every setting from the files
    assert spec["pooling"] == chain["pooling"] and spec["normalize"] == chain.get("normalize", False)
    if "max_seq_length" in chain:
        assert spec["query_max_length"] == spec["passage_max_length"] == chain["max_seq_length"]
    ours = dense.load(spec, device="cpu")
    assert ours.dim == (chain["dense"][-1].out_features if chain.get("dense") else 32)
    st = _st(folder)
    # what a dry run's requests assume of the vectors before any is written: the chain's last Dense head
    assert planned_dim(spec, 1024) == ours.dim == st.get_sentence_embedding_dimension()
    _assert_equal(ours, st)


def test_a_setting_given_wins_over_the_files(tiny_checkpoints, tmp_path: Path) -> None:
    """A longer max length than the checkpoint's is honoured (as max_seq_length set on the model); normalize
    given adds a Normalize after the Dense head; past the model's positions a max length is an error."""
    folder = _with_chain(tiny_checkpoints, tmp_path, "bert", pooling="cls", dense=[TANH], max_seq_length=16)
    spec = resolve_model("mine", {"family": "dense", "checkpoint": str(folder), "query_max_length": 40,
                                  "passage_max_length": 40, "normalize": True})  # fmt: skip
    st = _st(folder)
    st.max_seq_length = 40
    texts = _texts()["passage"]
    got = dense.load(spec, device="cpu").encode(texts, "passage", 4).dense
    np.testing.assert_allclose(got, st.encode_document(texts, normalize_embeddings=True), atol=TOL, rtol=TOL)
    too_long = resolve_model("mine", {"family": "dense", "checkpoint": str(folder), "passage_max_length": 4096})
    with pytest.raises(ConfigError, match="passage_max_length.*4096 exceeds the model's limit of 520"):
        dense.load(too_long, device="cpu")


def test_query_and_document_lengths_of_the_transformer(tiny_checkpoints, tmp_path: Path) -> None:
    """sentence-transformers 6's query_length / document_length: what encode_query / encode_document cut to."""
    folder = _with_chain(tiny_checkpoints, tmp_path, "xlm-r", pooling="mean", max_seq_length=64)
    config = json.loads((folder / "sentence_bert_config.json").read_text())
    (folder / "sentence_bert_config.json").write_text(json.dumps({**config, "query_length": 10,
                                                                  "document_length": 24}))  # fmt: skip
    spec = resolve_model("mine", {"family": "dense", "checkpoint": str(folder)})
    assert (spec["query_max_length"], spec["passage_max_length"]) == (10, 24)
    _assert_equal(dense.load(spec, device="cpu"), _st(folder), batch_sizes=(4,))


def test_without_max_seq_length_the_tokenizer_limit_capped_at_the_positions(tiny_checkpoints, tmp_path: Path) -> None:
    folder = _with_chain(tiny_checkpoints, tmp_path, "bert", pooling="mean")
    tok = json.loads((folder / "tokenizer_config.json").read_text())
    assert tok["model_max_length"] == 520  # the tiny BERT's positions
    spec = resolve_model("mine", {"family": "dense", "checkpoint": str(folder)})
    assert spec["query_max_length"] == 520
    (folder / "tokenizer_config.json").write_text(json.dumps({**tok, "model_max_length": 33}))
    assert resolve_model("mine", {"family": "dense", "checkpoint": str(folder)})["query_max_length"] == 33
    del tok["model_max_length"]  # transformers' default: unlimited, capped at the positions
    (folder / "tokenizer_config.json").write_text(json.dumps(tok))
    assert resolve_model("mine", {"family": "dense", "checkpoint": str(folder)})["passage_max_length"] == 520


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _module(data: list, index: int, **fields) -> None:
    data[index].update(fields)


@pytest.mark.parametrize(
    "edit,where,message",
    [
        (lambda f: _edit(f / "modules.json", lambda d: _module(d, 2, type="sentence_transformers.models.LayerNorm")),
         "modules.json", r"module 2_Dense \(sentence_transformers\.models\.LayerNorm\): a LayerNorm module is not run"),
        (lambda f: _edit(f / "modules.json", lambda d: _module(d, 2, type="custom_pooling.MyHead")),
         "modules.json", r"module 2_Dense \(custom_pooling\.MyHead\): a module of the checkpoint's own code"),
        (lambda f: _edit(f / "2_Dense" / "config.json", lambda d: d.update(activation_function="my_pkg.Swish")),
         "modules.json", r"module 2_Dense .*activation_function 'my_pkg\.Swish' is not a torch module"),
        (lambda f: _edit(f / "2_Dense" / "config.json", lambda d: d.update(use_residual=True)),
         "modules.json", r"module 2_Dense .*residual connection"),
        (lambda f: _edit(f / "2_Dense" / "config.json", lambda d: d.update(in_features=64)),
         "modules.json", r"module 2_Dense: its in_features \(64\) is not the width of the vectors it is given \(32\)"),
        (lambda f: (f / "2_Dense" / "model.safetensors").unlink(),
         "modules.json", r"module 2_Dense .*its weights are missing"),
        (lambda f: _edit(f / "1_Pooling" / "config.json", lambda d: d.update(pooling_mode_mean_tokens=True)),
         "modules.json", r"module 1_Pooling .*concatenates several modes \(cls \+ mean\)"),
        (lambda f: _edit(f / "1_Pooling" / "config.json", lambda d: d.update(pooling_mode="median")),
         "modules.json", r"module 1_Pooling .*pooling mode 'median' is not one of"),
        (lambda f: _edit(f / "sentence_bert_config.json", lambda d: d.update(
            modality_config={"text": {"method": "forward", "method_output_name": "last_hidden_state"},
                             "message": {"method": "forward", "method_output_name": "last_hidden_state"}})),
         "modules.json", r"module 0 \(sentence_transformers\.models\.Transformer\): sentence_bert_config\.json's "
         r"modality_config .*chat template"),
        (lambda f: _edit(f / "sentence_bert_config.json", lambda d: d.update(tokenizer_args={"add_eos_token": True})),
         "modules.json", r"processor arguments add_eos_token"),
        (lambda f: _edit(f / "modules.json", lambda d: d.insert(1, {"idx": 9, "name": "9", "path": "9_Dropout",
                                                                     "type": "sentence_transformers.models.Dropout"})),
         "modules.json", r"the Transformer must be followed by one Pooling module"),
        (lambda f: _edit(f / "config_sentence_transformers.json", lambda d: d.update(truncate_dim=8)),
         "config_sentence_transformers.json", r"truncate_dim 8 .* set the model's dimensions instead"),
    ],
    ids=["unknown-type", "custom-code", "custom-activation", "residual", "in-features", "no-weights",
         "concatenated-pooling", "unknown-pooling", "chat-template", "tokenizer-argument", "before-pooling",
         "truncate-dim"],
)  # fmt: skip
def test_a_module_that_cannot_run_exactly_is_refused_by_name(tiny_checkpoints, tmp_path: Path, edit, where, message):
    folder = _with_chain(tiny_checkpoints, tmp_path, "bert", pooling="cls", dense=[TANH], normalize=True)
    edit(folder)
    for settings in ({}, {"pooling": "cls", "normalize": True}):  # read, and checked, whether or not a setting is
        with pytest.raises(InputError, match=message) as err:
            resolve_model("mine", {"family": "dense", "checkpoint": str(folder), **settings})
        assert err.value.path == str(folder / where)
    with pytest.raises(InputError, match=message):  # the job, for a checkpoint fetched after start-up
        dense.load({**resolve_model("mine", {"family": "dense", "checkpoint": str(tmp_path / "absent")}),
                    "checkpoint": str(folder)}, device="cpu")  # fmt: skip


def test_a_dropout_after_the_pooling_is_nothing_and_include_prompt(tiny_checkpoints, tmp_path: Path) -> None:
    folder = _with_chain(tiny_checkpoints, tmp_path, "bert", pooling="mean", dense=[TANH], legacy_pooling=False)
    _edit(folder / "modules.json", lambda d: d.append({"idx": 3, "name": "3", "path": "3_Dropout",
                                                      "type": "sentence_transformers.models.Dropout"}))  # fmt: skip
    (folder / "3_Dropout").mkdir()
    (folder / "3_Dropout" / "config.json").write_text(json.dumps({"dropout": 0.2}))
    chain = read_st_chain(folder)
    assert chain is not None and [getattr(s, "name", s) for s in chain.steps] == ["2_Dense"]
    _assert_equal(dense.load(resolve_model("mine", {"family": "dense", "checkpoint": str(folder)}), device="cpu"),
                  _st(folder), batch_sizes=(3,))  # fmt: skip
    # include_prompt false leaves a prompt's tokens out of the pooling: refused with a prompt, nothing without
    _edit(folder / "1_Pooling" / "config.json", lambda d: d.update(include_prompt=False))
    assert resolve_model("mine", {"family": "dense", "checkpoint": str(folder)})["query_prefix"] == ""
    with pytest.raises(
        InputError, match=r"1_Pooling/config.json: include_prompt: false .*\(models\.mine\.query_prefix"
    ):
        resolve_model("mine", {"family": "dense", "checkpoint": str(folder), "query_prefix": "q: "})


def test_without_modules_json_nothing_is_read(tiny_checkpoints) -> None:
    assert read_st_chain(tiny_checkpoints("bert")) is None
    spec = resolve_model("mine", {"family": "dense", "checkpoint": str(tiny_checkpoints("bert")), "pooling": "cls",
                                  "normalize": False})  # fmt: skip
    assert (spec["query_max_length"], spec["passage_max_length"]) == (512, 512)
