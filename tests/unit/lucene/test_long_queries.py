"""Queries beyond Lucene's 1,024 clauses (a pasted passage, a SPLADE expansion) are searched, not lost.

Anserini builds one clause per distinct query term; past Lucene's limit the search thread dies and
pyserini's ``batch_search`` fails every query of the batch ("queryCount = 2 is not equal to
completedTaskCount = 1"). The searches raise the limit to what their queries need.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from miracl_eval import schemas
from miracl_eval.inputs.preprocess import build_corpus
from miracl_eval.lucene.anserini import DEFAULT_MAX_CLAUSES
from miracl_eval.lucene.bm25 import bm25_search, build_bm25_index
from miracl_eval.lucene.sparse import build_sparse_index, quantize, sparse_search
from miracl_eval.runs import read_run
from tests.helpers import load_sparse, write_weights

WORDS = [f"w{i}" for i in range(1_200)]


def _hits(run: Path) -> dict[str, list[tuple[str, float]]]:
    out: dict[str, list[tuple[str, float]]] = {}
    for row in read_run(run).to_pylist():
        out.setdefault(row["qid"], []).append((row["docid"], row["score"]))
    return out


def test_a_bm25_query_of_1107_words_ranks_as_pyserinis_searcher_with_the_limit_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    src = tmp_path / "corpus.jsonl"
    passages = {f"d{i}": " ".join(WORDS[i * 10 : i * 10 + 15]) for i in range(110)}
    src.write_text("".join(json.dumps({"docid": d, "title": "", "text": t}) + "\n" for d, t in passages.items()))
    build_corpus([src], tmp_path / "corpus.parquet", "{title} {text}")
    build_bm25_index(tmp_path / "corpus.parquet", tmp_path / "bm25", "en")
    long_query = " ".join(WORDS[:1_107])
    queries = tmp_path / "queries.parquet"
    table = pa.table({"qid": ["long", "short"], "query": [long_query, "w3 w15"]}, schema=schemas.QUERIES)
    pq.write_table(table, queries)
    caplog.set_level("INFO", logger="miracl_eval.lucene")

    assert bm25_search(tmp_path / "bm25", queries, tmp_path / "run.parquet", tmp_path / "run.trec") == 2

    assert "1 query beyond Lucene's 1,024 clauses, searched with the limit raised: long (1,107 terms)" in caplog.text
    ours = _hits(tmp_path / "run.parquet")
    assert set(ours) == {"long", "short"} and len(ours["long"]) == len(passages)  # each holds some of its words
    from miracl_eval.lucene.offline import import_pyserini

    LuceneSearcher = import_pyserini("pyserini.search.lucene").LuceneSearcher

    searcher = LuceneSearcher(str(tmp_path / "bm25"))  # the same JVM: its clause limit is raised
    searcher.set_bm25(0.9, 0.4)
    for qid, text in (("long", long_query), ("short", "w3 w15")):
        direct = [(h.docid, float(h.score)) for h in searcher.search(text, k=1000)]
        assert sorted(ours[qid]) == sorted(direct), qid
    searcher.close()


def test_an_impact_query_of_1100_terms_scores_the_exact_dot_products(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    docs = {
        f"d{i}": {int(t): float(np.float32(rng.uniform(0.01, 0.5))) for t in rng.choice(1_500, 40, replace=False)}
        for i in range(80)
    }
    shard = write_weights(tmp_path / "p0.parquet", docs)
    build_sparse_index([shard], tmp_path / "index", heap="1g")
    queries = {
        "wide": {int(t): float(np.float32(rng.uniform(0.01, 0.5))) for t in rng.choice(1_500, 1_100, replace=False)},
        "narrow": {1: 0.3, 2: 0.2},
    }
    assert len(queries["wide"]) > DEFAULT_MAX_CLAUSES
    qpath = write_weights(tmp_path / "queries.parquet", queries, key="qid")

    assert sparse_search(tmp_path / "index", qpath, tmp_path / "run.parquet", tmp_path / "run.trec") == 2

    got = _hits(tmp_path / "run.parquet")
    stored_docs, stored_queries = load_sparse(shard), load_sparse(qpath, key="qid")  # float32, as searched
    for qid, query in stored_queries.items():
        q = {t: quantize(w) for t, w in query.items()}
        dots = {d: sum(q[t] * quantize(w) for t, w in p.items() if t in q) for d, p in stored_docs.items()}
        expected = sorted(((d, float(s)) for d, s in dots.items() if s > 0), key=lambda h: (-h[1], h[0]))
        assert got.get(qid, []) == expected, qid
    assert len(got["wide"]) == len(docs)
