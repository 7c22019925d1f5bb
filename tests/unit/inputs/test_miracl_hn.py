"""MTEB's MIRACL hard-negatives dataset (``dataset: miracl-hn``): its record (the revision and the title join
MTEB uses), its hub layout read from a local copy built here in that layout (configs ``{lang}-corpus``,
``{lang}-queries``, ``{lang}-qrels`` of Parquet shards, MTEB's columns), its reference sizes (MTEB's
descriptive statistics) and its rows' training."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from miracl_eval.config.systems import training
from miracl_eval.config.validate import validate
from miracl_eval.errors import DownloadError
from miracl_eval.evaluation.comparability import references
from miracl_eval.evaluation.mteb_results import TASKS
from miracl_eval.inputs import download
from miracl_eval.inputs.datasets import MIRACL_HN, MIRACL_HN_REVISION, MIRACL_LANGUAGES
from miracl_eval.inputs.loading import iter_corpus, iter_qrels, iter_topics
from tests.helpers import SAMPLE

REPO = "mteb/MIRACLRetrievalHardNegatives"


def hub_copy(root: Path, lang: str, split: str = "dev") -> list[str]:
    """The sample's language as the hub holds the dataset: a config per kind, its split as Parquet shards."""
    passages = [json.loads(line) for line in (SAMPLE / "miracl" / lang / "corpus.jsonl").read_text().splitlines()]
    topics = [line.split("\t") for line in (SAMPLE / "miracl" / lang / "topics.tsv").read_text().splitlines()]
    qrels = [line.split() for line in (SAMPLE / "miracl" / lang / "qrels.tsv").read_text().splitlines()]
    half = len(passages) // 2
    tables = {
        f"{lang}-corpus/{split}-00000-of-00002.parquet": pa.table(
            {"_id": [p["docid"] for p in passages[:half]], "title": [p["title"] for p in passages[:half]],
             "text": [p["text"] for p in passages[:half]]}),
        f"{lang}-corpus/{split}-00001-of-00002.parquet": pa.table(
            {"_id": [p["docid"] for p in passages[half:]], "title": [p["title"] for p in passages[half:]],
             "text": [p["text"] for p in passages[half:]]}),
        f"{lang}-queries/{split}-00000-of-00001.parquet": pa.table(
            {"_id": [q for q, _ in topics], "text": [t for _, t in topics]}),
        f"{lang}-qrels/{split}-00000-of-00001.parquet": pa.table(
            {"query-id": [q[0] for q in qrels], "corpus-id": [q[2] for q in qrels],
             "score": pa.array([int(q[3]) for q in qrels], pa.int64())}),
    }  # fmt: skip
    for name, table in tables.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, root / name)
    return [".gitattributes", "README.md", *tables]


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    root = tmp_path / "hub"
    files = hub_copy(root, "sw") + hub_copy(root, "yo")[2:]

    class FakeApi:
        def list_repo_files(self, repo: str, repo_type: str, revision: str) -> list[str]:
            assert (repo, repo_type, revision) == (REPO, "dataset", MIRACL_HN_REVISION)
            return files

    def fake_download(repo: str, filename: str, revision: str, cache_dir: str | None) -> str:
        assert (repo, revision) == (REPO, MIRACL_HN_REVISION)
        return str(root / filename)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setattr(download, "_hub_download", fake_download)
    return root


def test_the_record_is_mtebs_task() -> None:
    mteb = pytest.importorskip("mteb")
    for name in ("MIRACLRetrievalHardNegatives", "MIRACLRetrievalHardNegatives.v2"):
        meta = mteb.get_task(name).metadata
        assert meta.dataset == {"path": REPO, "revision": MIRACL_HN_REVISION}  # both versions: the same data
        assert meta.eval_splits == [MIRACL_HN.default_split] and set(meta.eval_langs) == set(MIRACL_LANGUAGES)
    assert TASKS["miracl-hn"] == ("MIRACLRetrievalHardNegatives", MIRACL_HN_REVISION)
    v2 = mteb.get_task("MIRACLRetrievalHardNegatives.v2").metadata.prompt
    assert v2 == {"query": MIRACL_HN.query_instruction}
    cfg = validate({"dataset": "miracl-hn", "languages": ["sw"]})
    assert (cfg["hub"]["revision"], cfg["split"], cfg["title_join"]) == (MIRACL_HN_REVISION, "dev", "{title} {text}")
    assert (
        validate({"dataset": "miracl-hn", "languages": ["sw"], "hub": {"revision": "main"}})["hub"]["revision"]
        == "main"
    )


def test_the_hub_layout_is_read_into_the_workflows_formats(hub: Path, tmp_path: Path) -> None:
    shards = download.download_corpus(MIRACL_HN, "sw", tmp_path / "corpus", revision=MIRACL_HN_REVISION)
    assert [p.name for p in shards] == ["0000-dev-00000-of-00002.parquet", "0001-dev-00001-of-00002.parquet"]
    passages = [p for shard in shards for _, p in iter_corpus(shard)]
    want = [json.loads(line) for line in (SAMPLE / "miracl/sw/corpus.jsonl").read_text().splitlines()]
    assert [(p.docid, p.title, p.text) for p in passages] == [(w["docid"], w["title"], w["text"]) for w in want]
    download.download_topics_qrels(MIRACL_HN, "sw", "dev", tmp_path / "t.tsv", tmp_path / "q.tsv", MIRACL_HN_REVISION)
    assert [(q, t) for _, q, t in iter_topics(tmp_path / "t.tsv")] == [
        tuple(line.split("\t")) for line in (SAMPLE / "miracl/sw/topics.tsv").read_text().splitlines()
    ]
    ours = [(q, d, r) for _, q, d, r in iter_qrels(tmp_path / "q.tsv")]
    theirs = [
        (q, d, int(r))
        for q, _, d, r in (line.split() for line in (SAMPLE / "miracl/sw/qrels.tsv").read_text().splitlines())
    ]
    assert ours == theirs


