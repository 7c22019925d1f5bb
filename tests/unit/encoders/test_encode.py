"""The encoding stages of every family: streamed Parquet shards and queries, published all together or none."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from miracl_eval import atomic, schemas
from miracl_eval.encoders import base
from miracl_eval.encoders.encode import encode_corpus_shard, encode_queries
from miracl_eval.encoders.registry import get_family
from miracl_eval.errors import InputError
from miracl_eval.inputs.preprocess import join_title
from tests.helpers import BATCH_TOL, assert_same_weights, sample_queries

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TOL = 1e-5
#: family -> (checkpoint kind, settings beyond the checkpoint)
FAMILIES = {
    "bge-m3": ("bge-m3", {"query_max_length": 32, "passage_max_length": 48}),
    "dense": (
        "xlm-r",
        {
            "pooling": "mean",
            "normalize": True,
            "passage_max_length": 48,
            "query_prefix": "query: ",
            "passage_prefix": "passage: ",
        },
    ),
    "splade": ("mlm", {"passage_max_length": 48}),
}


def _spec(tiny_checkpoints, family: str, **settings) -> dict:
    kind, defaults = FAMILIES[family]
    return get_family(family).resolve({"checkpoint": str(tiny_checkpoints(kind)), **defaults, **settings})


def _outputs(family: str, folder: Path, prefix: str = "") -> dict[str, Path]:
    return {kind: folder / f"{prefix}{kind}.parquet" for kind in get_family(family).outputs}


def _sparse_rows(table: pa.Table) -> list[tuple[list[int], list[float]]]:
    return list(zip(table["token_ids"].to_pylist(), table["weights"].to_pylist(), strict=True))


def _assert_same(dense_file: Path | None, sparse_file: Path | None, want, ids: list[str], key: str) -> None:
    if dense_file is not None:
        table = pq.read_table(dense_file)
        assert table[key].to_pylist() == ids
        np.testing.assert_allclose(np.array(table["vector"].to_pylist(), dtype=np.float32), want.dense, atol=TOL)
    if sparse_file is not None:
        table = pq.read_table(sparse_file)
        assert table.schema == (schemas.SPARSE if key == "docid" else schemas.QUERY_SPARSE)
        assert table[key].to_pylist() == ids
        for (tokens, weights), (want_t, want_w) in zip(_sparse_rows(table), want.sparse, strict=True):
            assert tokens == sorted(tokens)
            assert_same_weights(tokens, weights, want_t, want_w, BATCH_TOL["bge-m3 sparse"])


@pytest.mark.parametrize("family", list(FAMILIES))
def test_corpus_shards(tiny_checkpoints, corpus_parquet, tmp_path, family):
    spec = _spec(tiny_checkpoints, family)
    corpus = pq.read_table(corpus_parquet)
    assert corpus.num_rows == 72 and schemas.num_chunks(corpus_parquet, 25) == 3
    stats, files = [], []
    for shard in range(3):
        files.append(_outputs(family, tmp_path, f"{shard}-"))
        stats.append(encode_corpus_shard(corpus_parquet, shard, 25, files[-1], spec, batch_size=4, device="cpu"))
    assert [s["rows"] for s in stats] == [25, 25, 22]
    assert [(s["start"], s["stop"]) for s in stats] == [(0, 25), (25, 50), (50, 72)]
    encoder = get_family(family).load(spec, device="cpu")
    assert all(s["passages_per_s"] > 0 and s["dim"] == encoder.dim for s in stats)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for f in files for p in f.values())
    merged = {}
    for kind in get_family(family).outputs:
        merged[kind] = tmp_path / "merged" / f"{kind}.parquet"
        merged[kind].parent.mkdir(exist_ok=True)
        pq.write_table(pa.concat_tables([pq.read_table(f[kind]) for f in files]), merged[kind])
    whole = encoder.encode(corpus["contents"].to_pylist(), "passage", batch_size=4)
    _assert_same(merged.get("dense"), merged.get("sparse"), whole, corpus["docid"].to_pylist(), "docid")
    if "dense" in merged:
        assert pq.read_table(merged["dense"]).schema == schemas.dense_schema(encoder.dim)  # type: ignore[arg-type]

    for bad in (3, -1):
        with pytest.raises(ValueError, match="out of range"):
            encode_corpus_shard(corpus_parquet, bad, 25, _outputs(family, tmp_path / "x"), spec, 4, "cpu")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_encode_queries(tiny_checkpoints, tmp_path, family):
    spec = _spec(tiny_checkpoints, family)
    queries = sample_queries(["th", "ja", "zh", "ar", "hi", "ru", "en"])
    qpath = tmp_path / "queries.parquet"
    qids = [str(i) if i % 2 else f"{i}#0" for i in range(len(queries))]
    pq.write_table(pa.table({"qid": qids, "query": queries}, schema=schemas.QUERIES), qpath)
    out = _outputs(family, tmp_path / "out")
    stats = encode_queries(qpath, out, spec, batch_size=4, device="cpu")
    assert stats["rows"] == len(queries)
    encoder = get_family(family).load(spec, device="cpu")
    want = encoder.encode(queries, "query", batch_size=4)
    _assert_same(out.get("dense"), out.get("sparse"), want, qids, "qid")
    if "dense" in out:
        assert pq.read_table(out["dense"]).schema == schemas.dense_schema(encoder.dim, key="qid")  # type: ignore[arg-type]


def test_title_join_template_joins_title_and_text(tiny_checkpoints, corpus_parquet, tmp_path):
    spec = _spec(tiny_checkpoints, "dense", title_join="{title}. {text}")
    out = _outputs("dense", tmp_path)
    encode_corpus_shard(corpus_parquet, 0, 100, out, spec, batch_size=8, device="cpu")
    corpus = pq.read_table(corpus_parquet).to_pylist()
    texts = [join_title(r["title"], r["text"], "{title}. {text}") for r in corpus]
    assert texts != [r["contents"] for r in corpus]
    want = get_family("dense").load(spec, device="cpu").encode(texts, "passage", batch_size=8)
    _assert_same(out["dense"], None, want, [r["docid"] for r in corpus], "docid")


def test_float16_vectors_and_output_checks(tiny_checkpoints, corpus_parquet, tmp_path):
    spec = _spec(tiny_checkpoints, "dense")
    out = _outputs("dense", tmp_path)
    stats = encode_corpus_shard(corpus_parquet, 1, 30, out, spec, 8, device="cpu", dense_dtype="float16")
    table = pq.read_table(out["dense"])
    assert stats["rows"] == table.num_rows == 30 and table.schema == schemas.dense_schema(32, "float16")
    with pytest.raises(ValueError, match="dense family's outputs"):
        encode_corpus_shard(corpus_parquet, 0, 30, {"sparse": tmp_path / "s.parquet"}, spec, 8, "cpu")
    with pytest.raises(ValueError, match=r"bge-m3 family's outputs \(dense, sparse\)"):
        encode_corpus_shard(corpus_parquet, 0, 30, out, _spec(tiny_checkpoints, "bge-m3"), 8, "cpu")
    with pytest.raises(ValueError, match="dense_dtype"):
        encode_corpus_shard(corpus_parquet, 0, 30, out, spec, 8, "cpu", dense_dtype="int8")


def test_corpus_shard_missing_column(tiny_checkpoints, tmp_path):
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"docid": ["1"], "text": ["x"]}), bad)
    with pytest.raises(InputError, match="contents"):
        encode_corpus_shard(bad, 0, 10, _outputs("splade", tmp_path), _spec(tiny_checkpoints, "splade"), 2, "cpu")
    with pytest.raises(InputError, match="title"):
        spec = _spec(tiny_checkpoints, "splade", title_join="{title} {text}")
        encode_corpus_shard(bad, 0, 10, _outputs("splade", tmp_path), spec, 2, "cpu")


@pytest.mark.parametrize("family", ["bge-m3", "splade"])
def test_corpus_shard_is_atomic(tiny_checkpoints, corpus_parquet, tmp_path, monkeypatch, family):
    out = tmp_path / "out"
    calls = {"n": 0}
    real = base.TransformerEncoder.run_batch

    def failing(self, *args, **kwargs):  # the forward pass, in the pipeline's model thread
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("simulated failure mid-shard")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(base, "chunk_rows", lambda batch_size: 8)
    monkeypatch.setattr(base.TransformerEncoder, "run_batch", failing)
    with pytest.raises(RuntimeError, match="simulated"):
        encode_corpus_shard(corpus_parquet, 0, 40, _outputs(family, out), _spec(tiny_checkpoints, family), 4, "cpu")
    assert calls["n"] == 3  # the first window was written before the failure (windows of 8, batches of 4)
    assert list(out.iterdir()) == []  # no output and no temporary file


def test_all_or_none_when_publishing_fails(tiny_checkpoints, corpus_parquet, tmp_path, monkeypatch):
    out = tmp_path / "out"
    real_replace = atomic.os.replace

    def replace(src, dst):
        if Path(dst).name == "dense.parquet":  # the dense file is published after the sparse one
            raise OSError("simulated failure while publishing")
        return real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", replace)
    with pytest.raises(OSError, match="publishing"):
        encode_corpus_shard(corpus_parquet, 0, 40, _outputs("bge-m3", out), _spec(tiny_checkpoints, "bge-m3"), 4, "cpu")
    assert [p.name for p in out.iterdir() if not p.name.startswith(".")] == []


def test_null_text_names_the_row(tiny_checkpoints, tmp_path):
    qpath = tmp_path / "queries.parquet"
    pq.write_table(pa.table({"qid": ["1", "2"], "query": ["ok", None]}, schema=schemas.QUERIES), qpath)
    with pytest.raises(InputError, match="row 2"):
        encode_queries(qpath, _outputs("dense", tmp_path / "o"), _spec(tiny_checkpoints, "dense"), 2, "cpu")
    assert not (tmp_path / "o").exists() or list((tmp_path / "o").iterdir()) == []


def test_a_spec_for_one_role_encodes_that_role(tmp_path: Path, tiny_checkpoint: Path) -> None:
    """The rules pass each encoding job only its role's settings (registry.encoding_settings)."""
    from miracl_eval.encoders.registry import encoding_settings, get_family

    spec = get_family("bge-m3").resolve({"checkpoint": str(tiny_checkpoint)})
    queries = encoding_settings(spec, "query")
    assert "passage_max_length" not in queries and "title_join" not in queries and "weights" not in queries
    full = get_family("bge-m3").load(spec, device="cpu", dtype="float32")
    only = get_family("bge-m3").load(queries, device="cpu", dtype="float32")
    texts = ["Ziwa Viktoria ni ziwa kubwa", "日本の首都はどこですか"]
    np.testing.assert_array_equal(only.encode(texts, "query", 2).dense, full.encode(texts, "query", 2).dense)
    with pytest.raises(KeyError):
        only.encode(texts, "passage", 2)
