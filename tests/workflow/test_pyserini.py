"""The workflow's BM25 against pyserini's own: its indexing CLI and searcher on the sample's 18 languages, and
its published 2CR BEIR numbers on real SciFact.

pyserini indexes MIRACL as Anserini's ``MrTyDiCollection`` (docid, title, text) with ``-language {lang}``
(Yoruba ``-pretokenized``) and searches it as its 2CR commands do (``--language {lang} --bm25``, Yoruba
``--pretokenized``: a whitespace analyzer). The workflow must give the same hits with the same scores.
"""

from __future__ import annotations

import hashlib
import runpy
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from miracl_eval.evaluation.published import read_results_table
from miracl_eval.inputs.datasets import MIRACL_LANGUAGES
from miracl_eval.lucene.analyzers import PRETOKENIZED, jvm_segments_thai
from miracl_eval.lucene.offline import import_pyserini
from miracl_eval.runs import read_run
from tests.helpers import SAMPLE, SHARED, sample_config, snakemake, write_config

SCIFACT = SHARED / "data" / "beir-scifact"
#: sha256 of ``pyserini/2cr/beir.yaml`` in pyserini 2.4.0 (the sdist on PyPI), whose ``bm25-flat`` SciFact
#: values the SciFact run must meet
BEIR_YAML_2_4_0 = "ed837fea70ff86defa49b8e8b85bb714953c24de59186bca4f9fb0ce9816edd7"


@pytest.fixture(scope="module")
def every_language(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """BM25 on the sample's 18 languages."""
    work = tmp_path_factory.mktemp("bm25-18")
    cfg = sample_config(list(MIRACL_LANGUAGES), threads=1, methods=["bm25"], models={}, hybrids={}, rerankers={})
    snakemake(work, write_config(work, cfg), "results/miracl_ndcg.tsv")
    return work


def pyserini_index(corpus: Path, index: Path, language: str) -> None:
    """``python -m pyserini.index.lucene`` as pyserini's MIRACL indexes are built (in this process: its JVM)."""
    collection = index.parent / f"{index.name}-collection"
    collection.mkdir(parents=True)
    (collection / "docs.jsonl").write_bytes(corpus.read_bytes())
    analysis = ["-pretokenized"] if language in PRETOKENIZED else ["-language", language]
    import_pyserini("pyserini.index.lucene")
    argv = sys.argv
    sys.argv = [
        "pyserini.index.lucene", "-collection", "MrTyDiCollection", "-generator", "DefaultLuceneDocumentGenerator",
        "-input", str(collection), "-index", str(index), "-threads", "1", *analysis,
    ]  # fmt: skip
    try:
        runpy.run_module("pyserini.index.lucene", run_name="__main__")
    finally:
        sys.argv = argv


def pyserini_hits(index: Path, language: str, queries: list[dict]) -> dict[str, list[tuple[str, float]]]:
    """pyserini's LuceneSearcher as its 2CR command sets it up (``--language``, ``--pretokenized``, ``--bm25``)."""
    search = import_pyserini("pyserini.search.lucene")
    searcher = search.LuceneSearcher(str(index))
    if language in PRETOKENIZED:
        from miracl_eval.lucene.analyzers import whitespace_analyzer

        searcher.set_analyzer(whitespace_analyzer())
    elif language != "en":
        searcher.set_language(language)
    searcher.set_bm25(0.9, 0.4)
    hits = {q["qid"]: [(h.docid, float(h.score)) for h in searcher.search(q["query"], k=1000)] for q in queries}
    searcher.close()
    return hits


@pytest.mark.parametrize("lang", MIRACL_LANGUAGES)
def test_bm25_equals_pyserinis_own_indexing_and_search(every_language: Path, tmp_path: Path, lang: str) -> None:
    if lang == "th" and not jvm_segments_thai():
        pytest.skip(
            "this JVM cannot segment Thai: pyserini's own indexing skips every Thai passage, the workflow "
            "segments with PyThaiNLP (docs/explanation/deviations.md); tests/workflow/test_bm25.py checks its index "
            "against pyserini's searcher"
        )
    theirs = tmp_path / "index"
    pyserini_index(SAMPLE / "miracl" / lang / "corpus.jsonl", theirs, lang)
    queries = pq.read_table(every_language / "resources" / "miracl" / "topics" / lang / "queries.parquet").to_pylist()
    expected = pyserini_hits(theirs, lang, queries)
    run = read_run(every_language / "runs" / "miracl" / lang / "bm25.parquet").to_pylist()
    ours: dict[str, list[tuple[str, float]]] = {q["qid"]: [] for q in queries}
    for r in run:
        ours[r["qid"]].append((r["docid"], r["score"]))
    assert sum(len(h) for h in expected.values()) > len(queries)  # their index holds the passages
    for q in queries:
        # the same passages with the same scores; ours ranked by score, ties by docid
        assert sorted(ours[q["qid"]]) == sorted(expected[q["qid"]]), (lang, q["qid"])
        assert [d for d, _ in ours[q["qid"]]] == [d for d, _ in sorted(expected[q["qid"]], key=lambda h: (-h[1], h[0]))]


def test_scifact_meets_pyserinis_2cr_bm25_flat(tmp_path: Path) -> None:
    """Real SciFact (5,183 abstracts, 300 claims) as pyserini's ``bm25-flat`` BEIR condition: "title text" in
    one field, English analysis, k1 0.9, b 0.4, top 1,000 (its ``--remove-query`` removes nothing here)."""
    if not SCIFACT.is_dir():
        pytest.skip("../shared/data/beir-scifact is absent")
    import pyserini

    raw = (Path(pyserini.__file__).parent / "2cr" / "beir.yaml").read_bytes()
    assert hashlib.sha256(raw).hexdigest() == BEIR_YAML_2_4_0
    condition = next(c for c in yaml.safe_load(raw)["conditions"] if c["name"] == "bm25-flat")
    (published,) = next(d for d in condition["datasets"] if d["dataset"] == "scifact")["scores"]
    cfg = sample_config(["en"], threads=1, methods=["bm25"], models={}, hybrids={}, rerankers={})
    cfg["source"] = {
        "corpus": str(SCIFACT / "corpus.jsonl.gz"),
        "topics": str(SCIFACT / "topics.test.tsv"),
        "qrels": str(SCIFACT / "qrels.test.tsv"),
    }
    snakemake(tmp_path, write_config(tmp_path, cfg), "results/miracl_ndcg.tsv")
    ndcg = read_results_table(tmp_path / "results" / "miracl_ndcg.tsv")["bm25"]["en"]
    recall = read_results_table(tmp_path / "results" / "miracl_recall100.tsv")["bm25"]["en"]
    assert (f"{ndcg:.4f}", f"{recall:.4f}") == (f"{published['nDCG@10']:.4f}", f"{published['R@100']:.4f}")
    assert (published["nDCG@10"], published["R@100"]) == (0.6789, 0.9253)
    run = read_run(tmp_path / "runs" / "miracl" / "en" / "bm25.parquet")
    assert not any(q == d for q, d in zip(run["qid"].to_pylist(), run["docid"].to_pylist(), strict=True))
