"""End-to-end Snakemake runs of the spine on the bundled sample, from another working directory."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from miracl_eval.evaluation.published import read_results_table
from miracl_eval.lucene.anserini import index_analysis
from miracl_eval.runs import read_run
from tests.helpers import BM25_LANGS, SAMPLE, planned_jobs, read_trec, sample_config, snakemake, write_config

LANGS = BM25_LANGS


def test_tables_have_bm25_for_every_language_and_the_mean(sample_run: Path) -> None:
    for name in ("miracl_ndcg.tsv", "miracl_recall100.tsv"):
        path = sample_run / "results" / name
        assert path.read_text().splitlines()[0] == "\t".join(["method", *LANGS, "mean"])
        table = read_results_table(path)
        assert list(table) == ["bm25"]
        row = table["bm25"]
        assert all(0.0 <= row[lang] <= 1.0 for lang in LANGS)
        assert row["mean"] == pytest.approx(sum(row[lang] for lang in LANGS) / len(LANGS), abs=1e-4)
    # about half of the sample's queries share words with their answers: BM25 finds many, not all
    assert read_results_table(sample_run / "results" / "miracl_recall100.tsv")["bm25"]["mean"] > 0.6
    assert read_results_table(sample_run / "results" / "miracl_ndcg.tsv")["bm25"]["mean"] > 0.3


def test_runs_are_valid_trec_files_equal_to_their_parquet(sample_run: Path) -> None:
    for lang in LANGS:
        trec = sample_run / "runs" / "miracl" / lang / "bm25.trec"
        for line in trec.read_text(encoding="utf-8").splitlines():
            qid, q0, docid, rank, score, tag = line.split(" ")
            assert q0 == "Q0" and tag == "bm25" and int(rank) >= 1 and float(score) == float(score)
        assert read_trec(trec).equals(read_run(trec.with_suffix(".parquet")))


def test_hit_equal_to_its_qid_is_kept(sample_run: Path) -> None:
    kept = 0
    for lang in LANGS:
        run = read_run(sample_run / "runs" / "miracl" / lang / "bm25.parquet")
        kept += sum(q == d for q, d in zip(run.column("qid").to_pylist(), run.column("docid").to_pylist(), strict=True))
    assert kept >= len(LANGS), "every language has a query whose id is one of its relevant passages"


def test_second_invocation_has_nothing_to_do(sample_run: Path) -> None:
    proc = snakemake(sample_run, sample_run / "config.yaml", "results/miracl_ndcg.tsv", args=("-n",))
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_bm25_parameters_rerun_only_search_and_evaluation(sample_run: Path) -> None:
    cfg = yaml.safe_load((sample_run / "config.yaml").read_text())
    cfg["bm25"] = {"k1": 1.2, "b": 0.75}
    other = write_config(sample_run, cfg, "k1.yaml")
    jobs = planned_jobs(snakemake(sample_run, other, "results/miracl_ndcg.tsv", args=("-n",)))
    assert jobs == {"bm25_search": len(LANGS), "evaluate": 1, "tables": 1}  # one evaluation per row


def test_bm25_equals_pyserini_searcher_called_directly(sample_run: Path) -> None:
    from miracl_eval.lucene.offline import import_pyserini

    LuceneSearcher = import_pyserini("pyserini.search.lucene").LuceneSearcher

    compared = expected = 0
    for lang in LANGS:
        index = sample_run / "resources" / "miracl" / "indexes" / lang / "bm25"
        analysis = index_analysis(index)
        searcher = LuceneSearcher(str(index))
        searcher.set_bm25(0.9, 0.4)
        analysis.configure_searcher(searcher)
        queries = pq.read_table(sample_run / "resources" / "miracl" / "topics" / lang / "queries.parquet").to_pylist()
        expected += len(queries)
        run = read_run(sample_run / "runs" / "miracl" / lang / "bm25.parquet").to_pylist()
        for q in queries:
            (text,) = analysis.prepare_queries([q["query"]])
            direct = [(h.docid, float(h.score)) for h in searcher.search(text, k=1000)]
            ours = [(r["docid"], r["score"]) for r in run if r["qid"] == q["qid"]]
            assert sorted(ours) == sorted(direct), (lang, q["qid"])
            compared += 1
        searcher.close()
    assert compared == expected >= len(LANGS) * 8


def test_bad_corpus_line_fails_with_file_and_line_and_leaves_nothing(tmp_path: Path) -> None:
    lines = (SAMPLE / "miracl" / "yo" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    lines[4] = lines[4][:-2]  # cut the closing quote and brace
    bad = tmp_path / "yo.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = sample_config(["yo"])
    cfg["source"]["corpus"] = str(bad)
    proc = snakemake(tmp_path, write_config(tmp_path, cfg), "results/miracl_ndcg.tsv", check=False)
    assert proc.returncode != 0
    log = (tmp_path / "logs" / "miracl" / "preprocess_corpus" / "yo.log").read_text()
    assert f"{bad}, line 5: malformed JSON" in log
    assert f"{bad}, line 5: malformed JSON" in proc.stderr
    corpus_dir = tmp_path / "resources" / "miracl" / "corpus" / "yo"
    assert not corpus_dir.exists() or list(corpus_dir.iterdir()) == []
    assert not (tmp_path / "results" / "miracl_ndcg.tsv").exists()


def test_the_table_target_says_which_judged_passages_the_corpus_lacks(tmp_path: Path) -> None:
    """Qrels of another version (``3021_0`` for ``3021#0``): the main command's end names the partition."""
    qrels = (SAMPLE / "miracl" / "yo" / "qrels.tsv").read_text(encoding="utf-8").splitlines()
    qid, _, docid, _ = qrels[0].split("\t")
    qrels.append(f"{qid}\tQ0\t{docid.replace('#', '_')}\t1")
    (tmp_path / "yo.qrels").write_text("\n".join(qrels) + "\n", encoding="utf-8")
    cfg = sample_config(["yo"], methods=["bm25"])
    cfg["source"]["qrels"] = str(tmp_path / "yo.qrels")
    proc = snakemake(tmp_path, write_config(tmp_path, cfg), "results/miracl_ndcg.tsv")
    listing = "results/miracl/yo/judged_not_in_corpus.tsv"
    assert (
        f"yo: 1 judged passage(s) not in the corpus, no method can retrieve them (1 queries lose a relevant "
        f"passage: {qid}); listed in {listing}" in proc.stdout + proc.stderr
    )
    assert (tmp_path / listing).read_text().splitlines()[1:] == [f"{qid}\t{docid.replace('#', '_')}\t1"]
    assert "yo: 161 of 49,043 passages" in proc.stdout + proc.stderr  # the comparability check ran too


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"languages": ["sw", "xx"]}, "config key 'languages': unknown code(s) 'xx' for miracl; valid: ar, bn"),
        ({"hits": "many"}, "config key 'hits': 'many' is not of type 'integer'"),
    ],
)
def test_config_errors_stop_the_workflow(tmp_path: Path, change: dict, message: str) -> None:
    cfg = sample_config(["sw"])
    cfg.update(change)
    proc = snakemake(tmp_path, write_config(tmp_path, cfg), "results/miracl_ndcg.tsv", check=False)
    assert proc.returncode != 0 and message in proc.stdout + proc.stderr
    assert not (tmp_path / "resources").exists()


