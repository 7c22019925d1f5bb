"""The BGE-M3 family against FlagEmbedding's BGEM3FlagModel: outputs, scores, loading errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from miracl_eval.encoders import base, bge_m3
from miracl_eval.encoders.bge_m3 import BgeM3Encoder, multivec_scores
from miracl_eval.encoders.registry import get_family
from miracl_eval.errors import ConfigError, DownloadError, InputError
from tests.helpers import BATCH_TOL, assert_same_weights, copy_checkpoint, sample_passages, sample_queries

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TOL = 1e-5  # dense vectors and pair scores: at least BATCH_TOL's (3e-6, 1e-5)


def _spec(ckpt: Path | str, query: int = 32, passage: int = 96) -> dict:
    return get_family("bge-m3").resolve(
        {"checkpoint": str(ckpt), "query_max_length": query, "passage_max_length": passage}
    )


def colbert_score(q: np.ndarray, p: np.ndarray) -> float:
    """The multi-vector score: the mean over query vectors of their best dot product with a passage vector."""
    return float((q @ p.T).max(axis=1).mean())


def lexical_score(q: tuple[np.ndarray, np.ndarray], p: tuple[np.ndarray, np.ndarray]) -> float:
    """The lexical matching score: the sum over shared tokens of the products of their weights."""
    pw = dict(zip(p[0].tolist(), p[1].tolist(), strict=True))
    return float(sum(w * pw[t] for t, w in zip(q[0].tolist(), q[1].tolist(), strict=True) if t in pw))


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoint) -> Path:
    return tiny_checkpoint


@pytest.fixture(scope="module")
def enc(ckpt) -> BgeM3Encoder:
    return bge_m3.load(_spec(ckpt), device="cpu", multivec=True)


@pytest.fixture(scope="module")
def flag(ckpt):
    flag_embedding = pytest.importorskip("FlagEmbedding")
    return flag_embedding.BGEM3FlagModel(
        str(ckpt),
        use_fp16=False,
        devices="cpu",
        normalize_embeddings=True,
        batch_size=4,
        query_max_length=32,
        passage_max_length=96,
    )


def _flag_encode(flag, texts, max_length):
    return flag.encode(
        texts, batch_size=4, max_length=max_length, return_dense=True, return_sparse=True, return_colbert_vecs=True
    )


def _assert_same_sparse(theirs: dict, ours: tuple[np.ndarray, np.ndarray]) -> None:
    ids, weights = ours
    assert ids.dtype == np.int32 and weights.dtype == np.float32 and (weights > 0).all()
    assert (np.diff(ids) > 0).all()  # ascending, no repeats
    assert all(isinstance(k, str) for k in theirs)  # FlagEmbedding keys are token id strings
    their_ids = [int(k) for k in theirs]
    assert_same_weights(ids, weights, their_ids, [float(v) for v in theirs.values()], BATCH_TOL["bge-m3 sparse"])


@pytest.mark.parametrize("role,max_length", [("query", 32), ("passage", 96), ("passage", 24)])
def test_outputs_equal_flagembedding(ckpt, flag, role, max_length):
    enc = bge_m3.load(_spec(ckpt, query=max_length, passage=max_length), device="cpu", multivec=True)
    texts = sample_queries() if role == "query" else sample_passages()
    texts = [*texts, "", "x", "ＡＢＣ ﬁne"]
    ours = enc.encode(texts, role, batch_size=4)
    colbert = enc.encode_multivec(texts, role, batch_size=4)
    theirs = _flag_encode(flag, texts, max_length)

    lengths = [len(enc.tokenizer(t, truncation=True, max_length=max_length)["input_ids"]) for t in texts]
    if role == "passage":
        assert max(lengths) == max_length  # truncation is exercised
    assert ours.dense is not None and ours.dense.dtype == np.float32 and ours.dense.shape == (len(texts), 32)
    np.testing.assert_allclose(ours.dense, theirs["dense_vecs"], atol=TOL, rtol=0)
    assert ours.sparse is not None
    assert sum(len(s[0]) for s in ours.sparse) > 3 * len(texts)  # the heads give real lexical weights
    for a, b in zip(theirs["lexical_weights"], ours.sparse, strict=True):
        _assert_same_sparse(a, b)
    for a, b, n in zip(theirs["colbert_vecs"], colbert, lengths, strict=True):
        assert b.shape == a.shape == (n - 1, 32)  # every token after <s>, </s> included
        assert b.dtype == np.float32
        np.testing.assert_allclose(b, a, atol=BATCH_TOL["bge-m3 colbert"], rtol=0)


def test_scores_equal_flagembedding(enc, flag):
    langs = ["th", "zh", "ja", "ar", "en"]
    queries, passages = sample_queries(langs), sample_passages(langs, 3)
    q, p = enc.encode(queries, "query", batch_size=8), enc.encode(passages, "passage", batch_size=8)
    qc, pc = enc.encode_multivec(queries, "query", 8), enc.encode_multivec(passages, "passage", 8)
    fq, fp = _flag_encode(flag, queries, 32), _flag_encode(flag, passages, 96)
    assert q.dense is not None and p.dense is not None and q.sparse and p.sparse
    np.testing.assert_allclose(q.dense @ p.dense.T, fq["dense_vecs"] @ fp["dense_vecs"].T, atol=TOL)
    lexical = flag.compute_lexical_matching_score(fq["lexical_weights"], fp["lexical_weights"])
    ours_lex = np.array([[lexical_score(a, b) for b in p.sparse] for a in q.sparse])
    np.testing.assert_allclose(ours_lex, lexical, atol=TOL)
    assert (ours_lex > 0).mean() > 0.2  # shared tokens exist: the test compares something
    ours_col = np.array([[colbert_score(a, b) for b in pc] for a in qc])
    theirs_col = np.array([[float(flag.colbert_score(a, b)) for b in fp["colbert_vecs"]] for a in fq["colbert_vecs"]])
    np.testing.assert_allclose(ours_col, theirs_col, atol=TOL)
    assert np.unique(np.round(ours_col, 5)).size > ours_col.size // 2  # scores do not tie

    docs = {f"d{i}": t for i, t in enumerate(passages)}
    pairs = [(qi, f"d{pi}") for qi in range(len(queries)) for pi in range(len(passages)) if (qi + pi) % 3]
    got = multivec_scores(enc, queries, docs, pairs, batch_size=4)
    assert got.dtype == np.float32 and got.shape == (len(pairs),)
    np.testing.assert_allclose(got, [theirs_col[qi, int(d[1:])] for qi, d in pairs], atol=TOL)


def test_result_order_does_not_depend_on_batching(ckpt):
    enc = bge_m3.load(_spec(ckpt, passage=64), device="cpu", multivec=True)
    texts = sample_passages(per_lang=3)
    one, many = enc.encode(texts, "passage", batch_size=1), enc.encode(texts, "passage", batch_size=7)
    single = [enc.encode([t], "passage", batch_size=1).dense[0] for t in texts[:4]]  # type: ignore[index]
    np.testing.assert_allclose(one.dense, many.dense, atol=TOL)  # type: ignore[arg-type]
    np.testing.assert_allclose(np.stack(single), many.dense[:4], atol=TOL)  # type: ignore[index]
    for (ta, wa), (tb, wb) in zip(one.sparse or [], many.sparse or [], strict=True):
        assert_same_weights(ta, wa, tb, wb, BATCH_TOL["bge-m3 sparse"])
    for a, b in zip(enc.encode_multivec(texts, "passage", 1), enc.encode_multivec(texts, "passage", 7), strict=True):
        np.testing.assert_allclose(a, b, atol=BATCH_TOL["bge-m3 colbert"])
    empty = enc.encode([], "passage", batch_size=4)
    assert empty.dense is not None and empty.dense.shape == (0, 32) and empty.sparse == []
    assert enc.encode_multivec([], "query", 4) == []


@pytest.mark.parametrize(
    "dtype,cos_min,score_tol,vec_tol", [("bfloat16", 0.98, 0.1, 0.2), ("float16", 0.999, 0.02, 0.05)]
)
def test_half_precision_path(ckpt, enc, dtype, cos_min, score_tol, vec_tol):
    """The CUDA code path (whole model and heads in bf16/fp16) run on the CPU, against float32.

    Outputs must stay float32 with unit dense rows (normalized after the upcast), and agree
    with the float32 encoder (equal to FlagEmbedding) to half precision.
    """
    half = bge_m3.load(_spec(ckpt), device="cpu", dtype=dtype, multivec=True)
    want = getattr(torch, dtype)
    assert half.dtype == want and half.model.dtype == want and half.sparse_linear.weight.dtype == want
    texts = sample_passages(per_lang=3)
    a, b = enc.encode(texts, "passage", batch_size=4), half.encode(texts, "passage", batch_size=4)
    assert a.dense is not None and b.dense is not None and b.dense.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(b.dense, axis=1), 1.0, atol=1e-6)
    assert ((a.dense * b.dense).sum(axis=1) >= cos_min).all()
    np.testing.assert_allclose(b.dense @ b.dense.T, a.dense @ a.dense.T, atol=score_tol)
    assert a.sparse is not None and b.sparse is not None
    for (tx, wx), (ty, wy) in zip(a.sparse, b.sparse, strict=True):
        x, y = dict(zip(tx.tolist(), wx.tolist(), strict=True)), dict(zip(ty.tolist(), wy.tolist(), strict=True))
        shared = x.keys() & y.keys()
        assert len(shared) >= 0.8 * len(x.keys() | y.keys())  # weights near 0 may flip sign
        assert all(abs(x[k] - y[k]) <= vec_tol for k in shared)
    for x, y in zip(enc.encode_multivec(texts, "passage", 4), half.encode_multivec(texts, "passage", 4), strict=True):
        assert y.dtype == np.float32 and y.shape == x.shape
        np.testing.assert_allclose(y, x, atol=vec_tol)
    queries = sample_queries(["en", "zh"])
    docs = {f"d{i}": t for i, t in enumerate(texts)}
    pairs = [(qi, f"d{pi}") for qi in range(len(queries)) for pi in range(len(texts)) if (qi + pi) % 4 == 0]
    np.testing.assert_allclose(
        multivec_scores(half, queries, docs, pairs, 4), multivec_scores(enc, queries, docs, pairs, 4), atol=score_tol
    )


def test_multivec_encodes_each_passage_once(ckpt, monkeypatch):
    enc = bge_m3.load(_spec(ckpt, query=16, passage=32), device="cpu", multivec=True)
    seen: list[str] = []
    real = base.TransformerEncoder.tokenize

    def counting(self, texts, max_length):
        seen.extend(texts)
        return real(self, texts, max_length)

    monkeypatch.setattr(base.TransformerEncoder, "tokenize", counting)
    queries = ["river length", "capital city", "unused query"]
    docs = {"a": "The river is long.", "b": "Paris is the capital.", "c": "never scored"}
    pairs = [(0, "a"), (1, "a"), (1, "b"), (0, "b"), (0, "a")]
    got = multivec_scores(enc, queries, docs, pairs, batch_size=2)
    assert sorted(seen) == sorted(["river length", "capital city", "The river is long.", "Paris is the capital."])
    assert got[0] == got[4]
    q = enc.encode_multivec(queries[:2], "query", 2)
    p = enc.encode_multivec([docs["a"], docs["b"]], "passage", 2)
    np.testing.assert_allclose(
        got, [colbert_score(q[i], p[j]) for i, j in [(0, 0), (1, 0), (1, 1), (0, 1), (0, 0)]], rtol=1e-6
    )  # float32 sums in another order
    assert multivec_scores(enc, queries, docs, [], 2).shape == (0,)
    with pytest.raises(KeyError, match="'zzz'"):
        multivec_scores(enc, queries, docs, [(0, "zzz")], 2)


# ---------------------------------------------------------------------------------------------
# loading errors


def test_missing_sparse_head(ckpt, tmp_path):
    folder = copy_checkpoint(ckpt, tmp_path / "m", {"sparse_linear.pt"})
    with pytest.raises(InputError, match="sparse_linear.pt") as err:
        bge_m3.load(_spec(folder), device="cpu")
    assert str(folder / "sparse_linear.pt") in str(err.value)


def test_missing_colbert_head(ckpt, tmp_path):
    folder = copy_checkpoint(ckpt, tmp_path / "m", {"colbert_linear.pt"})
    with pytest.raises(InputError, match="colbert_linear.pt"):
        bge_m3.load(_spec(folder), device="cpu", multivec=True)
    loaded = bge_m3.load(_spec(folder), device="cpu")  # encoding does not need it
    assert loaded.colbert_linear is None
    with pytest.raises(ValueError, match="without the colbert head"):
        loaded.encode_multivec(["x"], "query", 1)


@pytest.mark.parametrize("content", [b"", b"not a torch file", b"PK\x03\x04 truncated zip"])
def test_corrupt_sparse_head(ckpt, tmp_path, content):
    folder = copy_checkpoint(ckpt, tmp_path / "m")
    (folder / "sparse_linear.pt").write_bytes(content)
    with pytest.raises(InputError) as err:
        bge_m3.load(_spec(folder), device="cpu")
    assert str(folder / "sparse_linear.pt") in str(err.value)


def test_wrong_head_shape(ckpt, tmp_path):
    folder = copy_checkpoint(ckpt, tmp_path / "m")
    torch.save(torch.nn.Linear(32, 2).state_dict(), folder / "sparse_linear.pt")
    with pytest.raises(InputError, match="sparse_linear.pt"):
        bge_m3.load(_spec(folder), device="cpu")


def test_missing_directory_and_offline_hub(tmp_path, monkeypatch):
    with pytest.raises(InputError, match="does not exist"):
        bge_m3.load(_spec(tmp_path / "nope" / "model"), device="cpu")
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(DownloadError, match="'miracl-eval-tests/no-such-model'.*point the model's `checkpoint`"):
        bge_m3.load(_spec("miracl-eval-tests/no-such-model"), device="cpu")


def test_bad_lengths(ckpt):
    with pytest.raises(ConfigError, match="passage_max_length.*exceeds the model's limit of 518"):
        bge_m3.load(_spec(ckpt, passage=1000), device="cpu")
    with pytest.raises(ValueError, match="batch_size"):
        bge_m3.load(_spec(ckpt), device="cpu").encode(["x"], "query", batch_size=0)


def test_family_module_does_not_import_flagembedding():
    source = Path(bge_m3.__file__).read_text(encoding="utf-8")
    assert "import FlagEmbedding" not in source and "from FlagEmbedding" not in source


def _stored_queries(enc, qids, queries):
    """The queries' dense and sparse outputs as the rerank reads them (stored by the query encoding)."""
    import pyarrow as pa

    from miracl_eval.fusion.scores import SparseLookup, VectorLookup

    out = enc.encode(queries, "query", batch_size=4)
    assert out.dense is not None and out.sparse is not None
    ids = pa.array(qids, pa.string())
    indptr = np.r_[0, np.cumsum([len(t) for t, _ in out.sparse])]
    tokens = np.concatenate([t for t, _ in out.sparse]).astype(np.int64)
    weights = np.concatenate([w for _, w in out.sparse])
    return VectorLookup(ids, out.dense), SparseLookup(ids, indptr, tokens, weights)


