"""MessIRve as a second dataset: loaders on the Spanish sample and an end-to-end run."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from miracl_eval.errors import InputError
from miracl_eval.inputs.datasets import MESSIRVE
from miracl_eval.inputs.loading import iter_corpus, iter_qrels, iter_topics
from miracl_eval.inputs.preprocess import build_corpus_from
from tests.helpers import SAMPLE, sample_config, snakemake, write_config

PARTS = ["full", "ar", "co", "es", "mx", "no_country"]
#: the run's partitions: the whole test set and a country's (every partition shares the corpus and
#: its encodings; make run's MessIRve config has all six)
RUN_PARTS = ["full", "ar"]
M3 = "bge-m3-random"
#: every model and stage but BGE-M3's fusion and multi-vector rerank (covered on MIRACL)
METHODS = ["bm25", "me5-small/dense", "bm25+me5-small", f"{M3}/dense", f"{M3}/sparse"]


def test_sample_partitions() -> None:
    docids = {p.docid for _, p in iter_corpus(SAMPLE / "messirve" / "corpus.jsonl")}
    assert len(docids) >= 150
    union: set[tuple[str, str, int]] = set()
    for part in PARTS:
        topics = {q for _, q, _ in iter_topics(SAMPLE / "messirve" / part / "topics.tsv")}
        qrels = [(q, d, r) for _, q, d, r in iter_qrels(SAMPLE / "messirve" / part / "qrels.tsv")]
        assert {q for q, _, _ in qrels} == topics and len(topics) >= 8
        assert all(d in docids for _, d, _ in qrels)
        for qid in topics:
            judged = [r for q, _, r in qrels if q == qid]
            assert 1 in judged and judged.count(0) >= 3, (part, qid)
        if part != "full":
            union |= set(qrels)
    full = set((q, d, r) for _, q, d, r in iter_qrels(SAMPLE / "messirve" / "full" / "qrels.tsv"))
    assert full == union
    assert set(PARTS) <= set(MESSIRVE.partitions)


def test_messirve_title_join(tmp_path: Path) -> None:
    build_corpus_from(SAMPLE / "messirve" / "corpus.jsonl", tmp_path / "c.parquet", MESSIRVE.title_join)
    row = pq.read_table(tmp_path / "c.parquet").slice(0, 1).to_pylist()[0]
    assert row["contents"] == f"{row['title']}. {row['text']}"


def test_parquet_corpus_as_on_the_hub(tmp_path: Path) -> None:
    """The hub's eswiki corpus is Parquet: docid, title, text; ids may be integers."""
    good = tmp_path / "eswiki.parquet"
    pq.write_table(pa.table({"docid": [1, 2], "title": ["A", "B"], "text": ["uno", "dos"]}), good)
    assert [p.docid for _, p in iter_corpus(good)] == ["1", "2"]
    mteb = tmp_path / "mteb.parquet"  # MTEB's corpora name the id `_id` (or `id`)
    pq.write_table(pa.table({"_id": ["7"], "title": [None], "text": ["siete"]}), mteb)
    assert [(p.docid, p.title, p.text) for _, p in iter_corpus(mteb)] == [("7", "", "siete")]
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"key": ["1"], "text": ["uno"]}), bad)
    with pytest.raises(InputError, match=f"{bad}: Parquet corpus has no 'docid' column"):
        list(iter_corpus(bad))
    nulls = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"docid": ["1", "2"], "text": ["uno", None]}), nulls)
    with pytest.raises(InputError, match="record 2"):
        list(iter_corpus(nulls))


def test_malformed_messirve_topics_and_qrels(tmp_path: Path) -> None:
    topics = tmp_path / "topics.tsv"
    topics.write_text("100\tque es el mate\n101\t\n", encoding="utf-8")
    with pytest.raises(InputError, match=f"{topics}, line 2: query 101 is empty"):
        list(iter_topics(topics))
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("100\tQ0\t4532_0\n", encoding="utf-8")
    with pytest.raises(InputError, match="line 1: expected 4 fields"):
        list(iter_qrels(qrels))


@pytest.fixture(scope="module")
def messirve_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("messirve")
    cfg = sample_config(RUN_PARTS, file="messirve.yaml", methods=METHODS)
    snakemake(work, write_config(work, cfg), "results/messirve_ndcg.tsv")
    return work


