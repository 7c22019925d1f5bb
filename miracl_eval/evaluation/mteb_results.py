"""A run's rows as MTEB results, in the layout of MTEB's result cache and the public results repository
(embeddings-benchmark/results): ``results/mteb/{dataset}/results/{org}__{name}/{revision}/{task}.json``.

MTEB is where embedding results are compared, and its ``MIRACLRetrieval`` runs over the full 106M-passage
corpus that few run; a full run here holds those numbers. Each row becomes the files MTEB writes for the task
(:func:`task_result`: per split a score block per ``hf_subset``, a language, with MTEB's retrieval scores,
:mod:`miracl_eval.evaluation.mteb_scores`), beside ``model_meta.json`` (the model's hub name ``org/name``, its
revision, its experiment, why it cannot be submitted, and the row's public settings) and ``run_settings.jsonl``
(what ran each split and subset, and the versions): what the results repository's checks ask of a submission
(``tests/test_ensure_correct_metadata.py``, ``tests/test_correct_folder_structure.py``,
``tests/test_new_results_run_settings.py``, ``tests/test_model_implementation.py``). Every file says what made it
and on which data (:mod:`miracl_eval.evaluation.mteb_origin`).

Where a row goes (:func:`placement`): a hub model's main method (a dense model's ``dense``, BGE-M3's ``dense``,
SPLADE's ``sparse``) with its preset's settings as its model at the commit it was fetched at; its other methods
and views, reranked rows (under the reranker), and every setting that differs from the preset, as
``experiments/{name}`` of that revision, named as mteb names experiments (``method_sparse``,
``dimensions_128__storage_int8``, ``passage_max_length_256``, ``first_stage_bge-m3_dense``); OpenAI's models as
``openai/{model}`` at the API version MTEB records. The rest cannot be submitted (BM25 through Lucene, hybrids,
local checkpoints, a hub model whose commit is not known, one without a preset or outside mteb's registry, data
that is not MTEB's at its revision): written under ``not_submittable/`` with a README that says why. The export
folder is an MTEB cache: ``mteb.ResultCache(results/mteb/{dataset})`` loads it.

Only partitions with the full data (:mod:`miracl_eval.evaluation.comparability`) are written: a sample's numbers
are not MTEB results. MessIRve is written under a task name of its own (:data:`TASKS`), not an MTEB task, and is
never submittable.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from miracl_eval.atomic import atomic_output
from miracl_eval.config.systems import systems
from miracl_eval.encoders.registry import FAMILIES, OPENAI_URL, SEARCHED_AS_ENCODED
from miracl_eval.evaluation.mteb_origin import (
    MTEB_FORMAT,
    DataRevision,
    Registry,
    data_revision,
    produced_by,
    public_row,
    reference_differences,
)
from miracl_eval.evaluation.mteb_scores import retrieval_scores
from miracl_eval.inputs.datasets import MIRACL_HN_REVISION, get_dataset
from miracl_eval.types import PathLike

__all__ = ["MTEB_FORMAT", "Placement", "experiment_name", "mteb_stage", "placement", "task_result"]

#: MTEB's default revision for a model whose revision is not known (the results repository refuses it)
NO_REVISION = "no_revision_available"
#: the MIRACL languages as MTEB's MIRACLRetrieval task declares them (``eval_langs``)
MIRACL_LANGUAGES: Mapping[str, str] = {
    "ar": "ara-Arab", "bn": "ben-Beng", "de": "deu-Latn", "en": "eng-Latn", "es": "spa-Latn", "fa": "fas-Arab",
    "fi": "fin-Latn", "fr": "fra-Latn", "hi": "hin-Deva", "id": "ind-Latn", "ja": "jpn-Jpan", "ko": "kor-Kore",
    "ru": "rus-Cyrl", "sw": "swa-Latn", "te": "tel-Telu", "th": "tha-Thai", "yo": "yor-Latn", "zh": "zho-Hans",
}  # fmt: skip
#: dataset -> (task name, the hub dataset MTEB's task reads, the revision MTEB pins; mteb 2.26,
#: tasks/retrieval/multilingual/miracl_retrieval.py). MIRACL's MTEB copy is not where this project downloads
#: MIRACL from (miracl/miracl-corpus, miracl/miracl): its rows are filed with the revisions they came from
TASKS: Mapping[str, tuple[str, str | None, str | None]] = {
    "miracl": ("MIRACLRetrieval", "mteb/MIRACLRetrieval", "9c09abc13478308c27598f350e31d8f06b9b5481"),
    # the same data as MTEB's MIRACLRetrievalHardNegatives.v2, which differs only in its prompt
    "miracl-hn": ("MIRACLRetrievalHardNegatives", "mteb/MIRACLRetrievalHardNegatives", MIRACL_HN_REVISION),
    "messirve": ("MiraclEvalMessIRveRetrieval", None, None),  # not an MTEB task: a name of its own
}
#: the datasets whose task is MTEB's (their results can be submitted)
MTEB_DATASETS = frozenset({"miracl", "miracl-hn"})
#: the API version MTEB records as the revision of OpenAI's models (mteb 2.26, openai_models.py)
OPENAI_REVISIONS: Mapping[str, str] = {"text-embedding-3-large": "3", "text-embedding-3-small": "3"}
SUBMITTABLE, NOT_SUBMITTABLE = "results", "not_submittable"
EXPERIMENTS = "experiments"
_SHA1 = re.compile(r"^[0-9a-f]{40}$")
#: characters mteb replaces with ``_`` in an experiment's name
_INVALID = set('<>:"|?*\\/\0')
#: an experiment name longer than this is mteb's hash of it
_MAX_NAME = 200


def _languages(dataset: str, partition: str) -> list[str]:
    return [MIRACL_LANGUAGES[partition]] if dataset in MTEB_DATASETS else ["spa-Latn"]


def task_result(
    dataset: str, split: str, subsets: Mapping[str, Mapping[str, float]], seconds: float, revision: str
) -> dict:
    """The JSON of an MTEB ``TaskResult`` for ``subsets`` (partition -> MTEB's retrieval scores) of data at
    ``revision`` (:func:`miracl_eval.evaluation.mteb_origin.data_revision`), saying what produced it."""
    task = TASKS[dataset][0]
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
        "produced_by": produced_by(),
    }


def _name_value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return f"[{','.join(_name_value(v) for v in value)}]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{_name_value(v)}" for k, v in sorted(value.items())) + "}"
    text = str(value)
    for char in _INVALID:
        text = text.replace(char, "_")
    return text


def experiment_name(kwargs: Mapping[str, Any]) -> str:
    """An experiment's folder name as mteb derives it from its keyword arguments: ``key_value`` pairs, sorted,
    joined with ``__``, the characters a folder name cannot hold replaced with ``_`` (lists as ``[a,b]``,
    mappings as ``{k:v}``); a name over 200 characters is ``exp_`` and 16 hex digits of its sha256."""
    name = "__".join(f"{k}_{_name_value(v)}" for k, v in sorted(kwargs.items()))
    if len(name) > _MAX_NAME or any(c in _INVALID for c in name):
        return f"exp_{hashlib.sha256(name.encode()).hexdigest()[:16]}"
    return name


@dataclass(frozen=True)
class Placement:
    """Where a row's result goes."""

    name: str  #: the model's name (``org/name`` when submittable)
    revision: str
    experiment: Mapping[str, Any] | None = None  #: the experiment's keyword arguments; None: the model itself
    why_not: str | None = None  #: why the row cannot be submitted; None: it can
    #: the preset whose settings are the model's reference (None: none names the checkpoint, or not compared)
    preset: str | None = None

    def folder(self, root: Path) -> Path:
        base = root / (SUBMITTABLE if self.why_not is None else NOT_SUBMITTABLE)
        out = base / self.name.replace(" ", "_").replace("/", "__") / self.revision
        return out / EXPERIMENTS / experiment_name(self.experiment) if self.experiment else out


def _hub_model(checkpoint: str, revision: str | None, what: str) -> str | None:
    """Why a checkpoint cannot be submitted under its name, None if it can (a local folder is not named)."""
    if checkpoint.count("/") != 1 or checkpoint.startswith((".", "/", "~")) or os.path.isabs(checkpoint):
        return f"{what} is a local checkpoint, not a model on the hub (org/name)"
    if revision is None or not _SHA1.match(revision):
        return f"the commit {what} {checkpoint} was fetched at is not known (fetch it with the fetch_model rule)"
    return None


def mteb_rows(
    config: Mapping[str, Any], model_folders: Mapping[str, str], reranker_folders: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """What the ``mteb_results`` job is told of each row of the validated ``config`` (:func:`placement` reads it):
    its kind, checkpoint, method (and whether it is its model's main one), settings, and the folder its jobs
    load the checkpoint from (``model_folders``, ``reranker_folders``: a hub model's fetch record there gives its
    revision)."""
    rows: dict[str, dict[str, Any]] = {}
    for s in systems(config):
        if s.model is not None:
            spec = config["models"][s.model]
            family = FAMILIES[spec["family"]]
            rows[s.label] = {
                "kind": "model",
                "checkpoint": spec["checkpoint"],
                "method": s.method,
                "main": s.method == family.methods[0],
                "api": family.remote,
                "settings": spec,
                "folder": model_folders[s.model],
            }
        elif s.hybrid is not None:
            rows[s.label] = {"kind": "hybrid", "method": "hybrid", "settings": config["hybrids"][s.hybrid]}
        elif s.reranker is not None:
            spec = config["rerankers"][s.reranker]
            rows[s.label] = {
                "kind": "reranked",
                "checkpoint": spec["checkpoint"],
                "method": s.method,
                "first_stage": s.first_stage.label if s.first_stage else None,
                "settings": spec,
                "folder": reranker_folders[s.reranker],
            }
        else:
            rows[s.label] = {"kind": "bm25", "method": "bm25", "settings": config["bm25"]}
    return rows


def placement(
    label: str,
    row: Mapping[str, Any],
    revision: str | None,
    dataset: str,
    *,
    registry: Registry,
    data: DataRevision,
    defaults: Mapping[str, Any],
    reference: Mapping[str, Any],
) -> Placement:
    """Where row ``label`` (what :func:`mteb_stage` is given of it) goes, and whether it can be submitted: a hub
    model (or OpenAI's) that mteb's ``registry`` holds, with a preset giving its reference settings, on data at
    the revision MTEB's task reads (``data``). Its other methods, a view's search, a reranker's first stage and
    every setting that differs from the reference name its experiment (``defaults`` and ``reference``: what a
    left-out title join and task instruction mean in this run and in the reference:
    :func:`~miracl_eval.evaluation.mteb_origin.reference_differences`)."""
    kind = row.get("kind")
    settings = row.get("settings") or {}
    if dataset not in MTEB_DATASETS:
        return Placement(label, revision or NO_REVISION, None, f"{TASKS[dataset][0]} is not an MTEB task")
    if kind == "bm25":
        return Placement(label, NO_REVISION, None, "BM25 through Lucene is not a model on the hub")
    if kind == "hybrid":
        return Placement(label, NO_REVISION, None, "a hybrid of several rows is not one model")
    checkpoint = str(row.get("checkpoint", ""))
    experiment: dict[str, Any]
    if kind == "reranked":
        why = _hub_model(checkpoint, revision, "the reranker")
        if why is not None:
            return Placement(label, revision or NO_REVISION, None, why)
        name, at = checkpoint, str(revision)
        experiment = {"first_stage": row.get("first_stage")}
    else:
        # a method other than the model's main one, a view's dimensions, storage and rescoring: an experiment
        experiment = {} if row.get("main") else {"method": row.get("method")}
        experiment.update(
            {k: settings[k] for k, plain in SEARCHED_AS_ENCODED.items() if settings.get(k, plain) != plain}
        )
        if row.get("api"):
            if settings.get("base_url") != OPENAI_URL or checkpoint not in OPENAI_REVISIONS:
                why = "a model behind an API other than OpenAI's is not one MTEB knows"
                return Placement(label, NO_REVISION, None, why)
            name, at = f"openai/{checkpoint}", OPENAI_REVISIONS[checkpoint]
        else:
            why = _hub_model(checkpoint, revision, "the model")
            if why is not None:
                return Placement(label, revision or NO_REVISION, None, why)
            name, at = checkpoint, str(revision)
    reasons = []
    preset, differs = reference_differences(row, defaults, reference)
    if differs is None:
        reasons.append(
            f"no shipped preset gives the reference settings of {checkpoint} (its own harness's), so whether this "
            "row ran with them is not known"
        )
    else:
        experiment.update(differs)
    reasons += [why for why in (registry.why_not(name), data.why_not) if why is not None]
    return Placement(name, at, experiment or None, "; ".join(reasons) or None, preset)


def _readme(dataset: str, task: str, split: str, partitions: int, data: DataRevision, notes: list[str]) -> str:
    """The export folder's README: what wrote it, what is submittable and what else a submission asks."""
    origin = produced_by()
    return (
        f"# MTEB results of this {dataset} run ({task}, split {split}, {partitions} partitions)\n\n"
        f"Written by miracl-eval {origin['version']}, whose own computation of mteb's retrieval evaluator gives "
        f"the scores: mteb ran nothing (`mteb_version` {MTEB_FORMAT} names the result format). The data: "
        f"{data.revision}.\n\n"
        f"`{SUBMITTABLE}/` is laid out as the results repository's `results/` (embeddings-benchmark/results) and "
        "holds the rows that meet what its checks test (folder structure, model_meta.json, run_settings.jsonl, a "
        "model that mteb implements), run with the model's reference settings (any other setting names an "
        "experiment) on the data at the revision MTEB's task reads. Its pull-request checklist asks more, which "
        "only the submitter can answer: a model sheet; results obtained with the reference implementation (these "
        "come from miracl-eval's, and their files say so); a public model; training on the evaluation data "
        f"disclosed (results/{dataset}_training.tsv says which rows are in-domain). This folder is an MTEB cache "
        f"(`mteb.ResultCache(<this folder>)`). `{NOT_SUBMITTABLE}/` holds the rows that cannot be submitted, each "
        "with the reason below.\n\n" + "\n".join(notes) + "\n"
    )


def mteb_stage(
    dataset: str,
    split: str,
    runs: Mapping[str, Mapping[str, PathLike]],
    qrels: Mapping[str, PathLike],
    comparability_tsv: PathLike,
    rows: Mapping[str, Mapping[str, Any]],
    output: PathLike,
    sources: Sequence[PathLike] | None = None,
    title_join: str | None = None,
) -> dict[str, int]:
    """Stage entry point: every row's MTEB result over the partitions with the full data (``runs``: row ->
    partition -> run Parquet), with ``model_meta.json`` and ``run_settings.jsonl``, in the folder ``output``
    (written whole, atomically; see the module's docstring for the layout). ``rows``: row -> what is known of
    it (``kind``, ``checkpoint``, ``method``, ``main``, ``api``, ``settings``, ``first_stage``, and ``folder``:
    the checkpoint's folder, whose fetch record gives the revision). ``sources``: the folders of the run's
    downloads, whose records give the data's revision (None: local files); ``title_join``: the run's corpus join
    (what a model's left-out one means)."""
    import time

    from miracl_eval.evaluation.comparability import comparable_partitions, read_comparability
    from miracl_eval.evaluation.metrics import iter_run_queries, load_qrels
    from miracl_eval.evaluation.mteb_origin import mteb_registry
    from miracl_eval.inputs.download import read_source

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
        task, repo, pinned = TASKS[dataset]
        data = data_revision(repo, pinned, None if sources is None else [read_source(f) for f in sources])
        registry = mteb_registry()
        of = get_dataset(dataset)
        reference = {"title_join": of.title_join, "query_instruction": of.query_instruction}
        defaults = {**reference, "title_join": title_join or of.title_join}
        placed: dict[Path, str] = {}
        notes = []
        origin = produced_by()
        for label, given in rows.items():
            started = time.perf_counter()
            subsets = {p: retrieval_scores(iter_run_queries(runs[label][p]), judged[p]) for p in full}
            revision = model_revision(given.get("folder"))
            where = placement(
                label, given, revision, dataset, registry=registry, data=data, defaults=defaults, reference=reference
            )
            folder = where.folder(root)
            if folder in placed:  # two rows of one model and settings (e.g. two names for one checkpoint)
                experiment = {**(where.experiment or {}), "row": label}
                where = Placement(where.name, where.revision, experiment, where.why_not, where.preset)
                folder = where.folder(root)
            placed[folder] = label
            folder.mkdir(parents=True)
            result = task_result(dataset, split, subsets, time.perf_counter() - started, data.revision)
            (folder / f"{task}.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
            meta: dict[str, Any] = {
                "name": where.name,
                "revision": where.revision,
                "experiment_kwargs": dict(where.experiment) if where.experiment else None,
                "produced_by": origin,
                "submittable": where.why_not is None,
                "why_not": where.why_not,
                "reference_preset": where.preset,
                "dataset": {"revision": data.revision, "sources": list(data.sources)},
            }
            if given.get("kind") in ("model", "reranked"):
                meta["mteb_registry"] = registry.facts(where.name)
            meta["miracl_eval"] = public_row(label, given)
            (folder / "model_meta.json").write_text(json.dumps(meta, indent=2, default=str) + "\n", encoding="utf-8")
            settings = {"task": task, "splits": [split], "subsets": sorted(full),
                        "version": {"mteb": MTEB_FORMAT, "miracl-eval": origin["version"]},
                        "encode_kwargs": {}, "produced_by": origin, "miracl_eval_row": label}  # fmt: skip
            (folder / "run_settings.jsonl").write_text(json.dumps(settings, default=str) + "\n", encoding="utf-8")
            rel = folder.relative_to(root)
            note = f" (not submittable: {where.why_not})" if where.why_not else ""
            pinned_model = meta.get("mteb_registry", {}).get("revision")
            if pinned_model and pinned_model != where.revision:  # filed under its own revision, but say it
                note += f" (mteb's implementation of {where.name} is of revision {pinned_model})"
            notes.append(f"- `{label}`: `{rel}`{note}")
        (root / "README.md").write_text(_readme(dataset, task, split, len(full), data, notes), encoding="utf-8")
    return {"rows": len(rows), "partitions": len(full)}


def model_revision(folder: str | os.PathLike[str] | None) -> str | None:
    """The 40-hex commit a hub model was fetched at (its ``miracl-eval-fetch.json``), when known."""
    from miracl_eval.encoders.checkpoints import fetched_commit

    return fetched_commit(folder)