def test_offline_download_says_how_to_use_local_files(tmp_path: Path, monkeypatch) -> None:
    cfg = sample_config(["sw"])
    del cfg["source"]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    proc = snakemake(
        tmp_path, write_config(tmp_path, cfg), "resources/miracl/downloads/topics/sw/topics.tsv", check=False
    )
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "Could not download 'miracl-v1.0-sw/topics/topics.miracl-v1.0-sw-dev.tsv'" in text
    assert "set source.corpus, source.topics and source.qrels in the config" in text
    assert not (tmp_path / "resources" / "miracl" / "downloads" / "topics" / "sw" / "topics.tsv").exists()


@pytest.fixture(scope="module")
def merged_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """A ``config.yaml`` left in the working directory under ``--configfile exp2.yaml``, whose Yoruba
    corpus holds an unpaired surrogate escape: the effective config and the corpus, in one run."""
    work = tmp_path_factory.mktemp("merged")
    write_config(work, {"hits": 5, "threads": 1})
    lines = (SAMPLE / "miracl" / "yo" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    lines[2] = lines[2].replace('"text": "', '"text": "\\ud800', 1)
    bad = work / "yo.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = sample_config(["yo"], methods=["bm25"])
    cfg["source"]["corpus"] = str(bad)
    exp2 = write_config(work, cfg, "exp2.yaml")
    targets = ("results/miracl_config.yaml", "resources/miracl/corpus/yo/corpus.parquet")
    proc = snakemake(work, exp2, *targets, args=("--keep-going",), check=False)
    assert proc.returncode != 0
    return work, bad, proc.stdout + proc.stderr


def test_merged_config_files_are_logged_and_the_effective_config_is_kept(merged_run: tuple[Path, Path, str]) -> None:
    work, _, output = merged_run
    assert f"the configuration merges {work / 'config.yaml'}, {work / 'exp2.yaml'}" in output
    assert f"  from {work / 'config.yaml'}: hits=5\n" in output
    assert f"{work / 'config.yaml'} (the workflow's default config file, read from the working directory)" in output
    assert "changes hits=5 of this --configfile run" in output
    effective = yaml.safe_load((work / "results" / "miracl_config.yaml").read_text(encoding="utf-8"))
    assert effective["hits"] == 5 and effective["languages"] == ["yo"] and effective["bm25"]["b"] == 0.4


def test_unpaired_surrogate_reaches_the_job_log_and_leaves_nothing(merged_run: tuple[Path, Path, str]) -> None:
    work, bad, output = merged_run
    message = f"{bad}, line 3: (docid 2533#2) 'text' holds an unpaired surrogate escape \\ud800"
    assert message in (work / "logs" / "miracl" / "preprocess_corpus" / "yo.log").read_text(encoding="utf-8")
    assert message in output
    corpus_dir = work / "resources" / "miracl" / "corpus" / "yo"
    assert not corpus_dir.exists() or list(corpus_dir.iterdir()) == []
