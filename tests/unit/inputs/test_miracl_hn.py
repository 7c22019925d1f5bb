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
    return list(tables)


def card(langs: list[str], split: str = "dev") -> str:
    """The card's YAML header as ``push_to_hub`` writes it (as on mteb/MIRACLRetrieval's card): a config per
    language and kind, its split's files ``{config}/{split}-*``."""
    configs = "".join(
        f"- config_name: {lang}-{kind}\n  data_files:\n  - split: {split}\n    path: {lang}-{kind}/{split}-*\n"
        for lang in langs
        for kind in ("corpus", "qrels", "queries")
    )
    return f"---\nlicense: cc-by-sa-4.0\nconfigs:\n{configs}tags:\n- mteb\n---\n# MIRACLRetrievalHardNegatives\n"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    root = tmp_path / "hub"
    hub_copy(root, "sw"), hub_copy(root, "yo")
    (root / "README.md").write_text(card(["sw", "yo"]), encoding="utf-8")

    class FakeApi:  # the repository is what the folder holds when it is listed
        def list_repo_files(self, repo: str, repo_type: str, revision: str) -> list[str]:
            assert (repo, repo_type, revision) == (REPO, "dataset", MIRACL_HN_REVISION)
            return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())

    def fake_download(repo: str, filename: str, revision: str, cache_dir: str | None) -> str:
        assert (repo, revision) == (REPO, MIRACL_HN_REVISION) and (root / filename).is_file()
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


def read_as_the_workflow(tmp_path: Path, lang: str = "sw") -> tuple[list[tuple[str, str, str]], list[tuple[str, str]],
                                                                    list[tuple[str, str, int]]]:  # fmt: skip
    out = tmp_path / "ours"
    shards = download.download_corpus(MIRACL_HN, lang, out / "corpus", revision=MIRACL_HN_REVISION)
    download.download_topics_qrels(MIRACL_HN, lang, "dev", out / "t.tsv", out / "q.tsv", MIRACL_HN_REVISION)
    return (
        [(p.docid, p.title, p.text) for shard in shards for _, p in iter_corpus(shard)],
        [(q, t) for _, q, t in iter_topics(out / "t.tsv")],
        [(q, d, r) for _, q, d, r in iter_qrels(out / "q.tsv")],
    )


def read_as_mteb(root: Path, lang: str = "sw") -> tuple[list[tuple[str, str, str]], list[tuple[str, str]],
                                                         list[tuple[str, str, int]]]:  # fmt: skip
    """The oracle: the ``datasets`` library loads each config's split from the copy, as MTEB's loader does
    (``load_dataset(repo, config, split=...)``: the split asked for, or the config's only one)."""
    datasets = pytest.importorskip("datasets")

    def load(config: str) -> list[dict[str, object]]:
        splits = datasets.get_dataset_split_names(str(root), config_name=config)
        split = "dev" if "dev" in splits else splits[0]
        return list(datasets.load_dataset(str(root), config, split=split))

    return (
        [(str(r["_id"]), str(r["title"]), str(r["text"])) for r in load(f"{lang}-corpus")],
        [(str(r["_id"]), str(r["text"])) for r in load(f"{lang}-queries")],
        [(str(r["query-id"]), str(r["corpus-id"]), int(str(r["score"]))) for r in load(f"{lang}-qrels")],
    )


@pytest.fixture
def offline_datasets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets-cache"))


def test_the_copy_reads_as_the_datasets_library_reads_it(hub: Path, tmp_path: Path, offline_datasets: None) -> None:
    ours = read_as_the_workflow(tmp_path)
    assert ours == read_as_mteb(hub)
    assert len(ours[0]) == 160 and len(ours[1]) == 12  # the sample's sw


def test_a_layout_the_card_declares_is_followed(hub: Path, tmp_path: Path, offline_datasets: None) -> None:
    """Not push_to_hub's folders: other paths, a list of patterns, a config whose only split has another
    name (MTEB takes a config's only split), extra files a pattern must not take."""
    moves = {
        "sw-corpus/dev-00000-of-00002.parquet": "data/sw/corpus/part-0.parquet",
        "sw-corpus/dev-00001-of-00002.parquet": "data/sw/corpus/part-1.parquet",
        "sw-queries/dev-00000-of-00001.parquet": "data/sw/queries.parquet",
        "sw-qrels/dev-00000-of-00001.parquet": "data/sw/qrels/test.parquet",
    }
    for old, new in moves.items():
        (hub / new).parent.mkdir(parents=True, exist_ok=True)
        (hub / old).rename(hub / new)
    (hub / "data/sw/corpus/old").mkdir()
    pq.write_table(pa.table({"_id": ["x"], "title": ["x"], "text": ["x"]}), hub / "data/sw/corpus/old/part-9.parquet")
    (hub / "README.md").write_text(
        "---\nconfigs:\n"
        "- config_name: sw-corpus\n  data_files:\n  - split: dev\n    path:\n    - data/sw/corpus/part-0.parquet\n"
        "    - data/sw/corpus/part-[1-9]*.parquet\n"
        "- config_name: sw-queries\n  data_files:\n  - split: dev\n    path: data/sw/queries.parquet\n"
        "- config_name: sw-qrels\n  data_files:\n  - split: test\n    path: data/sw/qrels/*.parquet\n"
        "---\n",
        encoding="utf-8",
    )
    ours = read_as_the_workflow(tmp_path)
    assert ours == read_as_mteb(hub) and len(ours[0]) == 160 and len(ours[2]) == 69


