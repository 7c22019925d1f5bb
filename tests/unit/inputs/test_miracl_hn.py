"""MTEB's MIRACL hard-negatives dataset (``dataset: miracl-hn``): its record (the revision and the title join
MTEB uses), its hub layout read from a local copy built here in that layout (configs ``{lang}-corpus``,
``{lang}-queries``, ``{lang}-qrels`` of Parquet shards, MTEB's columns), its reference sizes (MTEB's
descriptive statistics) and its rows' training."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from miracl_eval.config.systems import training
from miracl_eval.config.validate import validate
from miracl_eval.errors import DownloadError, InputError
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
    assert TASKS["miracl-hn"] == ("MIRACLRetrievalHardNegatives", REPO, MIRACL_HN_REVISION)
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
    (hub / "README.md").write_text(
        text.replace("- split: dev\n    path: sw-qrels", "- split: train\n    path: sw-qrels")
    )
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
    with pytest.raises(InputError, match=r"sw-queries/dev-00000-of-00001\.parquet: record 3: query .* a tab"):
        download.download_topics_qrels(
            MIRACL_HN, "sw", "dev", tmp_path / "t.tsv", tmp_path / "q.tsv", MIRACL_HN_REVISION
        )
    assert not (tmp_path / "t.tsv").exists()


@pytest.mark.parametrize(
    ("shard", "column", "values", "message"),
    [
        ("sw-qrels/dev-00000-of-00001.parquet", "score", lambda v: [float(x) + 0.5 for x in v], r"record 1: score 1\.5 of "),
        ("sw-qrels/dev-00000-of-00001.parquet", "score", lambda v: [None, *v[1:]], r"record 1: score None of "),
        ("sw-qrels/dev-00000-of-00001.parquet", "score", lambda v: ["yes", *map(str, v[1:])], r"record 1: score 'yes'"),
        ("sw-qrels/dev-00000-of-00001.parquet", "corpus-id", lambda v: [[x] for x in v], r"column 'corpus-id' holds list"),
        ("sw-queries/dev-00000-of-00001.parquet", "text", lambda v: [None, *v[1:]], r"record 1: query \S+ is null"),
        ("sw-queries/dev-00000-of-00001.parquet", "_id", lambda v: [float(i) for i, _ in enumerate(v)], r"column '_id' holds float"),
    ],
    ids=["fractional-score", "null-score", "word-score", "list-docids", "null-query", "float-qids"],
)  # fmt: skip
def test_mtebs_files_of_the_wrong_types_name_the_shard_and_record(
    hub: Path, tmp_path: Path, shard: str, column: str, values, message: str
) -> None:
    """Read as a local MTEB file is; neither the topics nor the qrels file is written (a qrels error used to come
    after the topics file was; a null score was a traceback, 0.5 became 0, a null query the text 'None')."""
    table = pq.read_table(hub / shard)
    pq.write_table(
        table.set_column(table.column_names.index(column), column, pa.array(values(table.column(column).to_pylist()))),
        hub / shard,
    )
    with pytest.raises(InputError, match=rf"{re.escape(shard)}: .*{message}"):
        download.download_topics_qrels(
            MIRACL_HN, "sw", "dev", tmp_path / "t.tsv", tmp_path / "q.tsv", MIRACL_HN_REVISION
        )
    assert not (tmp_path / "t.tsv").exists() and not (tmp_path / "q.tsv").exists()


def test_a_query_in_two_shards_names_both(hub: Path, tmp_path: Path) -> None:
    first = hub / "sw-queries/dev-00000-of-00001.parquet"
    pq.write_table(pq.read_table(first).slice(0, 2), hub / "sw-queries/dev-00001-of-00001.parquet")
    with pytest.raises(
        InputError,
        match=r"dev-00001-of-00001\.parquet: record 1: query id \S+ repeats .*dev-00000-of-00001\.parquet, record 1",
    ):
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


def test_published_mteb_rows_are_met_at_the_revisions_that_hold_their_data() -> None:
    """MTEB's results at 95c8db7d (mteb 1.x's pin) and at d7d94fa4 (its re-upload, MTEB 2's pin) are of the same
    data: a run at the default pin meets both; a run at another revision meets neither, and is told what to pin."""
    from miracl_eval.evaluation import published
    from miracl_eval.inputs.datasets import MIRACL_HN_MTEB1_REVISION

    rows = published.load_published(["mteb_miracl_hn.tsv"])
    assert len(rows) == 410 and {r.source_id for r in rows} == {"mteb-results-hn", "mteb-results-hn-v2"}
    assert {dict(r.config)["hub.revision"] for r in rows} == {MIRACL_HN_REVISION, MIRACL_HN_MTEB1_REVISION}
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

    # BGE-M3's rows are of 95c8db7d, e5-small's of d7d94fa4 (its .v2 file of 95c8db7d); e5-mistral is reference only
    both = {"BAAI/bge-m3", "intfloat/multilingual-e5-small"}
    assert met() == met(revision=MIRACL_HN_MTEB1_REVISION) == both
    assert met(revision="main") == set()
    bge = next(r for r in rows if r.model == "BAAI/bge-m3" and r.source_id == "mteb-results-hn")
    cfg = validate({"dataset": "miracl-hn", "languages": ["sw"], "models": {"bge-m3": {}}, "hub": {"revision": "main"},
                    "methods": ["bge-m3/dense"]})  # fmt: skip
    assert published.mismatch(bge, published.row_facts(cfg, "bge-m3/dense")) == (
        f"computed at dataset revision {MIRACL_HN_MTEB1_REVISION}, this run reads main: set hub.revision: "
        f"{MIRACL_HN_REVISION} to meet it"
    )


def test_the_mteb_files_name_the_task_and_its_revision(hub: Path, tmp_path: Path) -> None:
    """Downloaded from MTEB's repository at the revision its task pins (the download records it), a preset model's
    row is MTEB's task at MTEB's revision, and can be submitted."""
    pytest.importorskip("mteb")
    from mteb.results import TaskResult

    from miracl_eval.config.models import resolve_model
    from miracl_eval.evaluation import mteb_results
    from miracl_eval.evaluation.mteb_origin import data_revision, mteb_registry

    download.download_corpus(MIRACL_HN, "sw", tmp_path / "corpus", revision=MIRACL_HN_REVISION)
    download.download_topics_qrels(MIRACL_HN, "sw", "dev", tmp_path / "t" / "t.tsv", tmp_path / "t" / "q.tsv",
                                   MIRACL_HN_REVISION)  # fmt: skip
    records = [download.read_source(tmp_path / "corpus"), download.read_source(tmp_path / "t")]
    assert all(r is not None and (r["repo"], r["commit"]) == (REPO, MIRACL_HN_REVISION) for r in records)
    data = data_revision(*TASKS["miracl-hn"][1:], records)
    assert (data.revision, data.why_not) == (MIRACL_HN_REVISION, None)
    scores = {"ndcg_at_10": 0.5, "main_score": 0.5}
    path = tmp_path / "MIRACLRetrievalHardNegatives.json"
    path.write_text(json.dumps(mteb_results.task_result("miracl-hn", "dev", {"sw": scores}, 1.0, data.revision)))
    loaded = TaskResult.from_disk(path)
    assert (loaded.task_name, loaded.dataset_revision) == ("MIRACLRetrievalHardNegatives", MIRACL_HN_REVISION)
    assert loaded.scores["dev"][0]["languages"] == ["swa-Latn"]
    spec = resolve_model("bge-m3", None)
    row = {
        "kind": "model",
        "checkpoint": "BAAI/bge-m3",
        "method": "dense",
        "main": True,
        "api": False,
        "settings": spec,
    }
    joins = {"title_join": MIRACL_HN.title_join, "query_instruction": MIRACL_HN.query_instruction}
    where = mteb_results.placement("bge-m3/dense", row, "5617a9f61b028005a4858fdac845db406aefb181", "miracl-hn",
                                   registry=mteb_registry(), data=data, defaults=joins, reference=joins)  # fmt: skip
    assert where.why_not is None and where.name == "BAAI/bge-m3" and where.experiment is None


def test_deterministic_systems_score_the_same_at_both_revisions() -> None:
    """The evidence shipped with the numbers that 95c8db7d and d7d94fa4 hold the same data: e5-small (no prompt in
    either task) and MTEB's bm25s baseline scored at both give the same values, every one of them."""
    from miracl_eval.evaluation import published
    from miracl_eval.inputs.datasets import MIRACL_HN_MTEB1_REVISION, get_dataset

    rows = published.load_published(["mteb_miracl_hn.tsv"])
    by_revision: dict[tuple[str, str, str], dict[str, str]] = {}
    for r in rows:
        by_revision.setdefault((r.model, r.partition, r.measure), {})[dict(r.config)["hub.revision"]] = r.text
    pairs = {k: v for k, v in by_revision.items() if len(v) == 2}
    deterministic = {k: v for k, v in pairs.items() if k[0] in ("intfloat/multilingual-e5-small", "-")}
    assert len(deterministic) == 12  # es, ru and th, both measures, two systems
    assert all(len(set(v.values())) == 1 for v in deterministic.values()), deterministic
    hn = get_dataset("miracl-hn")
    assert hn.same_revision_data(MIRACL_HN_REVISION, MIRACL_HN_MTEB1_REVISION)
    assert not hn.same_revision_data("main", MIRACL_HN_MTEB1_REVISION)
    assert hn.revision_to_pin(MIRACL_HN_MTEB1_REVISION) == MIRACL_HN_REVISION
