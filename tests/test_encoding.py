"""The BGE-M3 encoder against FlagEmbedding's BGEM3FlagModel, and its streamed Parquet outputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import CORPORA, SAMPLE

from miracl_eval import atomic, encoding, schemas
from miracl_eval.encoding import (
    M3Encoder,
    colbert_score,
    encode_corpus_shard,
    encode_queries,
    multivec_scores,
    num_shards,
    sparse_score,
)
from miracl_eval.errors import DownloadError, InputError
from miracl_eval.tiny_model import texts_from_corpora

pytestmark = pytest.mark.usefixtures("one_torch_thread")
LANGS = ["th", "zh", "ja", "ar", "ko", "hi", "ru", "en", "es"]
TOL = 1e-5


def _queries(langs=LANGS) -> list[str]:
    out = []
    for lang in langs:
        for line in (SAMPLE / "miracl" / lang / "topics.tsv").read_text(encoding="utf-8").splitlines():
            if line.strip():
                out.append(line.split("\t", 1)[1])
    return out


def _passages(langs=LANGS, per_lang: int = 5) -> list[str]:
    out = []
    for lang in langs:
        texts = list(texts_from_corpora([SAMPLE / "miracl" / lang / "corpus.jsonl"]))
        out.extend(texts[:per_lang])
    return out


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoint) -> Path:
    return tiny_checkpoint


@pytest.fixture(scope="module")
def enc(ckpt) -> M3Encoder:
    return M3Encoder.load(str(ckpt), device="cpu")


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


# ---------------------------------------------------------------------------------------------
# FlagEmbedding parity


def _flag_encode(flag, texts, max_length):
    return flag.encode(
        texts, batch_size=4, max_length=max_length, return_dense=True, return_sparse=True, return_colbert_vecs=True
    )


def _assert_same_sparse(theirs: dict, ours: dict[int, float]) -> None:
    assert all(isinstance(k, str) for k in theirs)  # FlagEmbedding keys are token id strings
    assert {int(k) for k in theirs} == set(ours)
    for token, weight in ours.items():
        assert abs(float(theirs[str(token)]) - weight) <= TOL


@pytest.mark.parametrize("kind,max_length", [("queries", 32), ("passages", 96), ("passages", 24)])
def test_outputs_equal_flagembedding(enc, flag, kind, max_length):
    texts = _queries() if kind == "queries" else _passages()
    texts = [*texts, "", "x", "ＡＢＣ ﬁne"]
    ours = enc.encode(texts, max_length=max_length, batch_size=4, dense=True, sparse=True, colbert=True)
    theirs = _flag_encode(flag, texts, max_length)

    lengths = [len(enc.tokenizer(t, truncation=True, max_length=max_length)["input_ids"]) for t in texts]
    if kind == "passages":
        assert max(lengths) == max_length  # truncation is exercised
    assert ours.dense is not None and ours.dense.dtype == np.float32 and ours.dense.shape == (len(texts), 32)
    np.testing.assert_allclose(ours.dense, theirs["dense_vecs"], atol=TOL, rtol=0)
    assert ours.sparse is not None and ours.colbert is not None
    assert sum(len(s) for s in ours.sparse) > 3 * len(texts)  # the heads give real lexical weights
    for a, b in zip(theirs["lexical_weights"], ours.sparse, strict=True):
        _assert_same_sparse(a, b)
    for a, b, n in zip(theirs["colbert_vecs"], ours.colbert, lengths, strict=True):
        assert b.shape == a.shape == (n - 1, 32)  # every token after <s>, </s> included
        assert b.dtype == np.float32
        np.testing.assert_allclose(b, a, atol=TOL, rtol=0)


def test_scores_equal_flagembedding(enc, flag):
    queries, passages = _queries(["th", "zh", "ja", "ar", "en"]), _passages(["th", "zh", "ja", "ar", "en"], 3)
    q = enc.encode(queries, max_length=32, batch_size=8, colbert=True)
    p = enc.encode(passages, max_length=96, batch_size=8, colbert=True)
    fq, fp = _flag_encode(flag, queries, 32), _flag_encode(flag, passages, 96)
    assert q.dense is not None and p.dense is not None and q.sparse and p.sparse and q.colbert and p.colbert
    np.testing.assert_allclose(q.dense @ p.dense.T, fq["dense_vecs"] @ fp["dense_vecs"].T, atol=TOL)
    lexical = flag.compute_lexical_matching_score(fq["lexical_weights"], fp["lexical_weights"])
    ours_lex = np.array([[sparse_score(a, b) for b in p.sparse] for a in q.sparse])
    np.testing.assert_allclose(ours_lex, lexical, atol=TOL)
    assert (ours_lex > 0).mean() > 0.2  # shared tokens exist: the test compares something
    ours_col = np.array([[colbert_score(a, b) for b in p.colbert] for a in q.colbert])
    theirs_col = np.array([[float(flag.colbert_score(a, b)) for b in fp["colbert_vecs"]] for a in fq["colbert_vecs"]])
    np.testing.assert_allclose(ours_col, theirs_col, atol=TOL)
    assert np.unique(np.round(ours_col, 5)).size > ours_col.size // 2  # scores do not tie

    docs = {f"d{i}": t for i, t in enumerate(passages)}
    pairs = [(qi, f"d{pi}") for qi in range(len(queries)) for pi in range(len(passages)) if (qi + pi) % 3]
    got = multivec_scores(enc, queries, docs, pairs, q_max_length=32, p_max_length=96, batch_size=4)
    assert got.dtype == np.float32 and got.shape == (len(pairs),)
    np.testing.assert_allclose(got, [theirs_col[qi, int(d[1:])] for qi, d in pairs], atol=TOL)


def test_result_order_does_not_depend_on_batching(enc):
    texts = _passages(per_lang=3)
    one = enc.encode(texts, max_length=64, batch_size=1, colbert=True)
    many = enc.encode(texts, max_length=64, batch_size=7, colbert=True)
    single = [enc.encode([t], max_length=64, batch_size=1).dense[0] for t in texts[:4]]  # type: ignore[index]
    np.testing.assert_allclose(one.dense, many.dense, atol=TOL)  # type: ignore[arg-type]
    np.testing.assert_allclose(np.stack(single), many.dense[:4], atol=TOL)  # type: ignore[index]
    for a, b in zip(one.sparse or [], many.sparse or [], strict=True):
        assert a.keys() == b.keys() and all(abs(a[k] - b[k]) <= TOL for k in a)
    for a, b in zip(one.colbert or [], many.colbert or [], strict=True):
        np.testing.assert_allclose(a, b, atol=TOL)
    empty = enc.encode([], max_length=64, batch_size=4, colbert=True)
    assert empty.dense is not None and empty.dense.shape == (0, 32) and empty.sparse == [] and empty.colbert == []
    only_dense = enc.encode(texts[:2], max_length=64, batch_size=4, sparse=False)
    assert only_dense.sparse is None and only_dense.colbert is None


@pytest.mark.parametrize(
    "dtype,cos_min,score_tol,vec_tol", [("bfloat16", 0.98, 0.1, 0.2), ("float16", 0.999, 0.02, 0.05)]
)
def test_half_precision_path(ckpt, enc, dtype, cos_min, score_tol, vec_tol):
    """The CUDA code path (whole model and heads in bf16/fp16) run on the CPU, against float32.

    Outputs must stay float32 with unit dense rows (normalized after the upcast), and agree
    with the float32 encoder (equal to FlagEmbedding) to half precision.
    """
    half = M3Encoder.load(str(ckpt), device="cpu", dtype=dtype)
    want = getattr(torch, dtype)
    assert half.dtype == want and half.model.dtype == want
    assert half.sparse_linear is not None and half.sparse_linear.weight.dtype == want
    texts = _passages(per_lang=3)
    a = enc.encode(texts, max_length=96, batch_size=4, colbert=True)
    b = half.encode(texts, max_length=96, batch_size=4, colbert=True)
    assert a.dense is not None and b.dense is not None and b.dense.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(b.dense, axis=1), 1.0, atol=1e-6)
    assert ((a.dense * b.dense).sum(axis=1) >= cos_min).all()
    np.testing.assert_allclose(b.dense @ b.dense.T, a.dense @ a.dense.T, atol=score_tol)
    assert a.sparse is not None and b.sparse is not None and a.colbert is not None and b.colbert is not None
    for x, y in zip(a.sparse, b.sparse, strict=True):
        shared = x.keys() & y.keys()
        assert len(shared) >= 0.8 * len(x.keys() | y.keys())  # weights near 0 may flip sign
        assert all(abs(x[k] - y[k]) <= vec_tol for k in shared)
    for x, y in zip(a.colbert, b.colbert, strict=True):
        assert y.dtype == np.float32 and y.shape == x.shape
        np.testing.assert_allclose(y, x, atol=vec_tol)
    queries = _queries(["en", "zh"])
    docs = {f"d{i}": t for i, t in enumerate(texts)}
    pairs = [(qi, f"d{pi}") for qi in range(len(queries)) for pi in range(len(texts)) if (qi + pi) % 4 == 0]
    np.testing.assert_allclose(
        multivec_scores(half, queries, docs, pairs, 32, 96, 4),
        multivec_scores(enc, queries, docs, pairs, 32, 96, 4),
        atol=score_tol,
    )


def test_device_and_dtype_resolution(monkeypatch):
    cpu = torch.device("cpu")
    assert encoding._resolve_dtype("auto", cpu) == torch.float32
    assert encoding._resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16  # no GPU needed to decide
    assert encoding._resolve_dtype("fp16", cpu) == torch.float16
    with pytest.raises(Exception, match="unknown dtype 'int8'"):
        encoding._resolve_dtype("int8", cpu)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert encoding._resolve_device("auto") == cpu
    with pytest.raises(Exception, match="CUDA is not available"):
        encoding._resolve_device("cuda")
    with pytest.raises(Exception, match="unknown device 'tpu0'"):
        encoding._resolve_device("tpu0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert encoding._resolve_device("auto") == torch.device("cuda")


def test_tokenization_fast_path_and_fallback(enc, monkeypatch):
    texts = [*_queries(), *_passages(per_lang=2), "", "a <s> b </s> <pad>", "ＡＢＣ ﬁne"]
    ids, lengths = enc._tokenize(texts, 40)
    assert enc._backends[40] is not None  # the backend path was checked and is in use
    want = enc.tokenizer(texts, truncation=True, max_length=40)["input_ids"]
    assert [row[:n].tolist() for row, n in zip(ids, lengths, strict=True)] == want
    assert all((row[n:] == enc.pad_id).all() for row, n in zip(ids, lengths, strict=True))

    monkeypatch.setattr(enc, "_backends", {})
    monkeypatch.setattr(M3Encoder, "_make_backend", lambda self, probe, max_length: None)
    ids2, lengths2 = enc._tokenize(texts, 40)
    assert np.array_equal(ids, ids2) and np.array_equal(lengths, lengths2)


def test_score_functions():
    assert sparse_score({1: 0.5, 2: 2.0}, {2: 3.0, 7: 1.0}) == pytest.approx(6.0)
    assert sparse_score({}, {1: 1.0}) == 0.0
    q = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    p = np.array([[0.6, 0.8], [-1.0, 0.0]], dtype=np.float32)
    assert colbert_score(q, p) == pytest.approx((0.6 + 0.8) / 2)


def test_multivec_encodes_each_passage_once(enc, monkeypatch):
    seen: list[str] = []
    real = M3Encoder._tokenize

    def counting(self, texts, max_length):
        seen.extend(texts)
        return real(self, texts, max_length)

    monkeypatch.setattr(M3Encoder, "_tokenize", counting)
    queries = ["river length", "capital city", "unused query"]
    docs = {"a": "The river is long.", "b": "Paris is the capital.", "c": "never scored"}
    pairs = [(0, "a"), (1, "a"), (1, "b"), (0, "b"), (0, "a")]
    got = multivec_scores(enc, queries, docs, pairs, 16, 32, batch_size=2)
    assert sorted(seen) == sorted(["river length", "capital city", "The river is long.", "Paris is the capital."])
    assert got[0] == got[4]
    q = enc.encode(queries[:2], max_length=16, batch_size=2, sparse=False, colbert=True).colbert
    p = enc.encode([docs["a"], docs["b"]], max_length=32, batch_size=2, sparse=False, colbert=True).colbert
    assert q is not None and p is not None
    np.testing.assert_allclose(got, [colbert_score(q[i], p[j]) for i, j in [(0, 0), (1, 0), (1, 1), (0, 1), (0, 0)]])
    assert multivec_scores(enc, queries, docs, [], 16, 32, 2).shape == (0,)
    with pytest.raises(KeyError, match="'zzz'"):
        multivec_scores(enc, queries, docs, [(0, "zzz")], 16, 32, 2)


# ---------------------------------------------------------------------------------------------
# loading errors


def _copy_ckpt(src: Path, dst: Path, skip: set[str] = frozenset()) -> Path:  # type: ignore[assignment]
    dst.mkdir()
    for f in src.iterdir():
        if f.name not in skip:
            (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_missing_sparse_head(ckpt, tmp_path):
    folder = _copy_ckpt(ckpt, tmp_path / "m", {"sparse_linear.pt"})
    with pytest.raises(InputError, match="sparse_linear.pt") as err:
        M3Encoder.load(str(folder), device="cpu")
    assert str(folder / "sparse_linear.pt") in str(err.value)
    loaded = M3Encoder.load(str(folder), device="cpu", need_sparse=False)  # not needed: fine
    with pytest.raises(Exception, match="without the sparse head"):
        loaded.encode(["x"], max_length=8, batch_size=1, sparse=True)


def test_missing_colbert_head(ckpt, tmp_path):
    folder = _copy_ckpt(ckpt, tmp_path / "m", {"colbert_linear.pt"})
    with pytest.raises(InputError, match="colbert_linear.pt"):
        M3Encoder.load(str(folder), device="cpu")
    assert M3Encoder.load(str(folder), device="cpu", need_colbert=False).colbert_linear is None


@pytest.mark.parametrize("content", [b"", b"not a torch file", b"PK\x03\x04 truncated zip"])
def test_corrupt_sparse_head(ckpt, tmp_path, content):
    folder = _copy_ckpt(ckpt, tmp_path / "m")
    (folder / "sparse_linear.pt").write_bytes(content)
    with pytest.raises(InputError) as err:
        M3Encoder.load(str(folder), device="cpu")
    assert str(folder / "sparse_linear.pt") in str(err.value)


def test_wrong_head_shape(ckpt, tmp_path):
    folder = _copy_ckpt(ckpt, tmp_path / "m")
    torch.save(torch.nn.Linear(32, 2).state_dict(), folder / "sparse_linear.pt")
    with pytest.raises(InputError, match="sparse_linear.pt"):
        M3Encoder.load(str(folder), device="cpu")


def test_missing_directory_and_offline_hub(tmp_path, monkeypatch):
    with pytest.raises(InputError, match="does not exist"):
        M3Encoder.load(str(tmp_path / "nope" / "model"), device="cpu")
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(DownloadError, match="set the config key `model` to a local directory"):
        M3Encoder.load("miracl-eval-tests/no-such-model", device="cpu")


def test_bad_lengths(enc):
    with pytest.raises(ValueError, match="exceeds"):
        enc.encode(["x"], max_length=1000, batch_size=1)
    with pytest.raises(ValueError):
        enc.encode(["x"], max_length=8, batch_size=0)


# ---------------------------------------------------------------------------------------------
# streamed Parquet outputs


@pytest.fixture(scope="module")
def corpus_parquet(tmp_path_factory) -> Path:
    rows = []
    for path in CORPORA[:6]:
        for line in path.read_text(encoding="utf-8").splitlines()[:12]:
            rec = json.loads(line)
            rows.append({**rec, "contents": f"{rec['title']} {rec['text']}"})
    path = tmp_path_factory.mktemp("corpus") / "corpus.parquet"
    table = pa.Table.from_pylist(rows, schema=schemas.CORPUS)
    pq.write_table(table, path, row_group_size=10)  # shards straddle row groups
    return path


def _sparse_rows(table: pa.Table) -> list[dict[int, float]]:
    return [
        dict(zip(t, w, strict=True))
        for t, w in zip(table["token_ids"].to_pylist(), table["weights"].to_pylist(), strict=True)
    ]


def test_corpus_shards(enc, corpus_parquet, tmp_path):
    corpus = pq.read_table(corpus_parquet)
    n = corpus.num_rows
    assert n == 72 and num_shards(corpus_parquet, 25) == 3 and num_shards(corpus_parquet, 72) == 1
    dense, sparse, stats = [], [], []
    for shard in range(3):
        stats.append(
            encode_corpus_shard(
                corpus_parquet, shard, 25, tmp_path / f"d{shard}.parquet", tmp_path / f"s{shard}.parquet",
                enc, max_length=48, batch_size=4,
            )
        )  # fmt: skip
        dense.append(pq.read_table(tmp_path / f"d{shard}.parquet"))
        sparse.append(pq.read_table(tmp_path / f"s{shard}.parquet"))
    assert [s["rows"] for s in stats] == [25, 25, 22]
    assert [(s["start"], s["stop"]) for s in stats] == [(0, 25), (25, 50), (50, 72)]
    assert all(s["passages_per_s"] > 0 and s["dim"] == 32 for s in stats)
    d, s = pa.concat_tables(dense), pa.concat_tables(sparse)
    assert d.schema == schemas.dense_schema(32) and s.schema == schemas.SPARSE
    assert d["docid"].to_pylist() == s["docid"].to_pylist() == corpus["docid"].to_pylist()

    whole = enc.encode(corpus["contents"].to_pylist(), max_length=48, batch_size=4)
    np.testing.assert_allclose(np.array(d["vector"].to_pylist(), dtype=np.float32), whole.dense, atol=TOL)
    assert whole.sparse is not None
    for got, want in zip(_sparse_rows(s), whole.sparse, strict=True):
        assert got.keys() == want.keys() and all(abs(got[k] - want[k]) <= TOL for k in got)
        assert list(got) == sorted(got)

    with pytest.raises(ValueError, match="out of range"):
        encode_corpus_shard(corpus_parquet, 3, 25, tmp_path / "x.parquet", None, enc, 48, 4)
    with pytest.raises(ValueError, match="out of range"):
        encode_corpus_shard(corpus_parquet, -1, 25, tmp_path / "x.parquet", None, enc, 48, 4)
    assert not (tmp_path / "x.parquet").exists()


def test_corpus_shard_options(ckpt, corpus_parquet, tmp_path):
    # model given as a path; float16 vectors; only one of the two outputs
    stats = encode_corpus_shard(
        corpus_parquet, 1, 30, tmp_path / "d.parquet", None, str(ckpt), 40, 8, device="cpu", dense_dtype="float16"
    )
    table = pq.read_table(tmp_path / "d.parquet")
    assert stats["rows"] == table.num_rows == 30
    assert table.schema == schemas.dense_schema(32, "float16")
    only_sparse = encode_corpus_shard(corpus_parquet, 2, 30, None, tmp_path / "s.parquet", str(ckpt), 40, 8, "cpu")
    assert only_sparse["rows"] == pq.read_table(tmp_path / "s.parquet").num_rows == 12
    with pytest.raises(ValueError, match="nothing to write"):
        encode_corpus_shard(corpus_parquet, 0, 30, None, None, str(ckpt), 40, 8, "cpu")


def test_corpus_shard_missing_column(enc, tmp_path):
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"docid": ["1"], "text": ["x"]}), bad)
    with pytest.raises(InputError, match="contents"):
        encode_corpus_shard(bad, 0, 10, tmp_path / "d.parquet", None, enc, 16, 2)


def test_corpus_shard_is_atomic(enc, corpus_parquet, tmp_path, monkeypatch):
    out = tmp_path / "out"
    calls = {"n": 0}
    real = M3Encoder._encode_arrays

    def failing(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("simulated failure mid-shard")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(M3Encoder, "_chunk_rows", lambda self, batch_size: 8)
    monkeypatch.setattr(M3Encoder, "_encode_arrays", failing)
    with pytest.raises(RuntimeError, match="simulated"):
        encode_corpus_shard(corpus_parquet, 0, 40, out / "d.parquet", out / "s.parquet", enc, 48, 4)
    assert calls["n"] == 3  # two chunks were written before the failure
    assert list(out.iterdir()) == []  # no output and no temporary file


def test_both_or_neither_when_publishing_fails(enc, corpus_parquet, tmp_path, monkeypatch):
    out = tmp_path / "out"
    real_replace = atomic.os.replace

    def replace(src, dst):
        if Path(dst).name == "d.parquet":  # the dense file is published after the sparse one
            raise OSError("simulated failure while publishing")
        return real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", replace)
    with pytest.raises(OSError, match="publishing"):
        encode_corpus_shard(corpus_parquet, 0, 40, out / "d.parquet", out / "s.parquet", enc, 48, 4)
    assert [p.name for p in out.iterdir() if not p.name.startswith(".")] == []


def test_encode_queries(enc, tmp_path):
    queries = _queries(["th", "ja", "zh", "en"])
    qpath = tmp_path / "queries.parquet"
    qids = [str(i) if i % 2 else f"{i}#0" for i in range(len(queries))]
    pq.write_table(pa.table({"qid": qids, "query": queries}, schema=schemas.QUERIES), qpath)
    stats = encode_queries(qpath, tmp_path / "qd.parquet", tmp_path / "qs.parquet", enc, 32, 4)
    assert stats["rows"] == len(queries)
    d, s = pq.read_table(tmp_path / "qd.parquet"), pq.read_table(tmp_path / "qs.parquet")
    assert d.schema == schemas.dense_schema(32, key="qid") and s.schema == schemas.QUERY_SPARSE
    assert d["qid"].to_pylist() == s["qid"].to_pylist() == qids
    want = enc.encode(queries, max_length=32, batch_size=4)
    np.testing.assert_allclose(np.array(d["vector"].to_pylist(), dtype=np.float32), want.dense, atol=TOL)
    for got, exp in zip(_sparse_rows(s), want.sparse or [], strict=True):
        assert got.keys() == exp.keys()


def test_encoding_module_does_not_import_flagembedding():
    source = Path(encoding.__file__).read_text(encoding="utf-8")
    assert "import FlagEmbedding" not in source and "from FlagEmbedding" not in source
