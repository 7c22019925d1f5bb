"""The dense family against sentence-transformers, pyserini's Auto encoders and FlagEmbedding's
decoder-only embedder, each on the same tiny checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from miracl_eval.encoders import dense
from miracl_eval.encoders.registry import get_family
from miracl_eval.errors import InputError
from tests.helpers import copy_checkpoint, sample_passages, sample_queries

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TOL = 1e-5
QUERY_MAX, PASSAGE_MAX = 24, 64
INSTRUCTION = "Given a question, retrieve Wikipedia passages that answer it"


def _load(folder: Path, dtype: str = "float32", **settings) -> dense.DenseEncoder:
    defaults = {"pooling": "mean", "normalize": True}  # the tiny checkpoints have no sentence-transformers files
    spec = get_family("dense").resolve(
        {"checkpoint": str(folder), "query_max_length": QUERY_MAX, "passage_max_length": PASSAGE_MAX, **defaults,
         **settings}
    )  # fmt: skip
    return dense.load(spec, device="cpu", dtype=dtype)


def _texts() -> dict[str, list[str]]:
    return {"query": [*sample_queries(), "", "x"], "passage": [*sample_passages(), "", "ＡＢＣ ﬁne"]}


def _truncated(enc: dense.DenseEncoder, texts: list[str], max_length: int) -> bool:
    return max(len(enc.tokenizer(t)["input_ids"]) for t in texts) > max_length


@pytest.mark.parametrize("kind", ["bert", "xlm-r"])
@pytest.mark.parametrize("pooling", ["cls", "mean"])
@pytest.mark.parametrize("normalize", [True, False])
def test_equals_sentence_transformers(tiny_checkpoints, kind, pooling, normalize):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    folder = tiny_checkpoints(kind)
    prefixes = {"query": "query: ", "passage": "passage: "}
    ours = _load(folder, pooling=pooling, normalize=normalize, query_prefix="query: ", passage_prefix="passage: ")
    for role, max_length in (("query", QUERY_MAX), ("passage", PASSAGE_MAX)):
        transformer = Transformer(str(folder), max_seq_length=max_length)
        modules = [transformer, Pooling(32, pooling_mode=pooling)] + ([Normalize()] if normalize else [])
        st = SentenceTransformer(modules=modules, device="cpu")
        texts = _texts()[role]
        want = st.encode(texts, prompt=prefixes[role], batch_size=4, convert_to_numpy=True)
        got = ours.encode(texts, role, batch_size=3).dense  # another batch size: the padding differs
        assert got is not None and got.dtype == np.float32 and got.shape == (len(texts), 32)
        np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
        norms = np.linalg.norm(got, axis=1)
        assert np.allclose(norms, 1.0, atol=1e-6) == normalize
    assert _truncated(ours, _texts()["passage"], PASSAGE_MAX)


@pytest.fixture(scope="module")
def pyserini_encode():
    from miracl_eval.lucene.offline import import_pyserini

    return import_pyserini("pyserini.encode")  # it starts the JVM on import


@pytest.mark.parametrize(
    "kind,pooling",
    [("bert", "cls"), ("xlm-r", "mean")],
    ids=["mDPR (cls, not normalised)", "mContriever (mean, not normalised)"],
)
def test_equals_pyserini_auto_encoders(tiny_checkpoints, pyserini_encode, kind, pooling):
    folder = tiny_checkpoints(kind)
    ours = _load(folder, pooling=pooling, normalize=False)
    texts = _texts()
    query_encoder = pyserini_encode.AutoQueryEncoder(encoder_dir=str(folder), device="cpu", pooling=pooling)
    want_q = np.stack([query_encoder.encode(q, max_length=QUERY_MAX) for q in texts["query"]])
    doc_encoder = pyserini_encode.AutoDocumentEncoder(str(folder), device="cpu", pooling=pooling)
    want_p = np.concatenate(
        [doc_encoder.encode(texts["passage"][i : i + 5], max_length=PASSAGE_MAX) for i in range(0, 50, 5)]
    )
    got_q, got_p = ours.encode(texts["query"], "query", 4).dense, ours.encode(texts["passage"], "passage", 4).dense
    np.testing.assert_allclose(got_q, want_q, atol=TOL, rtol=0)
    np.testing.assert_allclose(got_p, want_p, atol=TOL, rtol=0)
    assert not np.allclose(np.linalg.norm(got_p, axis=1), 1.0)


def _eos_adding_copy(folder: Path, dst: Path) -> Path:
    """The decoder checkpoint with a tokenizer that ends every text with </s> (as bge-en-icl's does)."""
    copy = copy_checkpoint(folder, dst)
    data = json.loads((copy / "tokenizer.json").read_text(encoding="utf-8"))
    single = data["post_processor"]["single"]
    single.append({"SpecialToken": {"id": "</s>", "type_id": 0}})
    data["post_processor"]["special_tokens"]["</s>"] = {"id": "</s>", "ids": [2], "tokens": ["</s>"]}
    (copy / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return copy


def test_last_token_pooling_equals_flagembedding_decoder_only(tiny_checkpoints, tmp_path):
    """Last-token pooling with the instruction template and EOS = FlagEmbedding's BaseLLMEmbedder.

    FlagEmbedding 1.4.2 appends no EOS itself: it relies on the tokenizer (bge-en-icl's adds
    one). It runs here on a copy of the tiny decoder whose tokenizer adds ``</s>``; ours runs
    on the plain decoder (Mistral's tokenizer adds ``<s>`` only, so we append ``</s>``) and on
    the copy (where we append nothing): all three must agree.
    """
    flag_embedding = pytest.importorskip("FlagEmbedding.inference.embedder.decoder_only.base")
    plain = tiny_checkpoints("decoder")
    eos = _eos_adding_copy(plain, tmp_path / "eos")
    settings = dict(pooling="last", normalize=True, query_template=f"Instruct: {INSTRUCTION}\nQuery: {{query}}")
    ours_plain, ours_eos = _load(plain, **settings), _load(eos, **settings)
    assert ours_plain.suffix_ids == (2,) and ours_eos.suffix_ids == ()
    flag = flag_embedding.BaseLLMEmbedder(
        str(eos),
        normalize_embeddings=True,
        use_fp16=False,
        query_instruction_for_retrieval=INSTRUCTION,
        query_instruction_format="Instruct: {}\nQuery: {}",
        devices="cpu",
        batch_size=4,
        query_max_length=QUERY_MAX,
        passage_max_length=PASSAGE_MAX,
    )
    texts = _texts()
    want = {"query": flag.encode_queries(texts["query"]), "passage": flag.encode_corpus(texts["passage"])}
    for role in ("query", "passage"):
        for ours in (ours_plain, ours_eos):
            got = ours.encode(texts[role], role, batch_size=3).dense
            np.testing.assert_allclose(got, want[role], atol=TOL, rtol=0)
    ids, lengths = ours_plain.tokenize(ours_plain.prepare(texts["passage"], "passage"), PASSAGE_MAX)
    assert max(lengths) == PASSAGE_MAX  # truncated passages still end with </s>
    assert all(row[n - 1] == 2 for row, n in zip(ids, lengths, strict=True))


def test_prefixes_and_template(tiny_checkpoints):
    enc = _load(tiny_checkpoints("bert"), query_prefix="q: ", passage_prefix="p: ")
    assert enc.prepare(["a", "b"], "query") == ["q: a", "q: b"]
    assert enc.prepare(["a"], "passage") == ["p: a"]
    templated = _load(tiny_checkpoints("bert"), query_prefix="q: ", query_template="Find {query} ({query})")
    assert templated.prepare(["a"], "query") == ["Find a (a)"]
    assert templated.prepare(["a"], "passage") == ["a"]
    np.testing.assert_allclose(
        templated.encode(["a"], "query", 1).dense, templated.encode(["Find a (a)"], "passage", 1).dense, atol=TOL
    )


def test_last_token_pooling_needs_an_eos_token(tiny_checkpoints):
    with pytest.raises(InputError, match="EOS"):
        _load(tiny_checkpoints("bert"), pooling="last")


@pytest.mark.parametrize(
    "dtype,cos_min", [("bfloat16", 0.98), ("float16", 0.995)]
)  # a random decoder in fp16: 0.9968 seen
@pytest.mark.parametrize("kind,pooling", [("xlm-r", "mean"), ("decoder", "last")])
def test_half_precision_path(tiny_checkpoints, kind, pooling, dtype, cos_min):
    """The CUDA code path (the model in bf16/fp16) run on the CPU: float32 outputs close to float32's."""
    full = _load(tiny_checkpoints(kind), pooling=pooling)
    half = _load(tiny_checkpoints(kind), dtype=dtype, pooling=pooling)
    assert half.model.dtype == getattr(torch, dtype)
    texts = sample_passages(per_lang=3)
    a, b = full.encode(texts, "passage", 4).dense, half.encode(texts, "passage", 4).dense
    assert a is not None and b is not None and b.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-6)  # normalized after the upcast
    assert ((a * b).sum(axis=1) >= cos_min).all()
