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


def test_task_result_loads_with_mteb_and_names_mtebs_dataset_revision(tmp_path: Path) -> None:
    mteb = pytest.importorskip("mteb")
    from mteb.results import TaskResult

    run, qrels = _synthetic()
    scores = mteb_scores.retrieval_scores(run.items(), qrels)
    path = tmp_path / "MIRACLRetrieval.json"
    path.write_text(json.dumps(mteb_results.task_result("miracl", "dev", {"sw": scores, "yo": scores}, 1.5)))
    loaded = TaskResult.from_disk(path)
    assert loaded.task_name == "MIRACLRetrieval" and list(loaded.scores) == ["dev"]
    assert loaded.get_score() == pytest.approx(scores["ndcg_at_10"])
    assert loaded.get_score(languages=["yor"]) == pytest.approx(scores["ndcg_at_10"])
    assert [s["languages"] for s in loaded.scores["dev"]] == [["swa-Latn"], ["yor-Latn"]]
    task = mteb.get_task("MIRACLRetrieval").metadata
    assert all(task.eval_langs[lang] == [code] for lang, code in mteb_results.MIRACL_LANGUAGES.items())
    assert loaded.dataset_revision == task.dataset["revision"] == mteb_results.TASKS["miracl"][1]
    assert mteb.__version__ == mteb_results.MTEB_FORMAT  # the format written is the one these tests load
    messirve = mteb_results.task_result("messirve", "test", {"ar": scores}, 1.0)
    assert messirve["task_name"] == "MiraclEvalMessIRveRetrieval"  # not an MTEB task


def _rows(tmp_path: Path) -> dict[str, dict]:
    """A run's rows: BGE-M3 fetched at its commit (three methods), a 128-dimension view of it, a reranker over it,
    OpenAI's model, BM25, a hybrid and a local checkpoint."""
    fetched = tmp_path / "hub" / "BAAI--bge-m3"
    fetched.mkdir(parents=True)
    from miracl_eval.encoders.checkpoints import FETCH_RECORD

    (fetched / FETCH_RECORD).write_text(json.dumps({"commit": SHA}))
    reranker = tmp_path / "hub" / "BAAI--bge-reranker-v2-m3"
    reranker.mkdir()
    (reranker / FETCH_RECORD).write_text(json.dumps({"commit": "953dc6f6f85a1b2dbfca4c34a2796e7dde08d41e"}))
    m3 = {"kind": "model", "checkpoint": "BAAI/bge-m3", "folder": str(fetched), "api": False}
    openai = {"family": "openai", "base_url": mteb_results.OPENAI_URL, "dimensions": None}
    return {
        "bge-m3/dense": {**m3, "method": "dense", "main": True, "settings": {"weights": {"dense": 1}}},
        "bge-m3/sparse": {**m3, "method": "sparse", "main": False, "settings": {}},
        "bge-m3/all": {**m3, "method": "all", "main": False, "settings": {}},
        "bge-m3@128/dense": {**m3, "method": "dense", "main": True,
                             "settings": {"view_of": "bge-m3", "dimensions": 128, "storage": "int8"}},
        "bge-m3/dense>>bge-reranker-v2-m3": {"kind": "reranked", "checkpoint": "BAAI/bge-reranker-v2-m3",
                                             "method": "reranked", "first_stage": "bge-m3/dense",
                                             "folder": str(reranker), "settings": {}},
        "openai-3-large/dense": {"kind": "model", "checkpoint": "text-embedding-3-large", "method": "dense",
                                 "main": True, "api": True, "settings": openai, "folder": "text-embedding-3-large"},
        "bm25": {"kind": "bm25", "method": "bm25", "settings": {"k1": 0.9}},
        "bm25+m3": {"kind": "hybrid", "method": "hybrid", "settings": {}},
        "mine/dense": {"kind": "model", "checkpoint": "/data/mine", "method": "dense", "main": True, "api": False,
                       "settings": {}, "folder": "/data/mine"},
    }  # fmt: skip


def _export(tmp_path: Path) -> tuple[Path, dict[str, dict]]:
    import numpy as np
    import pyarrow as pa

    from miracl_eval.runs import rank_table, write_run

    run, qrels = _synthetic(without_hits=2)
    rows = _rows(tmp_path)
    from miracl_eval import schemas

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
    from miracl_eval.evaluation.comparability import COLUMNS

    row = {c: "-" for c in COLUMNS} | {"partition": "sw", "comparable": "yes"}
    comparability.write_text("\t".join(COLUMNS) + "\n" + "\t".join(row[c] for c in COLUMNS) + "\n")
    out = tmp_path / "mteb"
    mteb_results.mteb_stage("miracl", "dev", runs, {"sw": qrels_file}, comparability, rows, out)
    return out, rows


def test_the_export_passes_the_results_repositorys_checks(tmp_path: Path) -> None:
    """The checks of embeddings-benchmark/results (their logic, run here on the export's results/ folder):
    test_correct_folder_structure (results/{name with __}/{revision}/*.json), test_ensure_correct_metadata
    (model_meta.json names org/name, a 40-hex revision or an API version equal to its folder),
    test_new_results_run_settings and run_settings_check (mteb > 2.0.0 in the file and every score block,
    run_settings.jsonl covering every task, split and subset, read with mteb's own expansion)."""
    pytest.importorskip("mteb")
    from mteb.results import TaskResult
    from mteb.results.task_result import _expand_run_settings_entry

    out, _ = _export(tmp_path)
    results = out / mteb_results.SUBMITTABLE
    metas = sorted(results.glob("**/model_meta.json"))
    assert len(metas) == 6  # BGE-M3 and its four variants, OpenAI's model; not BM25, the hybrid, the local model
    for meta_file in metas:
        meta = json.loads(meta_file.read_text())
        name, revision = meta["name"], meta["revision"]
        assert "/" in name and (re.fullmatch(r"[0-9a-f]{40}", revision) or len(revision) == 1)
        folder = results / name.replace("/", "__") / revision
        kwargs = meta["experiment_kwargs"]
        expected = folder / "experiments" / mteb_results.experiment_name(kwargs) if kwargs else folder
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
    assert {m.parent.name for m in metas if "experiments" in m.parts} == {
        "method_sparse", "method_all", "dimensions_128__storage_int8", "first_stage_bge-m3_dense",
    }  # fmt: skip
    readme = (out / "README.md").read_text()
    for label, why in (("bm25", "BM25 through Lucene"), ("bm25+m3", "hybrid"), ("mine/dense", "local checkpoint")):
        assert f"`{label}`" in readme and why in readme
    assert list((out / mteb_results.NOT_SUBMITTABLE).glob("*/*/MIRACLRetrieval.json"))


def test_the_export_is_an_mteb_cache(tmp_path: Path) -> None:
    mteb = pytest.importorskip("mteb")
    out, _ = _export(tmp_path)
    cache = mteb.ResultCache(out)
    loaded = cache.load_results(tasks=["MIRACLRetrieval"], include_remote=False, load_experiments="match_name")
    seen = {(m.model_name, m.model_revision) for m in loaded.model_results}
    assert ("BAAI/bge-m3", SHA) in seen and ("openai/text-embedding-3-large", "3") in seen
    plain = cache.load_results(tasks=["MIRACLRetrieval"], include_remote=False, load_experiments="no_experiments")
    assert len(plain.model_results) == 2  # the two models themselves, without their experiments