def test_a_query_that_would_break_the_topics_file_names_the_shard_and_row(hub: Path, tmp_path: Path) -> None:
    shard = hub / "sw-queries/dev-00000-of-00001.parquet"
    table = pq.read_table(shard)
    texts = table.column("text").to_pylist()
    texts[2] = "a\ttab"
    pq.write_table(table.set_column(1, "text", pa.array(texts)), shard)
    with pytest.raises(DownloadError, match=r"sw-queries/dev-00000-of-00001\.parquet, row 3: query .* a tab"):
        download.download_topics_qrels(
            MIRACL_HN, "sw", "dev", tmp_path / "t.tsv", tmp_path / "q.tsv", MIRACL_HN_REVISION
        )
    assert not (tmp_path / "t.tsv").exists()


def test_reference_sizes_are_mtebs_descriptive_statistics() -> None:
    mteb = pytest.importorskip("mteb")
    stats_file = Path(mteb.__file__).parent / "descriptive_stats/Retrieval/MIRACLRetrievalHardNegatives.json"
    stats = json.loads(stats_file.read_text())["dev"]["hf_subset_descriptive_stats"]
    refs = references("miracl-hn", "dev", {lang: lang for lang in MIRACL_LANGUAGES})
    for lang in MIRACL_LANGUAGES:
        (ref,) = refs[lang]
        assert (ref.passages, ref.queries) == (stats[lang]["num_documents"], stats[lang]["num_queries"])
        assert ref.version == MIRACL_HN_REVISION and ref.judgements is None
    assert sum(r[0].passages or 0 for r in refs.values()) == 2_449_382


def test_a_model_trained_on_miracl_is_in_domain_for_its_hard_negatives() -> None:
    cfg = validate({"dataset": "miracl-hn", "languages": ["sw"], "models": {"bge-m3": {}, "mdpr": {}},
                    "methods": ["bge-m3/dense", "mdpr/dense"]})  # fmt: skip
    assert {k: v["training"] for k, v in training(cfg).items()} == {
        "bge-m3/dense": "in-domain",
        "mdpr/dense": "zero-shot",
    }


def test_published_mteb_rows_are_met_only_at_their_dataset_revision() -> None:
    from miracl_eval.evaluation import published

    rows = published.load_published(["mteb_miracl_hn.tsv"])
    assert len(rows) == 410 and {r.source_id for r in rows} == {"mteb-results-hn", "mteb-results-hn-v2"}
    assert all(dict(r.config)["hub.revision"] in (MIRACL_HN_REVISION, "95c8db7d4a6e9c1d8a60601afd63d553ae20a2eb")
               for r in rows)  # fmt: skip
    small = {
        r.partition for r in rows if r.model == "intfloat/multilingual-e5-small" and r.source_id == "mteb-results-hn"
    }
    assert small == set(MIRACL_LANGUAGES)
    models = {"me5-small": {}, "bge-m3": {}, "e5-mistral-7b": {}}

    def met(**hub: str) -> set[str]:
        cfg = validate({"dataset": "miracl-hn", "languages": list(MIRACL_LANGUAGES), "models": models, "hub": hub,
                        "methods": [f"{m}/dense" for m in models]})  # fmt: skip
        ours = {f"{m}/dense": dict.fromkeys(MIRACL_LANGUAGES, 0.5) for m in models}
        return {
            str(r["system"]).split(" ")[0] for r in published.side_by_side(ours, "miracl-hn", "dev", "nDCG@10", cfg)
        }

    assert met() == {"intfloat/multilingual-e5-small"}  # the pinned revision's values only
    # e5-small's .v2 file is of that revision; e5-mistral is reference only
    assert met(revision="95c8db7d4a6e9c1d8a60601afd63d553ae20a2eb") == {"BAAI/bge-m3", "intfloat/multilingual-e5-small"}


def test_the_mteb_files_name_the_task_and_its_revision(tmp_path: Path) -> None:
    pytest.importorskip("mteb")
    from mteb.results import TaskResult

    from miracl_eval.evaluation import mteb_results

    scores = {"ndcg_at_10": 0.5, "main_score": 0.5}
    path = tmp_path / "MIRACLRetrievalHardNegatives.json"
    path.write_text(json.dumps(mteb_results.task_result("miracl-hn", "dev", {"sw": scores}, 1.0)))
    loaded = TaskResult.from_disk(path)
    assert (loaded.task_name, loaded.dataset_revision) == ("MIRACLRetrievalHardNegatives", MIRACL_HN_REVISION)
    assert loaded.scores["dev"][0]["languages"] == ["swa-Latn"]
    row = {"kind": "model", "checkpoint": "BAAI/bge-m3", "method": "dense", "main": True, "api": False, "settings": {}}
    where = mteb_results.placement("bge-m3/dense", row, "5617a9f61b028005a4858fdac845db406aefb181", "miracl-hn")
    assert where.why_not is None and where.name == "BAAI/bge-m3"
