"""MTEB result files: the scores equal MTEB's own retrieval evaluator; the file loads as an MTEB TaskResult."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from miracl_eval.evaluation import mteb_results


def _synthetic(seed: int = 3) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, int]]]:
    rng = random.Random(seed)
    run, qrels = {}, {}
    for q in range(40):
        docs = [f"d{rng.randrange(300)}" for _ in range(60)]
        run[f"q{q}"] = {d: float(rng.choice([1.0, 0.5, 0.25, rng.random()])) for d in docs}  # many ties
        judged = rng.sample(docs, 3) + [f"unretrieved{q}"]
        qrels[f"q{q}"] = {d: rng.choice([0, 1, 1, 2]) for d in judged}
    return run, qrels


def test_scores_equal_mtebs_retrieval_evaluator() -> None:
    metrics = pytest.importorskip("mteb._evaluators.retrieval_metrics")
    run, qrels = _synthetic()
    ours = mteb_results.retrieval_scores(run.items(), qrels, chunk=7)  # in chunks of 7 queries
    theirs = metrics.calculate_retrieval_scores(run, qrels, list(mteb_results.K_VALUES))
    for name, table in (("ndcg", theirs.ndcg), ("map", theirs.map), ("recall", theirs.recall),
                        ("precision", theirs.precision), ("hit_rate", theirs.hit_rate)):  # fmt: skip
        for key, value in table.items():
            k = key.split("@")[1]
            assert ours[f"{name}_at_{k}"] == pytest.approx(value, abs=1e-9), (name, k)
    for key, value in theirs.mrr.items():
        assert ours[f"mrr_at_{key.split('@')[1]}"] == pytest.approx(round(value, 5), abs=1e-9), key
    assert ours["main_score"] == ours["ndcg_at_10"] > 0
    # a judged query without hits counts 0 (as in the tables); MTEB would leave it out
    fewer = {q: hits for q, hits in run.items() if q != "q0"}
    assert mteb_results.retrieval_scores(fewer.items(), qrels)["ndcg_at_10"] < ours["ndcg_at_10"]


def test_task_result_loads_with_mteb(tmp_path: Path) -> None:
    mteb_task = pytest.importorskip("mteb.results")
    run, qrels = _synthetic()
    scores = mteb_results.retrieval_scores(run.items(), qrels)
    path = tmp_path / "MIRACLRetrieval.json"
    path.write_text(json.dumps(mteb_results.task_result("miracl", "dev", {"sw": scores, "yo": scores}, 1.5)))
    loaded = mteb_task.TaskResult.from_disk(path)
    assert loaded.task_name == "MIRACLRetrieval" and list(loaded.scores) == ["dev"]
    assert loaded.get_score() == pytest.approx(scores["ndcg_at_10"])
    assert loaded.get_score(languages=["yor"]) == pytest.approx(scores["ndcg_at_10"])
    assert [s["languages"] for s in loaded.scores["dev"]] == [["swa-Latn"], ["yor-Latn"]]
    import mteb

    declared = mteb.get_task("MIRACLRetrieval").metadata.eval_langs
    assert all(declared[lang] == [code] for lang, code in mteb_results.MIRACL_LANGUAGES.items())
    messirve = mteb_results.task_result("messirve", "test", {"ar": scores}, 1.0)
    assert messirve["task_name"] == "MiraclEvalMessIRveRetrieval"  # not an MTEB task
