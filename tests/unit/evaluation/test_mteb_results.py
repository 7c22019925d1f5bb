"""MTEB result files: the scores equal MTEB's own retrieval evaluator (every key it writes); the export passes the
results repository's checks and loads with mteb's own cache."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import pytest

from miracl_eval.evaluation import mteb_results, mteb_scores

SHA = "5617a9f61b028005a4858fdac845db406aefb181"  # BAAI/bge-m3's revision in MTEB


def _synthetic(seed: int = 3, without_hits: int = 0) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, int]]]:
    rng = random.Random(seed)
    run, qrels = {}, {}
    for q in range(40):
        docs = [f"d{rng.randrange(300)}" for _ in range(60)]
        run[f"q{q}"] = {d: float(rng.choice([1.0, 0.5, 0.25, rng.random()])) for d in docs}  # many ties
        judged = rng.sample(docs, 3) + [f"unretrieved{q}"]
        qrels[f"q{q}"] = {d: rng.choice([0, 1, 1, 2]) for d in judged}
    for q in range(without_hits):
        run.pop(f"q{q}")
    return run, qrels


def test_scores_equal_mtebs_retrieval_evaluator_key_for_key() -> None:
    metrics = pytest.importorskip("mteb._evaluators.retrieval_metrics")
    run, qrels = _synthetic()
    ours = mteb_scores.retrieval_scores(run.items(), qrels, chunk=7)  # in chunks of 7 queries
    r = metrics.calculate_retrieval_scores(run, qrels, list(mteb_scores.K_VALUES))
    theirs = metrics.make_score_dict(ndcg=r.ndcg, _map=r.map, recall=r.recall, precision=r.precision, mrr=r.mrr,
                                     naucs=r.naucs, naucs_mrr=r.naucs_mrr, hit_rate=r.hit_rate, task_scores={})  # fmt: skip
    assert set(ours) == {*theirs, "main_score"} and len(theirs) == 148  # 42 measures, accuracy and 105 nAUCs
    for key, value in theirs.items():
        if isinstance(value, float) and math.isnan(value):
            assert math.isnan(ours[key]), key
        elif key.startswith(("mrr", "nauc")):  # unrounded: the same arithmetic in another order
            assert ours[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key
        else:  # rounded to 5 decimals: a mean summed in another order may round to the neighbouring digit
            assert abs(ours[key] - value) <= 1e-5 + 1e-12 and ours[key] == round(ours[key], 5), key
    assert ours["main_score"] == ours["ndcg_at_10"] > 0 and ours["accuracy"] == ours["recall_at_1"]
    # a judged query without hits counts 0 (as in the tables); MTEB would leave it out
    fewer = {q: hits for q, hits in run.items() if q != "q0"}
    assert mteb_scores.retrieval_scores(fewer.items(), qrels)["ndcg_at_10"] < ours["ndcg_at_10"]


def test_task_result_loads_with_mteb_and_names_the_datas_revision(tmp_path: Path) -> None:
    mteb = pytest.importorskip("mteb")
    from mteb.results import TaskResult

    run, qrels = _synthetic()
    scores = mteb_scores.retrieval_scores(run.items(), qrels)
    path = tmp_path / "MIRACLRetrieval.json"
    path.write_text(json.dumps(mteb_results.task_result("miracl", "dev", {"sw": scores, "yo": scores}, 1.5, "abc")))
    loaded = TaskResult.from_disk(path)
    assert loaded.task_name == "MIRACLRetrieval" and list(loaded.scores) == ["dev"]
    assert loaded.get_score() == pytest.approx(scores["ndcg_at_10"])
    assert loaded.get_score(languages=["yor"]) == pytest.approx(scores["ndcg_at_10"])
    assert [s["languages"] for s in loaded.scores["dev"]] == [["swa-Latn"], ["yor-Latn"]]
    task = mteb.get_task("MIRACLRetrieval").metadata
    assert all(task.eval_langs[lang] == [code] for lang, code in mteb_results.MIRACL_LANGUAGES.items())
    assert loaded.dataset_revision == "abc"  # the data's, as given: not a table's
    assert (task.dataset["path"], task.dataset["revision"]) == mteb_results.TASKS["miracl"][1:]
    assert mteb.__version__ == mteb_results.MTEB_FORMAT  # the format written is the one these tests load
    messirve = mteb_results.task_result("messirve", "test", {"ar": scores}, 1.0, "x")
    assert messirve["task_name"] == "MiraclEvalMessIRveRetrieval"  # not an MTEB task


HN_TASK, HN_REPO, HN_PIN = mteb_results.TASKS["miracl-hn"]
SECRETS = ("embed.corp.internal", "CORP_EMBED_KEY", "/data/secret", "/home/alice", "corp-embed-v2")


def _fetched(tmp_path: Path, repo_id: str, commit: str) -> str:
    from miracl_eval.encoders.checkpoints import FETCH_RECORD

    folder = tmp_path / "hub" / repo_id.replace("/", "--")
    folder.mkdir(parents=True)
    (folder / FETCH_RECORD).write_text(json.dumps({"commit": commit}))
    return str(folder)


def _rows(tmp_path: Path) -> dict[str, dict]:
    """A run's rows, with their resolved settings as the workflow gives them: BGE-M3 (three methods), me5-small, an
    int8 view of it and its passages cut to 256 tokens, Qwen3-Embedding with its own task instruction, a reranker
    over BGE-M3, OpenAI's model, mDPR (not in mteb's registry), LaBSE (no preset), BM25, a hybrid, a local
    checkpoint and a model behind a private API."""
    from miracl_eval.config.models import resolve_models
    from miracl_eval.config.rerankers import resolve_reranker

    specs = resolve_models({
        "bge-m3": {}, "me5-small": {}, "me5-small@int8": {"view_of": "me5-small", "dimensions": 128, "storage": "int8"},
        "qwen3-embedding-0.6b": {"query_instruction": "Find the passage"}, "openai-3-large": {}, "mdpr": {},
        "labse": {"family": "dense", "checkpoint": "sentence-transformers/LaBSE", "pooling": "cls", "normalize": True},
        "mine": {"family": "dense", "checkpoint": "/data/secret/mine", "pooling": "mean", "normalize": True},
        "corp": {"family": "openai", "model": "corp-embed-v2", "base_url": "https://embed.corp.internal:8443/v1",
                 "api_key_env": "CORP_EMBED_KEY", "tokenizer": "/home/alice/tokenizers/corp"},
    })  # fmt: skip
    specs["me5-small-256"] = {**specs["me5-small"], "passage_max_length": 256}
    commits = {"bge-m3": SHA, "me5-small": "c007d7ef6fd86656326059b28395a7a03a7c5846",
               "qwen3-embedding-0.6b": "c54f2e6e80b2d7b7de06f51cec4959f6b3e03418", "mdpr": "b" * 40, "labse": "c" * 40}  # fmt: skip
    folders = {m: _fetched(tmp_path, specs[m]["checkpoint"], c) for m, c in commits.items()}
    folders["me5-small@int8"] = folders["me5-small-256"] = folders["me5-small"]

    def model(name: str, method: str = "dense", main: bool = True) -> dict:
        spec = specs[name]
        api = spec["family"] == "openai"
        return {"kind": "model", "checkpoint": spec["checkpoint"], "method": method, "main": main, "api": api,
                "settings": spec, "folder": spec["checkpoint"] if api else folders.get(name, spec["checkpoint"])}  # fmt: skip

    reranker = resolve_reranker("bge-reranker-v2-m3", None)
    return {
        "bge-m3/dense": model("bge-m3"),
        "bge-m3/sparse": model("bge-m3", "sparse", False),
        "bge-m3/all": model("bge-m3", "all", False),
        "me5-small/dense": model("me5-small"),
        "me5-small@int8/dense": model("me5-small@int8"),
        "me5-small-256/dense": model("me5-small-256"),
        "qwen3-embedding-0.6b/dense": model("qwen3-embedding-0.6b"),
        "bge-m3/dense>>bge-reranker-v2-m3": {
            "kind": "reranked",
            "checkpoint": reranker["checkpoint"],
            "method": "reranked",
            "first_stage": "bge-m3/dense",
            "settings": reranker,
            "folder": _fetched(tmp_path, reranker["checkpoint"], "953dc6f6f85a1b2dbfca4c34a2796e7dde08d41e"),
        },  # fmt: skip
        "openai-3-large/dense": model("openai-3-large"),
        "mdpr/dense": model("mdpr"),
        "labse/dense": model("labse"),
        "bm25": {"kind": "bm25", "method": "bm25", "settings": {"k1": 0.9, "b": 0.4, "thai": "auto"}},
        "bm25+m3": {"kind": "hybrid", "method": "hybrid", "settings": {"systems": ["bm25", "bge-m3/dense"]}},
        "mine/dense": model("mine"),
        "corp/dense": model("corp"),
    }


def _sources(tmp_path: Path, repo: str = HN_REPO, commit: str = HN_PIN) -> list[Path]:
    """Download folders whose records say they came from ``repo`` at ``commit`` (as the downloads write them)."""
    from miracl_eval.inputs.download import _write_source

    folders = [tmp_path / "downloads" / "corpus" / "sw", tmp_path / "downloads" / "topics" / "sw"]
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        _write_source(folder, repo, commit, [commit], ["sw-corpus/dev-00000-of-00001.parquet"])
    return folders


def _export(
    tmp_path: Path, dataset: str = "miracl-hn", sources: list[Path] | None = None, title_join: str | None = None
) -> tuple[Path, dict[str, dict]]:
    import numpy as np
    import pyarrow as pa

    from miracl_eval import schemas
    from miracl_eval.evaluation.comparability import COLUMNS
    from miracl_eval.runs import rank_table, write_run

    run, qrels = _synthetic(without_hits=2)
    rows = _rows(tmp_path)
    qrels_file = tmp_path / "qrels.parquet"
    judged_rows = [(q, d, r) for q, judged in qrels.items() for d, r in judged.items()]
    schemas.write_table(pa.table({"qid": [q for q, _, _ in judged_rows], "docid": [d for _, d, _ in judged_rows],
                                  "relevance": [r for _, _, r in judged_rows]}), qrels_file, schemas.QRELS)  # fmt: skip
    qids = list(run)
    flat = [(i, d, s) for i, q in enumerate(qids) for d, s in run[q].items()]
    table = rank_table(qids, np.array([i for i, _, _ in flat]), pa.array([d for _, d, _ in flat]),
                       np.array([s for _, _, s in flat]))  # fmt: skip
    runs = {}
    for label in rows:
        write_run(table, tmp_path / f"{len(runs)}.parquet", tmp_path / f"{len(runs)}.trec", "x")
        runs[label] = {"sw": tmp_path / f"{len(runs)}.parquet"}
    comparability = tmp_path / "comparability.tsv"
    row = {c: "-" for c in COLUMNS} | {"partition": "sw", "comparable": "yes"}
    comparability.write_text("\t".join(COLUMNS) + "\n" + "\t".join(row[c] for c in COLUMNS) + "\n")
    out = tmp_path / "mteb"
    given = _sources(tmp_path) if sources is None else sources
    mteb_results.mteb_stage(dataset, "dev", runs, {"sw": qrels_file}, comparability, rows, out, given, title_join)
    return out, rows


#: the submitted rows' experiments: another method, a view's search, a reranker's first stage, and every setting
#: that differs from the model's reference (its preset)
EXPERIMENTS = {
    "method_sparse", "method_all", "dimensions_128__storage_int8", "passage_max_length_256",
    "query_instruction_Find the passage", "first_stage_bge-m3_dense",
}  # fmt: skip


def test_the_export_passes_the_results_repositorys_checks(tmp_path: Path) -> None:
    """The checks of embeddings-benchmark/results (their logic, run here on the export's results/ folder):
    test_correct_folder_structure (results/{name with __}/{revision}/*.json), test_ensure_correct_metadata
    (model_meta.json names org/name, a 40-hex revision or an API version equal to its folder),
    test_new_results_run_settings and run_settings_check (mteb > 2.0.0 in the file and every score block,
    run_settings.jsonl covering every task, split and subset, read with mteb's own expansion), and
    test_model_implementation (every model is in mteb.get_model_metas()). Experiment folders are named as mteb
    names them (its own function)."""
    mteb = pytest.importorskip("mteb")
    from mteb.models.model_meta import _serialize_experiment_kwargs_to_name
    from mteb.results import TaskResult
    from mteb.results.task_result import _expand_run_settings_entry

    out, _ = _export(tmp_path)
    results = out / mteb_results.SUBMITTABLE
    metas = sorted(results.glob("**/model_meta.json"))
    # BGE-M3 and two variants, me5-small and two, Qwen3-Embedding's experiment, the reranker's, OpenAI's model
    assert len(metas) == 9
    implemented = {m.name for m in mteb.get_model_metas() if m.name}
    for meta_file in metas:
        meta = json.loads(meta_file.read_text())
        name, revision = meta["name"], meta["revision"]
        assert "/" in name and (re.fullmatch(r"[0-9a-f]{40}", revision) or len(revision) == 1)
        assert name in implemented and meta["submittable"] and meta["mteb_registry"]["has_model"]
        folder = results / name.replace("/", "__") / revision
        kwargs = meta["experiment_kwargs"]
        expected = folder / "experiments" / _serialize_experiment_kwargs_to_name(kwargs) if kwargs else folder
        assert meta_file.parent == expected
        for result_file in meta_file.parent.glob("*.json"):
            if result_file.name == "model_meta.json":
                continue
            loaded = TaskResult.from_disk(result_file)
            assert TaskResult._parse_mteb_version_min(loaded.mteb_version) > TaskResult._parse_mteb_version_min("2.0.0")
            assert all(b["mteb_version"] == loaded.mteb_version for blocks in loaded.scores.values() for b in blocks)
            covered = {key for line in (meta_file.parent / "run_settings.jsonl").read_text().splitlines()
                       for key, _, _ in _expand_run_settings_entry(json.loads(line))}  # fmt: skip
            assert {(loaded.task_name, s, b["hf_subset"]) for s, bl in loaded.scores.items() for b in bl} <= covered
            assert loaded.dataset_revision == HN_PIN
    assert {m.parent.name for m in metas if "experiments" in m.parts} == EXPERIMENTS
    readme = (out / "README.md").read_text()
    for label, why in (("bm25", "BM25 through Lucene"), ("bm25+m3", "hybrid"), ("mine/dense", "local checkpoint"),
                       ("mdpr/dense", "not in mteb"), ("labse/dense", "no shipped preset"),
                       ("corp/dense", "API other than OpenAI's")):  # fmt: skip
        assert f"`{label}`" in readme and why in readme, label
    assert "pull-request checklist" in readme and "reference implementation" in readme
    assert list((out / mteb_results.NOT_SUBMITTABLE).glob("*/*/MIRACLRetrievalHardNegatives.json"))


def test_the_export_is_an_mteb_cache(tmp_path: Path) -> None:
    mteb = pytest.importorskip("mteb")
    out, _ = _export(tmp_path)
    cache = mteb.ResultCache(out)
    loaded = cache.load_results(tasks=[HN_TASK], include_remote=False, load_experiments="match_name")
    seen = {(m.model_name, m.model_revision) for m in loaded.model_results}
    assert ("BAAI/bge-m3", SHA) in seen and ("openai/text-embedding-3-large", "3") in seen
    plain = cache.load_results(tasks=[HN_TASK], include_remote=False, load_experiments="no_experiments")
    assert len(plain.model_results) == 3  # BGE-M3, me5-small and OpenAI's model themselves, without experiments


def test_the_files_say_what_produced_them(tmp_path: Path) -> None:
    """This project at its version (pyproject's); mteb's version names the format only: mteb computed nothing."""
    import tomllib

    import miracl_eval

    version = tomllib.loads((Path(miracl_eval.__file__).parents[1] / "pyproject.toml").read_text())["project"][
        "version"
    ]
    assert miracl_eval.__version__ == version
    out, _ = _export(tmp_path)
    files = sorted(p for p in out.glob("*/*/*/**/*.json") if p.name != "model_meta.json")
    assert len(files) == 15  # every row
    for path in files:
        data = json.loads(path.read_text())
        origin = data["produced_by"]
        assert (origin["software"], origin["version"]) == ("miracl-eval", version)
        assert data["mteb_version"] == mteb_results.MTEB_FORMAT and "format" in origin["mteb_version"]
        assert "mteb ran no model" in origin["scores"]
        settings = json.loads((path.parent / "run_settings.jsonl").read_text())
        assert settings["version"] == {"mteb": mteb_results.MTEB_FORMAT, "miracl-eval": version}
        assert (
            settings["produced_by"]
            == origin
            == json.loads((path.parent / "model_meta.json").read_text())["produced_by"]
        )
    assert f"miracl-eval {version}" in (out / "README.md").read_text()


def _placement(label: str, row: dict, **kw):
    from miracl_eval.evaluation.mteb_origin import DataRevision, Registry

    reference = {"title_join": "{title} {text}", "query_instruction": "Given a question"}
    return mteb_results.placement(
        label, row, SHA, "miracl-hn", registry=kw.get("registry", Registry("2.26.24", {row["checkpoint"]: None})),
        data=kw.get("data", DataRevision(HN_PIN, None)), defaults=kw.get("defaults", reference), reference=reference,
    )  # fmt: skip


@pytest.mark.parametrize(
    "model, change, name",
    [
        ("me5-small", {}, None),  # the preset as it is: the model itself
        ("me5-small", {"passage_max_length": 256}, "passage_max_length_256"),
        ("me5-small", {"passage_prefix": ""}, "passage_prefix_"),
        ("me5-small", {"query_prefix": "Q: ", "passage_prefix": "P: "}, "passage_prefix_P_ __query_prefix_Q_ "),
        ("me5-small", {"title_join": "{title}. {text}"}, "title_join_{title}. {text}"),
        ("qwen3-embedding-0.6b", {"query_instruction": "Retrieve it"}, "query_instruction_Retrieve it"),
        ("qwen3-embedding-0.6b", {"query_instruction": "Given a question"}, None),  # the dataset's, spelled out
        (
            "qwen3-embedding-0.6b",
            {"query_template": "Instruct: {task}\nQ: {query}"},
            "query_template_Instruct_ {task}_nQ_ {query}",
        ),  # fmt: skip
        ("bge-m3", {"passage_max_length": 8192}, "passage_max_length_8192"),
    ],
)
def test_a_setting_that_differs_from_the_models_reference_names_an_experiment(
    model: str, change: dict, name: str | None
) -> None:
    """Each setting unlike the model's preset (its reference harness's) is in the experiment's name, as mteb names
    experiments (its own function); a row with a changed max length, prefix, title join or task instruction was
    filed as the model itself."""
    mteb_meta = pytest.importorskip("mteb.models.model_meta")
    from miracl_eval.config.models import resolve_model

    spec = {**resolve_model(model, None), **change}
    row = {"kind": "model", "checkpoint": spec["checkpoint"], "method": "dense", "main": True, "api": False,
           "settings": spec}  # fmt: skip
    where = _placement(f"{model}/dense", row)
    assert where.why_not is None and where.preset == model
    assert (mteb_results.experiment_name(where.experiment) if where.experiment else None) == name
    if where.experiment:
        assert mteb_results.experiment_name(where.experiment) == mteb_meta._serialize_experiment_kwargs_to_name(
            where.experiment
        )


def test_a_left_out_title_join_is_the_runs_and_the_reference_is_the_datasets(tmp_path: Path) -> None:
    """A run whose corpus join is not the dataset's ('{title}. {text}') encodes every model's passages with it:
    each model's row is an experiment of that join."""
    out, _ = _export(tmp_path, title_join="{title}. {text}")
    names = {p.parent.name for p in (out / mteb_results.SUBMITTABLE).glob("**/model_meta.json")}
    assert "title_join_{title}. {text}" in names
    assert "BAAI__bge-m3" not in {p.parent.parent.name for p in (out / mteb_results.SUBMITTABLE).glob("*/*/*.json")}


def test_the_dataset_revision_is_the_revision_of_the_data_used(tmp_path: Path) -> None:
    """What the downloads recorded: MTEB's repository at the revision its task pins is submittable; another commit
    of it, another repository (MIRACL from miracl/*), local files or a download without its record are not,
    and the files say which data they hold. (Every file said MTEB's revision, whatever the data.)"""
    pytest.importorskip("mteb")
    from mteb.results import TaskResult

    from miracl_eval.evaluation.mteb_origin import data_revision

    def exported(name: str, dataset: str = "miracl-hn", sources: list[Path] | None = None) -> tuple[str, dict]:
        out, _ = _export(tmp_path / name, dataset, sources)
        task = mteb_results.TASKS[dataset][0]
        path = next(out.glob(f"*/BAAI__bge-m3/{SHA}/{task}.json"))
        return TaskResult.from_disk(path).dataset_revision, json.loads(path.with_name("model_meta.json").read_text())

    revision, meta = exported("pinned")
    assert revision == HN_PIN and meta["submittable"] and meta["dataset"]["sources"] == [f"{HN_REPO}@{HN_PIN}"]
    (tmp_path / "other").mkdir()
    revision, meta = exported("other", sources=_sources(tmp_path / "other", commit="d" * 40))
    assert revision == "d" * 40 and not meta["submittable"] and f"MTEB's task reads it at {HN_PIN}" in meta["why_not"]
    (tmp_path / "miracl").mkdir()
    miracl = _sources(tmp_path / "miracl", "miracl/miracl-corpus", "e" * 40)[:1]
    miracl += _sources(tmp_path / "miracl" / "t", "miracl/miracl", "f" * 40)[1:]
    revision, meta = exported("miracl", "miracl", miracl)
    assert revision == f"miracl/miracl-corpus@{'e' * 40}, miracl/miracl@{'f' * 40}" and not meta["submittable"]
    assert "not from MTEB's mteb/MIRACLRetrieval at 9c09abc" in meta["why_not"]
    local = data_revision(HN_REPO, HN_PIN, None)
    assert local.revision == "unknown: local files" and "local files" in str(local.why_not)
    assert data_revision(HN_REPO, HN_PIN, [None]).why_not is not None  # downloaded before the records
    irds = data_revision("mteb/MIRACLRetrieval", "x", [{"ir_datasets": "miracl/sw/dev"}])
    assert irds.revision == "ir_datasets:miracl/sw/dev" and irds.why_not is not None


def test_nothing_private_is_published(tmp_path: Path) -> None:
    """No API URL, key variable, local checkpoint or tokenizer folder in any file of the export (only public
    settings are stated: every model setting is classified as one or the other)."""
    from miracl_eval.evaluation import mteb_origin

    out, rows = _export(tmp_path)
    assert rows["corp/dense"]["settings"]["base_url"].startswith("https://embed.corp.internal")
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) > 40
    for path in files:
        text = path.read_text(encoding="utf-8")
        leaked = [s for s in SECRETS if s in text]
        assert not leaked, (path.relative_to(out), leaked)
    meta = json.loads(next(out.glob("not_submittable/corp__dense/*/model_meta.json")).read_text())["miracl_eval"]
    assert meta["checkpoint"] == "a model behind another API" and meta["settings"]["tokenizer"] == "local"
    everything = mteb_origin.every_model_setting()
    public, private = mteb_origin.PUBLIC_MODEL_SETTINGS, mteb_origin.PRIVATE_MODEL_SETTINGS
    assert public | private == everything and not public & private  # a new setting must be classified


def test_a_model_mteb_does_not_implement_is_not_submittable() -> None:
    """The results repository takes only models in mteb's registry (its test_model_implementation reads
    mteb.get_model_metas(), as the installed package does offline); without mteb it is not known."""
    mteb = pytest.importorskip("mteb")
    from miracl_eval.config.models import resolve_model
    from miracl_eval.evaluation.mteb_origin import Registry, mteb_registry

    registry = mteb_registry()
    assert registry.mteb == mteb.__version__
    assert set(registry.models) == {m.name for m in mteb.get_model_metas() if m.name}
    for model, known in (("mdpr", False), ("me5-small", True)):
        spec = resolve_model(model, None)
        row = {"kind": "model", "checkpoint": spec["checkpoint"], "method": "dense", "main": True, "settings": spec}
        assert (spec["checkpoint"] in registry.models) == known
        where = _placement(model, row, registry=registry)
        assert (where.why_not is None) == known, where
        unknown = _placement(model, row, registry=Registry(None))
        assert unknown.why_not is not None and "mteb is not installed" in unknown.why_not


def test_each_row_is_told_its_kind_checkpoint_method_and_folder() -> None:
    """What the mteb_results job is given of a run's rows: a model's method (its main one or not) and the folder
    its jobs load, a hybrid's settings, a reranked row's reranker and first stage, BM25's settings."""
    from miracl_eval.config.validate import validate

    config = validate(
        {
            "languages": ["sw"],
            "models": {"bge-m3": {}, "openai-3-small": {}},
            "rerankers": {"bge-reranker-v2-m3": {}},
            "hybrids": {"bm25+m3": {"systems": ["bm25", "bge-m3/dense"], "method": "rrf"}},
            "methods": ["bm25", "bge-m3/dense", "bge-m3/sparse", "openai-3-small/dense", "bm25+m3",
                        "bm25>>bge-reranker-v2-m3"],
        }
    )  # fmt: skip
    folders = {"bge-m3": "resources/models/hub/BAAI--bge-m3", "openai-3-small": "text-embedding-3-small"}
    rows = mteb_results.mteb_rows(config, folders, {"bge-reranker-v2-m3": "resources/models/hub/reranker"})
    assert list(rows) == config["methods"]
    assert rows["bm25"] == {"kind": "bm25", "method": "bm25", "settings": config["bm25"]}
    dense, sparse, api = rows["bge-m3/dense"], rows["bge-m3/sparse"], rows["openai-3-small/dense"]
    assert dense == {
        "kind": "model",
        "checkpoint": "BAAI/bge-m3",
        "method": "dense",
        "main": True,
        "api": False,
        "settings": config["models"]["bge-m3"],
        "folder": "resources/models/hub/BAAI--bge-m3",
    }
    assert sparse["main"] is False and sparse["method"] == "sparse"
    assert api["api"] is True and api["folder"] == "text-embedding-3-small"
    assert rows["bm25+m3"] == {"kind": "hybrid", "method": "hybrid", "settings": config["hybrids"]["bm25+m3"]}
    assert rows["bm25>>bge-reranker-v2-m3"] == {
        "kind": "reranked",
        "checkpoint": "BAAI/bge-reranker-v2-m3",
        "method": "reranked",
        "first_stage": "bm25",
        "settings": config["rerankers"]["bge-reranker-v2-m3"],
        "folder": "resources/models/hub/reranker",
    }
