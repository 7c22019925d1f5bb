"""A run's rows as MTEB result files: ``results/mteb/{dataset}/{row}/{revision}/{task}.json``.

MTEB is where embedding results are compared, and its ``MIRACLRetrieval`` runs over the full
106M-passage corpus that few run; a full run here holds those numbers. Each row of the run becomes
one MTEB "model" folder, with the file MTEB writes for the task: per split a list of scores per
``hf_subset`` (a language) with its ``languages`` (ISO 639-3 and script, as MTEB's task declares
them), the retrieval scores MTEB reports (nDCG, MAP, Recall, Precision, MRR and hit rate at 1, 3, 5,
10, 20, 100 and 1000, rounded to 5 decimals as MTEB rounds them) and ``main_score`` (nDCG@10).
MessIRve is written under a task name of its own (:data:`TASKS`), clearly not an MTEB task.

Only partitions with the full data (:mod:`miracl_eval.evaluation.comparability`) are written: a
sample's numbers are not MTEB results. Scores are pytrec_eval's over every judged query (a query
without hits counts 0, as in the tables); ``model_meta.json`` beside each file names the row's
checkpoint, revision and settings.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from miracl_eval.atomic import atomic_output
from miracl_eval.schemas import EVAL_CHUNK
from miracl_eval.types import PathLike

K_VALUES = (1, 3, 5, 10, 20, 100, 1000)
#: MTEB's default revision for a model whose revision is not known
NO_REVISION = "no_revision_available"
#: the MIRACL languages as MTEB's MIRACLRetrieval task declares them (``eval_langs``)
MIRACL_LANGUAGES: Mapping[str, str] = {
    "ar": "ara-Arab", "bn": "ben-Beng", "de": "deu-Latn", "en": "eng-Latn", "es": "spa-Latn", "fa": "fas-Arab",
    "fi": "fin-Latn", "fr": "fra-Latn", "hi": "hin-Deva", "id": "ind-Latn", "ja": "jpn-Jpan", "ko": "kor-Kore",
    "ru": "rus-Cyrl", "sw": "swa-Latn", "te": "tel-Telu", "th": "tha-Thai", "yo": "yor-Latn", "zh": "zho-Hans",
}  # fmt: skip
#: dataset -> (task name, the dataset revision written)
TASKS: Mapping[str, tuple[str, str]] = {
    "miracl": ("MIRACLRetrieval", "miracl-v1.0"),
    "messirve": ("MiraclEvalMessIRveRetrieval", "messirve"),  # not an MTEB task: a name of its own
}
_PYTREC = {"ndcg": "ndcg_cut", "map": "map_cut", "recall": "recall", "precision": "P", "hit_rate": "success"}


def _languages(dataset: str, partition: str) -> list[str]:
    return [MIRACL_LANGUAGES[partition]] if dataset == "miracl" else ["spa-Latn"]


def retrieval_scores(
    run: Iterable[tuple[str, Mapping[str, float]]], qrels: Mapping[str, Mapping[str, int]], chunk: int = EVAL_CHUNK
) -> dict[str, float]:
    """MTEB's retrieval scores (``ndcg_at_10``, ``map_at_100``, ``mrr_at_10``, ...) of a run given as
    ``(qid, {docid: score})`` per query, over every judged query (one without hits counts 0), rounded
    to 5 decimals; queries are evaluated ``chunk`` at a time. MRR ranks ties by docid, descending, as
    pytrec_eval does."""
    import pytrec_eval

    ks = ",".join(map(str, K_VALUES))
    measures = {f"{name}.{ks}" for name in _PYTREC.values()}
    totals: dict[str, float] = {f"{ours}_at_{k}": 0.0 for ours in (*_PYTREC, "mrr") for k in K_VALUES}

    def evaluate(pending: dict[str, dict[str, float]]) -> None:
        if not pending:
            return
        judged = {q: dict(qrels[q]) for q in pending}
        for scores in pytrec_eval.RelevanceEvaluator(judged, measures).evaluate(pending).values():
            for ours, theirs in _PYTREC.items():
                for k in K_VALUES:
                    totals[f"{ours}_at_{k}"] += scores[f"{theirs}_{k}"]
        for q, hits in pending.items():
            relevant = {d for d, rel in qrels[q].items() if rel > 0}
            ranked = sorted(hits.items(), key=lambda item: (item[1], item[0]), reverse=True)
            first = next((i + 1 for i, (d, _) in enumerate(ranked[: max(K_VALUES)]) if d in relevant), None)
            for k in K_VALUES:
                totals[f"mrr_at_{k}"] += 1.0 / first if first is not None and first <= k else 0.0

    pending: dict[str, dict[str, float]] = {}
    for qid, hits in run:
        if qid in qrels:
            pending[qid] = dict(hits)
            if len(pending) >= chunk:
                evaluate(pending)
                pending = {}
    evaluate(pending)
    out = {name: round(total / len(qrels), 5) for name, total in totals.items()}
    out["main_score"] = out["ndcg_at_10"]
    return out


def task_result(dataset: str, split: str, subsets: Mapping[str, Mapping[str, float]], seconds: float) -> dict:
    """The JSON of an MTEB ``TaskResult`` for ``subsets`` (partition -> :func:`retrieval_scores`)."""
    task, revision = TASKS[dataset]
    scores = [{**values, "hf_subset": part, "languages": _languages(dataset, part)} for part, values in subsets.items()]
    return {
        "dataset_revision": revision,
        "task_name": task,
        "mteb_version": None,
        "scores": {split: scores},
        "evaluation_time": seconds,
        "kg_co2_emissions": None,
    }


def folder_name(label: str) -> str:
    """A row's MTEB model folder: its label with ``/`` as ``__`` (MTEB's convention for model names)."""
    return label.replace("/", "__")


def mteb_stage(
    dataset: str,
    split: str,
    runs: Mapping[str, Mapping[str, PathLike]],
    qrels: Mapping[str, PathLike],
    comparability_tsv: PathLike,
    rows: Mapping[str, Mapping[str, Any]],
    output: PathLike,
) -> dict[str, int]:
    """Stage entry point: one MTEB result file per row (``runs``: row -> partition -> run Parquet) over
    the partitions with the full data, and its ``model_meta.json`` (``rows``: row -> its checkpoint,
    method and settings, and ``folder``: the checkpoint's folder, whose fetch record gives the revision),
    in the folder ``output`` (written whole, atomically)."""
    import time

    from miracl_eval.evaluation.comparability import comparable_partitions, read_comparability
    from miracl_eval.evaluation.metrics import iter_run_queries, load_qrels

    full = [p for p in qrels if p in comparable_partitions(read_comparability(comparability_tsv))]
    judged = {p: load_qrels(qrels[p]) for p in full}
    with atomic_output(output, directory=True) as tmp:
        root = Path(tmp)
        if not full:
            (root / "README.txt").write_text(
                f"No partition of this {dataset} run has the full data (results/{dataset}_comparability.tsv): "
                "no MTEB result is written.\n",
                encoding="utf-8",
            )
            return {"rows": 0, "partitions": 0}
        task = TASKS[dataset][0]
        for label, given in rows.items():
            started = time.perf_counter()
            subsets = {p: retrieval_scores(iter_run_queries(runs[label][p]), judged[p]) for p in full}
            meta = {k: v for k, v in given.items() if k != "folder"}
            meta["revision"] = model_revision(given.get("folder")) or NO_REVISION
            folder = root / folder_name(label) / meta["revision"]
            folder.mkdir(parents=True)
            result = task_result(dataset, split, subsets, time.perf_counter() - started)
            (folder / f"{task}.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
            (folder / "model_meta.json").write_text(
                json.dumps({"name": label, **meta, "generated_by": "miracl-eval"}, indent=2, default=str) + "\n",
                encoding="utf-8",
            )
    return {"rows": len(rows), "partitions": len(full)}


def model_revision(folder: str | os.PathLike[str] | None) -> str | None:
    """The commit a hub model was fetched at (its ``miracl-eval-fetch.json``), when known."""
    if folder is None:
        return None
    from miracl_eval.encoders.checkpoints import FETCH_RECORD

    record = Path(folder) / FETCH_RECORD
    try:
        return str(json.loads(record.read_text(encoding="utf-8"))["commit"])
    except (OSError, ValueError, KeyError):
        return None
