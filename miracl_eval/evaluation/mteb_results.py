"""A run's rows as MTEB results, in the layout of MTEB's result cache and the public results repository
(embeddings-benchmark/results): ``results/mteb/{dataset}/results/{org}__{name}/{revision}/{task}.json``.

MTEB is where embedding results are compared, and its ``MIRACLRetrieval`` runs over the full 106M-passage
corpus that few run; a full run here holds those numbers. Each row becomes the files MTEB writes for the task
(:func:`task_result`: per split a score block per ``hf_subset``, a language, with MTEB's retrieval scores,
:mod:`miracl_eval.evaluation.mteb_scores`), beside ``model_meta.json`` (the model's hub name ``org/name``, its
revision, the row's settings) and ``run_settings.jsonl`` (what ran each split and subset, and the versions):
what the results repository's checks ask of a submission (``tests/test_ensure_correct_metadata.py``,
``tests/test_correct_folder_structure.py``, ``tests/test_new_results_run_settings.py``).

Where a row goes (:func:`placement`): a hub model's main method (a dense model's ``dense``, BGE-M3's ``dense``,
SPLADE's ``sparse``) as its model at the commit it was fetched at; its other methods and views, and reranked
rows (under the reranker), as ``experiments/{name}`` of that revision, named from their settings as mteb names
experiments (``method_sparse``, ``dimensions_128__storage_int8``, ``first_stage_bge-m3_dense``); OpenAI's models as
``openai/{model}`` at the API version MTEB records. The rest cannot be submitted (BM25 through Lucene, hybrids,
local checkpoints, a hub model whose commit is not known): written under ``not_submittable/`` with a README that
says why. The export folder is an MTEB cache: ``mteb.ResultCache(results/mteb/{dataset})`` loads it.

Only partitions with the full data (:mod:`miracl_eval.evaluation.comparability`) are written: a sample's numbers
are not MTEB results. MessIRve is written under a task name of its own (:data:`TASKS`), not an MTEB task, and is
never submittable.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from miracl_eval.atomic import atomic_output
from miracl_eval.encoders.registry import OPENAI_URL, SEARCHED_AS_ENCODED
from miracl_eval.evaluation.mteb_scores import retrieval_scores
from miracl_eval.inputs.datasets import MIRACL_HN_REVISION
from miracl_eval.types import PathLike

#: MTEB's default revision for a model whose revision is not known (the results repository refuses it)
NO_REVISION = "no_revision_available"
#: the mteb release whose result format these files follow (the tests load and validate them with it)
MTEB_FORMAT = "2.26.24"
#: the MIRACL languages as MTEB's MIRACLRetrieval task declares them (``eval_langs``)
MIRACL_LANGUAGES: Mapping[str, str] = {
    "ar": "ara-Arab", "bn": "ben-Beng", "de": "deu-Latn", "en": "eng-Latn", "es": "spa-Latn", "fa": "fas-Arab",
    "fi": "fin-Latn", "fr": "fra-Latn", "hi": "hin-Deva", "id": "ind-Latn", "ja": "jpn-Jpan", "ko": "kor-Kore",
    "ru": "rus-Cyrl", "sw": "swa-Latn", "te": "tel-Telu", "th": "tha-Thai", "yo": "yor-Latn", "zh": "zho-Hans",
}  # fmt: skip
#: dataset -> (task name, the dataset revision written): MIRACL's is the hub revision of mteb/MIRACLRetrieval
#: that MTEB pins (mteb 2.26, tasks/retrieval/multilingual/miracl_retrieval.py), the same MIRACL v1.0 dev data
TASKS: Mapping[str, tuple[str, str]] = {
    "miracl": ("MIRACLRetrieval", "9c09abc13478308c27598f350e31d8f06b9b5481"),
    # the same data as MTEB's MIRACLRetrievalHardNegatives.v2, which differs only in its prompt
    "miracl-hn": ("MIRACLRetrievalHardNegatives", MIRACL_HN_REVISION),
    "messirve": ("MiraclEvalMessIRveRetrieval", "messirve"),  # not an MTEB task: a name of its own
}
#: the datasets whose task is MTEB's (their results can be submitted)
MTEB_DATASETS = frozenset({"miracl", "miracl-hn"})
#: the API version MTEB records as the revision of OpenAI's models (mteb 2.26, openai_models.py)
OPENAI_REVISIONS: Mapping[str, str] = {"text-embedding-3-large": "3", "text-embedding-3-small": "3"}
SUBMITTABLE, NOT_SUBMITTABLE = "results", "not_submittable"
EXPERIMENTS = "experiments"
_SHA1 = re.compile(r"^[0-9a-f]{40}$")
#: characters mteb replaces with ``_`` in an experiment's name
_INVALID = re.compile(r'[<>:"|?*\\/\0]')


def _languages(dataset: str, partition: str) -> list[str]:
    return [MIRACL_LANGUAGES[partition]] if dataset in MTEB_DATASETS else ["spa-Latn"]


def task_result(dataset: str, split: str, subsets: Mapping[str, Mapping[str, float]], seconds: float) -> dict:
    """The JSON of an MTEB ``TaskResult`` for ``subsets`` (partition -> MTEB's retrieval scores)."""
    task, revision = TASKS[dataset]
    scores = [
        {**values, "hf_subset": part, "languages": _languages(dataset, part), "mteb_version": MTEB_FORMAT}
        for part, values in subsets.items()
    ]
    return {
        "dataset_revision": revision,
        "task_name": task,
        "mteb_version": MTEB_FORMAT,
        "scores": {split: scores},
        "evaluation_time": seconds,
        "kg_co2_emissions": None,
    }


def experiment_name(kwargs: Mapping[str, Any]) -> str:
    """An experiment's folder name as mteb derives it from its keyword arguments: ``key_value`` pairs, sorted,
    joined with ``__``, the characters a folder name cannot hold replaced with ``_``."""
    return "__".join(f"{k}_{_INVALID.sub('_', str(v))}" for k, v in sorted(kwargs.items()))


@dataclass(frozen=True)
class Placement:
    """Where a row's result goes."""

    name: str  #: the model's name (``org/name`` when submittable)
    revision: str
    experiment: Mapping[str, Any] | None = None  #: the experiment's keyword arguments; None: the model itself
    why_not: str | None = None  #: why the row cannot be submitted; None: it can

    def folder(self, root: Path) -> Path:
        base = root / (SUBMITTABLE if self.why_not is None else NOT_SUBMITTABLE)
        out = base / self.name.replace(" ", "_").replace("/", "__") / self.revision
        return out / EXPERIMENTS / experiment_name(self.experiment) if self.experiment else out


def _hub_model(checkpoint: str, revision: str | None, what: str) -> str | None:
    """Why a checkpoint cannot be submitted under its name, None if it can."""
    if checkpoint.count("/") != 1 or checkpoint.startswith((".", "/", "~")) or os.path.isabs(checkpoint):
        return f"{what} {checkpoint!r} is a local checkpoint, not a model on the hub (org/name)"
    if revision is None or not _SHA1.match(revision):
        return f"the commit {what} {checkpoint} was fetched at is not known (fetch it with the fetch_model rule)"
    return None


def placement(label: str, row: Mapping[str, Any], revision: str | None, dataset: str) -> Placement:
    """Where row ``label`` (what :func:`mteb_stage` is given of it) goes, and whether it can be submitted."""
    kind = row.get("kind")
    settings = row.get("settings") or {}
    if dataset not in MTEB_DATASETS:
        return Placement(label, revision or NO_REVISION, None, f"{TASKS[dataset][0]} is not an MTEB task")
    if kind == "bm25":
        return Placement(label, NO_REVISION, None, "BM25 through Lucene is not a model on the hub")
    if kind == "hybrid":
        return Placement(label, NO_REVISION, None, "a hybrid of several rows is not one model")
    checkpoint = str(row.get("checkpoint", ""))
    if kind == "reranked":
        why = _hub_model(checkpoint, revision, "the reranker")
        if why is not None:
            return Placement(label, revision or NO_REVISION, None, why)
        return Placement(checkpoint, str(revision), {"first_stage": row.get("first_stage")})
    # a method other than the model's main one, a view's dimensions, storage and rescoring: an experiment
    variant: dict[str, Any] = {} if row.get("main") else {"method": row.get("method")}
    variant.update({k: settings[k] for k, plain in SEARCHED_AS_ENCODED.items() if settings.get(k, plain) != plain})
    if row.get("api"):
        if settings.get("base_url") != OPENAI_URL or checkpoint not in OPENAI_REVISIONS:
            why = f"{checkpoint} through {settings.get('base_url')} is not a model MTEB knows"
            return Placement(label, NO_REVISION, None, why)
        return Placement(f"openai/{checkpoint}", OPENAI_REVISIONS[checkpoint], variant or None)
    why = _hub_model(checkpoint, revision, "the model")
    if why is not None:
        return Placement(label, revision or NO_REVISION, None, why)
    return Placement(checkpoint, str(revision), variant or None)


def _versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {"mteb": MTEB_FORMAT}
    for name in ("miracl-eval", "torch", "transformers", "sentence-transformers", "pyserini"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def mteb_stage(
    dataset: str,
    split: str,
    runs: Mapping[str, Mapping[str, PathLike]],
    qrels: Mapping[str, PathLike],
    comparability_tsv: PathLike,
    rows: Mapping[str, Mapping[str, Any]],
    output: PathLike,
) -> dict[str, int]:
    """Stage entry point: every row's MTEB result over the partitions with the full data (``runs``: row ->
    partition -> run Parquet), with ``model_meta.json`` and ``run_settings.jsonl``, in the folder ``output``
    (written whole, atomically; see the module's docstring for the layout). ``rows``: row -> what is known of
    it (``kind``, ``checkpoint``, ``method``, ``main``, ``api``, ``settings``, ``first_stage``, and ``folder``:
    the checkpoint's folder, whose fetch record gives the revision)."""
    import time

    from miracl_eval.evaluation.comparability import comparable_partitions, read_comparability
    from miracl_eval.evaluation.metrics import iter_run_queries, load_qrels

    full = [p for p in qrels if p in comparable_partitions(read_comparability(comparability_tsv))]
    judged = {p: load_qrels(qrels[p]) for p in full}
    with atomic_output(output, directory=True) as tmp:
        root = Path(tmp)
        if not full:
            (root / "README.md").write_text(
                f"No partition of this {dataset} run has the full data (results/{dataset}_comparability.tsv): "
                "no MTEB result is written.\n",
                encoding="utf-8",
            )
            return {"rows": 0, "partitions": 0}
        task = TASKS[dataset][0]
        placed: dict[Path, str] = {}
        notes = []
        versions = _versions()
        for label, given in rows.items():
            started = time.perf_counter()
            subsets = {p: retrieval_scores(iter_run_queries(runs[label][p]), judged[p]) for p in full}
            where = placement(label, given, model_revision(given.get("folder")), dataset)
            folder = where.folder(root)
            if folder in placed:  # two rows of one model and settings (e.g. two names for one checkpoint)
                where = Placement(where.name, where.revision, {**(where.experiment or {}), "row": label}, where.why_not)
                folder = where.folder(root)
            placed[folder] = label
            folder.mkdir(parents=True)
            result = task_result(dataset, split, subsets, time.perf_counter() - started)
            (folder / f"{task}.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
            meta = {
                "name": where.name,
                "revision": where.revision,
                "experiment_kwargs": dict(where.experiment) if where.experiment else None,
                "miracl_eval": {"row": label, **{k: v for k, v in given.items() if k != "folder"}},
            }
            (folder / "model_meta.json").write_text(json.dumps(meta, indent=2, default=str) + "\n", encoding="utf-8")
            settings = {"task": task, "splits": [split], "subsets": sorted(full), "version": versions,
                        "encode_kwargs": {}, "miracl_eval_row": label}  # fmt: skip
            (folder / "run_settings.jsonl").write_text(json.dumps(settings, default=str) + "\n", encoding="utf-8")
            rel = folder.relative_to(root)
            notes.append(f"- `{label}`: `{rel}`" + (f" (not submittable: {where.why_not})" if where.why_not else ""))
        (root / "README.md").write_text(
            f"# MTEB results of this {dataset} run ({task}, split {split}, {len(full)} partitions)\n\n"
            f"`{SUBMITTABLE}/` is laid out as the results repository's `results/` (embeddings-benchmark/results): "
            "copy its folders there to submit them. This folder is an MTEB cache (`mteb.ResultCache(<this folder>)`). "
            f"`{NOT_SUBMITTABLE}/` holds the rows that cannot be submitted, each with the reason below.\n\n"
            + "\n".join(notes)
            + "\n",
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