@pytest.mark.parametrize("query_tokens, token_budget", [(None, None), (40, None), (None, 100)])
def test_one_pass_rerank_scores_equal_flagembedding_compute_score(enc, flag, query_tokens, token_budget):
    """The rerank's three scores from one encoding of each candidate (in query groups of 40 padded
    tokens: several groups, passages shared between groups encoded again; or in batches of at most
    100 padded tokens) equal FlagEmbedding's ``compute_score`` on the same (query, passage) pairs."""
    import pyarrow as pa

    from miracl_eval.fusion.rerank import one_pass_scores

    queries, passages = sample_queries(["en", "zh", "ar", "th"]), sample_passages(["en", "zh", "ar", "th"], 3)
    qids = [f"q{i}" for i in range(len(queries))]
    docs = {f"d{i}": t for i, t in enumerate(passages)}
    pairs = [(q, d) for i, q in enumerate(qids) for j, d in enumerate(docs) if (i + j) % 3 == 0]
    table = pa.table({"qid": [q for q, _ in pairs], "docid": [d for _, d in pairs]})
    dense, sparse = _stored_queries(enc, qids, queries)
    texts = dict(zip(qids, queries, strict=True))
    got = one_pass_scores(enc, table, texts, dense, sparse, docs, 4, query_tokens, token_budget=token_budget)
    theirs = flag.compute_score(
        [(queries[int(q[1:])], docs[d]) for q, d in pairs], batch_size=4, max_query_length=32, max_passage_length=96
    )
    for ours, flag_name in (("dense", "dense"), ("sparse", "sparse"), ("multivec", "colbert")):
        assert got[ours].dtype == np.float64 and got[ours].shape == (len(pairs),)
        np.testing.assert_allclose(got[ours], theirs[flag_name], atol=TOL, err_msg=ours)
    assert (got["sparse"] > 0).mean() > 0.2 and np.unique(np.round(got["multivec"], 5)).size > len(pairs) // 2