def test_without_configs_in_the_card_neither_loads_it(hub: Path, tmp_path: Path, offline_datasets: None) -> None:
    """``datasets`` does not take folders for configs: without ``configs`` MTEB could not load the copy."""
    (hub / "README.md").write_text("---\nlicense: cc-by-sa-4.0\n---\n# no configs\n", encoding="utf-8")
    with pytest.raises(ValueError, match="BuilderConfig 'sw-corpus' not found"):
        read_as_mteb(hub)
    with pytest.raises(DownloadError, match=r"its README\.md declares no configs, so the datasets library"):
        read_as_the_workflow(tmp_path)
    (hub / "README.md").unlink()
    with pytest.raises(DownloadError, match=r"at revision d7d94fa4\w+: it has no README\.md to declare its configs"):
        read_as_the_workflow(tmp_path)
    assert not (tmp_path / "ours").exists()


def test_a_card_without_the_config_or_the_split_says_which(hub: Path, tmp_path: Path) -> None:
    (hub / "README.md").write_text(card(["sw"]), encoding="utf-8")  # yo's configs gone
    with pytest.raises(DownloadError, match=r"README\.md declares no config 'yo-corpus' \(it has sw-corpus, "):
        download.download_corpus(MIRACL_HN, "yo", tmp_path / "yo", revision=MIRACL_HN_REVISION)
    assert not (tmp_path / "yo").exists()
    text = card(["sw"]).replace("path: sw-qrels/dev-*", "path: sw-qrels/dev-*\n  - split: test\n    path: x/*")
    (hub / "README.md").write_text(text.replace("- split: dev\n    path: sw-qrels", "- split: train\n    path: sw-qrels"))
    with pytest.raises(DownloadError, match=r"config 'sw-qrels' has no split 'dev' \(train, test\)"):
        download.download_topics_qrels(
            MIRACL_HN, "sw", "dev", tmp_path / "t.tsv", tmp_path / "q.tsv", MIRACL_HN_REVISION
        )
    assert not (tmp_path / "q.tsv").exists()


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
        judged = stats[lang]["relevant_docs_statistics"]
        assert (ref.relevant, ref.judged_passages) == (judged["num_relevant_docs"], judged["unique_relevant_docs"])
        assert ref.version == MIRACL_HN_REVISION and ref.judgements is None and ref.qrels_sha256 is None
    assert sum(r[0].passages or 0 for r in refs.values()) == 2_449_382
    assert sum(r[0].relevant or 0 for r in refs.values()) == 26_187


def test_what_mtebs_statistics_count_is_what_the_references_say() -> None:
    """``num_relevant_docs`` counts the judgements whose score is not 0 and ``unique_relevant_docs`` the
    distinct passages of all judgements: mteb's own statistics function on a qrels of both kinds."""
    pytest.importorskip("mteb")
    from mteb.abstasks._statistics_calculation import calculate_relevant_docs_statistics

    qrels = {"q1": {"d1": 1, "d2": 0, "d3": 0}, "q2": {"d1": 0, "d4": 2}}
    stats = calculate_relevant_docs_statistics(qrels, ["q1", "q2"], ["d1", "d2", "d3", "d4"])
    assert (stats["num_relevant_docs"], stats["unique_relevant_docs"]) == (2, 4)


def test_the_hard_negatives_qrels_are_miracls_dev_qrels_where_no_query_was_sampled_out(miracl_dev: Path) -> None:
    """An observation (SOURCES.md), not data: where MTEB kept every dev query, its statistics are those of
    MIRACL's dev qrels, non-relevant lines included; in ar, fi and ru (1,000 queries kept) they are fewer."""
    refs = references("miracl-hn", "dev", {lang: lang for lang in MIRACL_LANGUAGES})
    most_lines = json.loads(
        (Path(pytest.importorskip("mteb").__file__).parent
         / "descriptive_stats/Retrieval/MIRACLRetrievalHardNegatives.json").read_text()
    )["dev"]["hf_subset_descriptive_stats"]  # fmt: skip
    for lang in MIRACL_LANGUAGES:
        lines: dict[str, dict[str, int]] = {}
        for line in (miracl_dev / "qrels" / f"qrels.miracl-v1.0-{lang}-dev.tsv").read_text().splitlines():
            qid, _, docid, rel = line.split()
            lines.setdefault(qid, {})[docid] = int(rel)
        relevant = sum(r > 0 for judged in lines.values() for r in judged.values())
        passages = len({d for judged in lines.values() for d in judged})
        (ref,) = refs[lang]
        kept_all = ref.queries == len(lines)
        assert kept_all == (lang not in ("ar", "fi", "ru")), lang
        if kept_all:
            assert (ref.relevant, ref.judged_passages) == (relevant, passages), lang
        else:
            assert (ref.relevant or 0) < relevant and (ref.judged_passages or 0) < passages, lang
        most = most_lines[lang]["relevant_docs_statistics"]["max_relevant_docs_per_query"]
        assert most == max(len(judged) for judged in lines.values()), lang


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
