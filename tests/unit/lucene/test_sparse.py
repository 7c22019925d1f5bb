"""BGE-M3 lexical weights as a Lucene impact index: quantization, exact integer dot products."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from miracl_eval import schemas
from miracl_eval.errors import InputError, MiraclEvalError
from miracl_eval.lucene.sparse import build_sparse_index, iter_query_vectors, quantize, sparse_search
from miracl_eval.runs import read_run
from tests.helpers import load_sparse, query_string, read_trec, sparse_dot, write_weights


def quantized(vec: dict[int, float]) -> dict[int, int]:
    """Integer weights of a vector as stored (float32), the way the index sees them."""
    return {t: q for t, w in vec.items() if (q := quantize(np.float32(w))) > 0}


def int_dot(q: dict[int, float], p: dict[int, float]) -> int:
    qq, pp = quantized(q), quantized(p)
    return sum(w * pp[t] for t, w in qq.items() if t in pp)


def test_quantize_rule() -> None:
    assert quantize(0.0) == 0
    assert quantize(0.001) == 1  # ceil: any positive weight survives
    assert quantize(0.25) == 25
    assert quantize(0.251) == 26
    assert quantize(0.3, factor=10) == 3
    assert quantize(np.float32(0.5)) == 50
    # The stored float32 value is quantized exactly: float32(0.2) = 0.2000000030 -> 21.
    assert quantize(np.float32(0.2)) == 21 and quantize(0.2) == 20
    assert query_string({99: 0.011, 17: 0.02, 5: 0.0}) == "17 17 99 99"


def test_sparse_dot_is_float_dot() -> None:
    q = {1: 0.5, 2: 0.25, 3: 1.0}
    p = {2: 0.5, 3: 0.125, 4: 9.0}
    assert sparse_dot(q, p) == 0.25 * 0.5 + 1.0 * 0.125
    assert sparse_dot(p, q) == sparse_dot(q, p)
    assert sparse_dot(q, {}) == 0.0


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    """A real impact index over random weights, in two shards (built once: the JVM is slow)."""
    tmp = tmp_path_factory.mktemp("sparse")
    rng = np.random.default_rng(1)
    vocab = 40
    docs: dict[str, dict[int, float]] = {}
    for i in range(120):
        tokens = rng.choice(vocab, size=rng.integers(3, 12), replace=False)
        docs[f"doc{i}"] = {int(t): float(np.float32(rng.uniform(0.001, 0.4))) for t in tokens}
    docs["doc0"][7] = 0.3  # token 7 ...
    for vec in docs.values():  # ... and token 39 occur in every passage (idf 0)
        vec[39] = float(np.float32(rng.uniform(0.01, 0.3)))
    docs["q3"] = {1: 0.9, 2: 0.8, 39: 0.05}  # a passage whose docid equals a qid
    docs["empty"] = {5: 0.0}  # quantizes to nothing: not indexed
    queries: dict[str, dict[int, float]] = {}
    for i in range(10):
        tokens = rng.choice(vocab - 1, size=rng.integers(2, 6), replace=False)
        queries[f"q{i}"] = {int(t): float(np.float32(rng.uniform(0.001, 0.4))) for t in tokens}
    queries["q3"].update({1: 0.3, 2: 0.2})
    queries["q9"][39] = 0.2  # a query term found in every passage
    queries["ties"] = {39: 0.01}  # every passage matches, scores 1..30: many ties
    queries["nothing"] = {}  # no terms: no hits
    names = list(docs)
    shards = [
        write_weights(tmp / "p0.parquet", {d: docs[d] for d in names[:70]}),
        write_weights(tmp / "p1.parquet", {d: docs[d] for d in names[70:]}),
    ]
    qpath = write_weights(tmp / "queries.parquet", queries, key="qid")
    result = build_sparse_index(shards, tmp / "index", log_path=tmp / "index.log", heap="1g")
    return tmp, docs, queries, shards, qpath, result


def test_index_holds_the_non_empty_passages(collection) -> None:
    tmp, docs, _, _, _, result = collection
    assert result.documents == len(docs) - 1  # "empty" left out
    assert (tmp / "index").is_dir()
    assert not [p for p in tmp.iterdir() if p.name.startswith(".")]


def test_scores_are_exact_integer_dot_products(collection) -> None:
    tmp, docs, queries, _, qpath, _ = collection
    k = 30
    n = sparse_search(tmp / "index", qpath, tmp / "run.parquet", tmp / "run.trec", k=k, threads=2)
    assert n == len(queries) - 1  # the query without terms is not searched
    run = read_run(tmp / "run.parquet")
    got: dict[str, list[tuple[str, float]]] = {}
    for row in run.to_pylist():
        got.setdefault(row["qid"], []).append((row["docid"], row["score"]))
    assert list(got) == [q for q in queries if q != "nothing"]
    for qid, qvec in queries.items():
        if qid == "nothing":
            continue
        expected = sorted(
            ((d, float(int_dot(qvec, p))) for d, p in docs.items() if int_dot(qvec, p) > 0),
            key=lambda h: (-h[1], h[0]),
        )[:k]
        assert got[qid] == expected, qid
    # The query whose docid twin exists finds it; the term in every passage counts.
    assert "q3" in [d for d, _ in got["q3"]]
    assert len(got["q9"]) == k
    tie_scores = [s for _, s in got["ties"]]
    assert len(got["ties"]) == k and len(set(tie_scores)) < k  # ties resolved by docid, scores exact
    trec = read_trec(tmp / "run.trec")
    assert trec.column("score").to_pylist() == run.column("score").to_pylist()


def test_pyserini_query_string_scores_dot_product(collection) -> None:
    """LuceneImpactSearcher(index, query_encoder=None).search('17 17 99') = sum of q_w * d_w."""
    tmp, docs, _, _, _, _ = collection
    from miracl_eval.lucene.offline import import_pyserini

    LuceneImpactSearcher = import_pyserini("pyserini.search.lucene").LuceneImpactSearcher

    searcher = LuceneImpactSearcher(str(tmp / "index"), query_encoder=None, min_idf=float("-inf"))
    query = {17: 0.02, 3: 0.011}
    assert query_string(query) == "3 3 17 17"
    hits = {h.docid: h.score for h in searcher.search("3 3 17 17", k=1000)}
    want = {d: int_dot(query, p) for d, p in docs.items() if int_dot(query, p) > 0}
    assert {d: round(s) for d, s in hits.items()} == want
    # Anserini lowers tied scores by 1e-6 per tie (float32); nothing else differs.
    assert max(abs(s - want[d]) for d, s in hits.items()) <= 1e-6 * len(hits)
    assert any(s != want[d] for d, s in hits.items())  # (this query has ties, so the offsets show)
    # pyserini's default searcher agrees for these terms, but its min_idf=0 silently drops a
    # term found in every passage (token 39), which is why sparse_search passes min_idf=-inf.
    default = LuceneImpactSearcher(str(tmp / "index"), query_encoder=None)
    assert {h.docid: round(h.score) for h in default.search("3 3 17 17", k=1000)} == want
    assert len(default.search("39", k=5)) == 0
    assert len(searcher.search("39", k=5)) == 5


def test_query_vectors_are_quantized_weights(collection) -> None:
    _, _, queries, _, qpath, _ = collection
    chunks = list(iter_query_vectors(qpath, chunk=4))
    qids = [q for qs, _ in chunks for q in qs]
    vectors = [v for _, vs in chunks for v in vs]
    assert qids == [q for q in queries if q != "nothing"]
    for qid, vector in zip(qids, vectors, strict=True):
        assert {int(t): w for t, w in vector.items()} == quantized(queries[qid])


def test_load_sparse_roundtrip(collection) -> None:
    _, docs, _, shards, _, _ = collection
    loaded = load_sparse(shards)
    assert list(loaded) == list(docs)
    assert loaded["doc3"] == pytest.approx(docs["doc3"])


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"docid": ["a"], "token_ids": [[1, 2]], "weights": [[0.1]]}, "record 1 .a.: token_ids and weights differ"),
        (
            {"docid": ["a", "b"], "token_ids": [[1], [2, 2]], "weights": [[0.1], [0.1, 0.2]]},
            "record 2 .b.: a token id occurs twice",
        ),
        (
            {"docid": ["a", "b"], "token_ids": [[3, 1], [5, 1, 5]], "weights": [[0.1, 0.1], [0.1, 0.2, 0.3]]},
            "record 2 .b.: a token id occurs twice",
        ),
        ({"docid": ["a"], "token_ids": [[1]], "weights": [[-0.1]]}, "record 1 .a.: negative"),
        ({"docid": ["a"], "token_ids": [[1]], "weights": [[float("nan")]]}, "non-finite"),
        (
            {"docid": ["a", "b", "c"], "token_ids": [[1], [], [-4]], "weights": [[0.1], [], [0.2]]},
            "record 3 .c.: negative token id",
        ),
    ],
)
def test_bad_weights_name_file_and_record(tmp_path: Path, table: dict, message: str) -> None:
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table(table, schema=schemas.SPARSE), path)
    with pytest.raises(InputError, match=message) as err:
        build_sparse_index([path], tmp_path / "index")
    assert str(path) in str(err.value)
    assert not (tmp_path / "index").exists()


def test_corrupt_shard_and_all_empty(tmp_path: Path) -> None:
    good = write_weights(tmp_path / "good.parquet", {"a": {1: 0.5}})
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(good.read_bytes()[:40])
    with pytest.raises(InputError) as err:
        build_sparse_index([good, bad], tmp_path / "index")
    assert str(bad) in str(err.value)
    empty = write_weights(tmp_path / "empty.parquet", {"a": {}, "b": {3: 0.0}})
    with pytest.raises(MiraclEvalError, match="no passage has a lexical weight"):
        build_sparse_index([empty], tmp_path / "index")
    assert not (tmp_path / "index").exists()


def test_collection_lines_are_the_json_of_each_record(tmp_path: Path) -> None:
    """The column-wise JSONL writers give exactly the lines json.dumps gives, escapes included."""
    import json

    from miracl_eval.encoders.outputs import iter_sparse_batches
    from miracl_eval.lucene.anserini import json_strings
    from miracl_eval.lucene.sparse import _impact_lines

    tricky = ["plain", 'with "quotes"', "back\\slash", "new\nline\ttab\r", "ctl\x01\x1f", "ünïcødé 漢字 😀", ""]
    assert json_strings(pa.array(tricky)).to_pylist() == [json.dumps(v, ensure_ascii=False) for v in tricky]
    # slices, chunks, large strings, and arrays with nothing to escape take the same path
    mixed = [*tricky, "del\x7f", "sep\u2028", "x" * 300] * 3
    want = [json.dumps(v, ensure_ascii=False) for v in mixed]
    for values, expected in (
        (pa.array(mixed).slice(5, 11), want[5:16]),
        (pa.chunked_array([pa.array(mixed[:4]), pa.array(mixed[4:])]), want),
        (pa.array(mixed, pa.large_string()), want),
        (pa.array(["plain", "", "ünï"]).slice(1), ['""', '"ünï"']),
    ):
        assert json_strings(values).to_pylist() == expected
    vectors = {d: {3: 0.25, 7: 0.001, 9: 0.0} if i % 2 else {} for i, d in enumerate(tricky)}
    path = write_weights(tmp_path / "w.parquet", vectors)
    [batch] = iter_sparse_batches(path)
    want = [json.dumps({"id": d, "vector": {"3": 25, "7": 1}}, ensure_ascii=False) + "\n" for d in tricky[1::2]]
    assert _impact_lines(batch, 100, "ceil").to_pylist() == want  # empty and all-zero vectors left out