def test_multivec_batches_keep_to_the_token_budget(ckpt, monkeypatch):
    """Long passages come in small batches (rows x longest row <= token_budget, or one row), short
    queries in large ones; the scores are those of batches by row count."""
    enc = bge_m3.load(_spec(ckpt, query=32, passage=500), device="cpu", multivec=True)
    queries = sample_queries(["en", "zh", "ar"])[:6]
    texts = [" ".join(sample_passages(["en", "ru", "zh"], 9)[i : i + 3]) for i in range(9)] + ["short one", "x"]
    docs = {f"d{i}": t for i, t in enumerate(texts)}
    pairs = [(qi, d) for qi in range(len(queries)) for d in docs]
    expected = multivec_scores(enc, queries, docs, pairs, 8, token_budget=1 << 20)  # rows alone decide
    shapes: list[tuple[int, int]] = []
    real = BgeM3Encoder.forward

    def recording(self, input_ids, mask, kinds):
        shapes.append(tuple(input_ids.shape))
        return real(self, input_ids, mask, kinds)

    monkeypatch.setattr(BgeM3Encoder, "forward", recording)
    got = multivec_scores(enc, queries, docs, pairs, 8, token_budget=300)
    assert max(w for _, w in shapes) > 150  # the long passages were long
    assert all(rows * width <= 300 or rows == 1 for rows, width in shapes), shapes
    assert any(rows == len(queries) for rows, _ in shapes)  # the short queries: one batch
    np.testing.assert_allclose(got, expected, atol=BATCH_TOL["bge-m3 scores"])