def test_every_partition_has_a_column(messirve_run: Path) -> None:
    for name in ("messirve_ndcg.tsv", "messirve_recall100.tsv"):
        header, *rows = [line.split("\t") for line in (messirve_run / "results" / name).read_text().splitlines()]
        assert header == ["method", *RUN_PARTS]
        assert [r[0] for r in rows] == METHODS
        assert all(0.0 <= float(v) <= 1.0 for r in rows for v in r[1:])
    bm25 = dict(
        zip(
            RUN_PARTS,
            (messirve_run / "results" / "messirve_recall100.tsv").read_text().splitlines()[1].split("\t")[1:],
            strict=True,
        )
    )
    assert float(bm25["full"]) > 0.5


def test_corpus_is_preprocessed_encoded_and_indexed_once(messirve_run: Path) -> None:
    """Every job writes a benchmark file: count the jobs per rule of the real run."""
    stats = messirve_run / "stats" / "messirve"

    def jobs(rule: str) -> int:
        return sum(1 for p in (stats / rule).rglob("*.tsv"))

    assert jobs("preprocess_corpus") == 1
    assert jobs("bm25_index") == 1
    assert jobs("dense_block_search") == 2  # one block per model, for every partition
    assert jobs("dense_merge") == 2 * len(RUN_PARTS)
    assert jobs("sparse_index") == 1
    assert jobs("encode_corpus_dense_sparse") == 1, "203 paragraphs in one block, encoded once"
    assert jobs("encode_corpus_dense") == 1, "me5-small: the same block, encoded once"
    encoded = messirve_run / "resources" / "messirve" / "encoded"
    for model, kind in ((M3, "sparse"), ("me5-small", "dense")):
        assert sorted(p.name for p in (encoded / model / "corpus" / "eswiki" / kind).iterdir()) == [
            "00000.parquet", "00001.parquet", "00002.parquet",
        ], "shards of 100"  # fmt: skip
    assert jobs("bm25_search") == len(RUN_PARTS)
    assert jobs("encode_queries_dense_sparse") == jobs("encode_queries_dense") == len(RUN_PARTS)
    assert sorted(p.name for p in (messirve_run / "resources" / "messirve" / "corpus").iterdir()) == ["eswiki"]
    assert json.loads(
        (
            messirve_run / "resources" / "messirve" / "indexes" / "eswiki" / "bm25" / "miracl-eval-analysis.json"
        ).read_text()
    ) == {"language": "es", "mode": "language"}


def test_bm25_with_the_datasets_join_equals_the_authors_mrtydi_collection(tmp_path: Path) -> None:
    """The authors indexed with Anserini's MrTyDiCollection (title and text joined by a newline); the workflow
    joins with the dataset's ". ": Spanish analysis gives the same terms, so every sample query gets the
    same hits and scores from both indexes (the published BM25 rows need no title_join)."""
    import shutil

    from miracl_eval.lucene.anserini import run_anserini
    from miracl_eval.lucene.bm25 import build_bm25_index
    from miracl_eval.lucene.offline import import_pyserini

    build_corpus_from(SAMPLE / "messirve" / "corpus.jsonl", tmp_path / "c.parquet", MESSIRVE.title_join)
    build_bm25_index(tmp_path / "c.parquet", tmp_path / "ours", "es")
    collection = tmp_path / "mrtydi"
    collection.mkdir()
    shutil.copy(SAMPLE / "messirve" / "corpus.jsonl", collection / "docs.jsonl")
    # what pyserini.index.lucene runs: Anserini's IndexCollection, here on the authors' collection class
    run_anserini(
        "io.anserini.index.IndexCollection",
        ["-collection", "MrTyDiCollection", "-input", str(collection), "-index", str(tmp_path / "theirs"),
         "-generator", "DefaultLuceneDocumentGenerator", "-threads", "1", "-language", "es"],
        None, "1g",
    )  # fmt: skip
    LuceneSearcher = import_pyserini("pyserini.search.lucene").LuceneSearcher

    searchers = [LuceneSearcher(str(tmp_path / name)) for name in ("ours", "theirs")]
    for s in searchers:
        s.set_language("es")
        s.set_bm25(0.9, 0.4)
    assert searchers[0].num_docs == searchers[1].num_docs >= 150
    queries = [q for _, _, q in iter_topics(SAMPLE / "messirve" / "full" / "topics.tsv")]
    found = 0
    for query in queries:
        ours, theirs = ([(h.docid, h.score) for h in s.search(query, k=100)] for s in searchers)
        assert ours == theirs, query
        found += bool(ours)
    assert found >= len(queries) // 2 > 0  # most sample queries share a word with some passage
    for s in searchers:
        s.close()
