"""What the MTEB result files of a run say of their origin, and what the results repository asks of a submission
that the files can tell (:mod:`miracl_eval.evaluation.mteb_results` writes them).

* **What produced them** (:func:`produced_by`): this project and its version. mteb ran no model and computed no
  score: the scores are this project's computation of mteb's retrieval evaluator. ``mteb_version`` (which the
  results repository requires) names the mteb release whose result format the files follow, nothing more.
* **mteb's model registry** (:func:`mteb_registry`): the results repository accepts only models that mteb
  implements (its ``test_model_implementation``: ``mteb.get_model_metas()`` names the model); the installed mteb
  package knows, offline. Without mteb installed, it is not known, and the row is not submittable.
* **The model's reference settings** (:func:`reference_differences`): the shipped preset of the row's checkpoint
  (``data/presets.yaml``, ``data/reranker_presets.yaml``: each setting as the model's reference harness ran it).
  Every setting of the row that differs from it is named in the row's experiment, so that a row with another
  ``passage_max_length``, prefix, ``title_join`` or ``query_instruction`` is never filed as the model itself. A
  checkpoint without a preset has no known reference: not submittable.
* **The data's revision** (:func:`data_revision`): the commit the run's downloads came from (recorded with each
  download: :func:`miracl_eval.inputs.download.read_source`). MTEB keys a task's results by the revision of its
  own dataset repository; only data downloaded from that repository at the revision MTEB pins is submittable.
  Local files have no known revision.
* **Nothing private** (:func:`public_row`): what the files say of a row is a whitelist of public settings (hub
  ids, lengths, prefixes, pooling, ...); never an API's URL, the variable holding its key, a local checkpoint or
  tokenizer folder.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from miracl_eval.encoders.registry import FAMILIES, FROM_CHECKPOINT_KEY, OPENAI_URL, encoding_settings
from miracl_eval.fusion.weighted import CANDIDATE_LIST, FUSED_COMPONENTS

#: the mteb release whose result format these files follow (the tests load and validate them with it)
MTEB_FORMAT = "2.26.24"
#: a hub id as the results repository files it: ``org/name``
_HUB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")

#: the settings of a model row the files may state (every family's, but an API's URL and key variable, its
#: request sizes, retries and prices, and the checkpoint and tokenizer, said apart when public)
PUBLIC_MODEL_SETTINGS = frozenset({
    "family", "query_max_length", "passage_max_length", "trained_on", "title_join", "weights", "rerank_depth",
    "quantization", "pooling", "normalize", "query_prefix", "passage_prefix", "query_template", "query_instruction",
    "view_of", "dimensions", "storage", "calibration_passages", "rescore", FROM_CHECKPOINT_KEY,
})  # fmt: skip
#: model settings never stated: where and how an API is reached and paced, what a run costs, local folders (and the
#: revision asked for: the files state the commit it was fetched at)
PRIVATE_MODEL_SETTINGS = frozenset({
    "checkpoint", "revision", "tokenizer", "base_url", "api_key_env", "allow_insecure", "inputs_per_request",
    "tokens_per_request", "concurrency", "max_retries", "timeout", "price_per_million_tokens", "max_usd",
    "api_jobs", "requests_per_minute", "tokens_per_minute", "patience",
})  # fmt: skip
PUBLIC_RERANKER_SETTINGS = frozenset({
    "family", "max_length", "query_max_length", "depth", "title_join", "trained_on", "sigmoid", "prompt",
    "query_instruction", "passage_instruction",
})  # fmt: skip
PUBLIC_HYBRID_SETTINGS = frozenset({"systems", "method", "alpha", "rrf_k", "depth", "k"})
PUBLIC_BM25_SETTINGS = frozenset({"k1", "b", "thai"})
#: settings of a reranker that change no score and no ranking of its row
_RERANKER_UNCOMPARED = frozenset({"family", "checkpoint", "batch_size", "trained_on"})


def produced_by() -> dict[str, str]:
    """What produced the files: this project at its version; mteb computed nothing."""
    import miracl_eval  # the package's own version (the running code's, installed or not)

    return {
        "software": "miracl-eval",
        "version": miracl_eval.__version__,
        "scores": "computed by miracl-eval as mteb's retrieval evaluator computes them; mteb ran no model and no score",
        "mteb_version": f"the mteb release whose result format these files follow ({MTEB_FORMAT}), not one that ran",
    }


# ------------------------------------------------------------------------------------------ mteb's registry


@dataclass(frozen=True)
class Registry:
    """mteb's model registry as the installed package holds it (offline)."""

    #: the installed mteb's version; None when mteb is not installed (nothing is known)
    mteb: str | None
    #: model name -> the revision mteb's implementation pins
    models: Mapping[str, str | None] = field(default_factory=dict)

    def why_not(self, name: str) -> str | None:
        """Why the results repository would refuse model ``name`` for want of an implementation in mteb."""
        if self.mteb is None:
            return (
                f"whether mteb's model registry has {name} is not known: mteb is not installed here (the results "
                "repository takes only models that mteb implements; `pip install mteb` to check)"
            )
        if name not in self.models:
            return (
                f"{name} is not in mteb {self.mteb}'s model registry (the results repository takes only models "
                "that mteb implements)"
            )
        return None

    def facts(self, name: str) -> dict[str, Any]:
        """What the files say of the model in the registry."""
        return {
            "mteb": self.mteb,
            "has_model": None if self.mteb is None else name in self.models,
            "revision": self.models.get(name),
        }


def mteb_registry() -> Registry:
    """The installed mteb's model registry (``mteb.get_model_metas()``, offline); empty when mteb is absent."""
    try:
        import mteb
    except ImportError:
        return Registry(None)
    return Registry(str(mteb.__version__), {m.name: m.revision for m in mteb.get_model_metas() if m.name})


# ------------------------------------------------------------------------------------------ reference settings


def reference_spec(checkpoint: str, reranker: bool = False) -> tuple[str, dict[str, Any]] | None:
    """The shipped preset whose checkpoint is ``checkpoint`` (an API's model name for an API's model), and its
    resolved spec: the model's reference settings. None when no preset names it."""
    from miracl_eval.config.models import presets, resolve_model
    from miracl_eval.config.rerankers import reranker_presets, resolve_reranker

    shipped = reranker_presets() if reranker else presets()
    for name, preset in shipped.items():
        given = preset.settings
        if preset.refused or (given.get("checkpoint") or given.get("model")) != checkpoint:
            continue
        return name, resolve_reranker(name, None) if reranker else resolve_model(name, None)
    return None


def _method_settings(method: str) -> set[str]:
    """The retrieval settings of a model that change the ranking of its row ``method``."""
    keys = set()
    if method in FUSED_COMPONENTS:
        keys.add("weights")
    if CANDIDATE_LIST.get(method) == "rerank":
        keys.add("rerank_depth")
    if method == "sparse":
        keys.add("quantization")
    return keys


def _effective(key: str, value: Any, spec: Mapping[str, Any], defaults: Mapping[str, Any]) -> Any:
    """A setting as the encoder applies it: a left-out title join is the corpus's, a left-out task instruction
    the dataset's, and an instruction without ``{task}`` in the query template is not used."""
    if key == "title_join" and value is None:
        return defaults.get("title_join")
    if key == "query_instruction":
        if "{task}" not in str(spec.get("query_template") or ""):
            return None
        return value if value is not None else defaults.get("query_instruction")
    return value


def reference_differences(
    row: Mapping[str, Any], ours: Mapping[str, Any], reference: Mapping[str, Any]
) -> tuple[str | None, dict[str, Any] | None]:
    """``(preset, differences)``: the preset holding the reference settings of the row's checkpoint, and every
    setting of the row whose value differs from it (the row's value; ``{}`` when none does). ``(None, None)``
    when no preset names the checkpoint. ``ours`` and ``reference``: what a left-out ``title_join`` and
    ``query_instruction`` mean in this run (its corpus's join) and in the reference (the dataset's join; both
    the dataset's instruction). A view's dimensions, storage and rescoring are not compared here (they name its
    experiment already)."""
    reranker = row.get("kind") == "reranked"
    found = reference_spec(str(row.get("checkpoint", "")), reranker=reranker)
    if found is None:
        return None, None
    name, preset = found
    spec = row.get("settings") or {}
    if reranker:
        keys = set(preset) | set(spec)
        keys -= _RERANKER_UNCOMPARED
    else:
        keys = (set(encoding_settings(spec)) | set(encoding_settings(preset))) - {"family", "checkpoint", "base_url"}
        keys |= _method_settings(str(row.get("method")))
    differs = {}
    for key in sorted(keys):
        value = _effective(key, spec.get(key), spec, ours)
        if value != _effective(key, preset.get(key), preset, reference):
            differs[key] = _experiment_value(value)
    return name, differs


def _experiment_value(value: Any) -> Any:
    """A setting's value as an experiment's keyword argument: a string's control characters escaped (a folder
    name holds no line break), other values as they are."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)[1:-1]
    return value


# ------------------------------------------------------------------------------------------ the data's revision


@dataclass(frozen=True)
class DataRevision:
    """The revision of a run's data as a task file states it, and why it cannot be submitted (None: it can)."""

    revision: str
    why_not: str | None
    #: what the downloads recorded (repository, commit), for model_meta.json
    sources: tuple[str, ...] = ()


def data_revision(
    repo: str | None, pinned: str | None, records: Sequence[Mapping[str, Any] | None] | None
) -> DataRevision:
    """The revision of the data a run used, from its downloads' records (:func:`miracl_eval.inputs.download.
    read_source`; ``records`` None: local files). ``repo`` and ``pinned``: the hub repository and revision of the
    MTEB task's dataset (None: not an MTEB task)."""
    if records is None:
        return DataRevision(
            "unknown: local files",
            "the data came from local files (source.corpus, source.topics, source.qrels), whose revision is not known",
        )
    if not records or any(r is None for r in records):
        return DataRevision(
            "unknown: a download without its record",
            "a download of this run records no revision (made before miracl-eval recorded it: download the data "
            "again to know it)",
        )
    sources = []
    for record in records:
        assert record is not None
        if "ir_datasets" in record:
            sources.append(f"ir_datasets:{record['ir_datasets']}")
        else:
            sources.append(f"{record.get('repo')}@{record.get('commit') or 'several commits'}")
    unique = tuple(dict.fromkeys(sources))
    if len(unique) == 1 and repo is not None and unique[0].startswith(f"{repo}@"):
        commit = unique[0].split("@", 1)[1]
        if not _COMMIT.match(commit):
            return DataRevision(unique[0], f"the files of {repo} came from several commits", unique)
        if commit != pinned:
            return DataRevision(commit, f"the data is {repo} at {commit}; MTEB's task reads it at {pinned}", unique)
        return DataRevision(commit, None, unique)
    other: str | None = (
        f"the data came from {', '.join(unique)}, not from MTEB's {repo} at {pinned}: MTEB files a task's results "
        "by its own dataset's revision"
        if repo is not None
        else None
    )
    return DataRevision(", ".join(unique), other, unique)


# ------------------------------------------------------------------------------------------ what may be stated


def public_checkpoint(checkpoint: str, api: bool, base_url: str | None) -> str:
    """A checkpoint as the files may state it: a hub id (``org/name``), or an API's model name at OpenAI's API;
    otherwise only what it is."""
    if api:
        return checkpoint if base_url == OPENAI_URL else "a model behind another API"
    return checkpoint if _HUB_NAME.match(checkpoint) else "a local checkpoint"


def public_row(label: str, row: Mapping[str, Any]) -> dict[str, Any]:
    """What model_meta.json says of a row: its label, kind, method and whitelisted settings (no URL, key
    variable, local folder or price)."""
    kind = row.get("kind")
    settings = row.get("settings") or {}
    allowed = {
        "model": PUBLIC_MODEL_SETTINGS,
        "reranked": PUBLIC_RERANKER_SETTINGS,
        "hybrid": PUBLIC_HYBRID_SETTINGS,
        "bm25": PUBLIC_BM25_SETTINGS,
    }.get(str(kind), frozenset())
    public = {k: v for k, v in settings.items() if k in allowed}
    tokenizer = settings.get("tokenizer")
    if kind == "model" and isinstance(tokenizer, str):
        public["tokenizer"] = tokenizer if tokenizer.startswith("tiktoken:") or _HUB_NAME.match(tokenizer) else "local"
    out: dict[str, Any] = {"row": label, "kind": kind, "method": row.get("method")}
    if "checkpoint" in row:
        out["checkpoint"] = public_checkpoint(str(row["checkpoint"]), bool(row.get("api")), settings.get("base_url"))
    for key in ("main", "api", "first_stage"):
        if key in row:
            out[key] = row[key]
    out["settings"] = public
    return out


def every_model_setting() -> set[str]:
    """Every setting of every model family (what :data:`PUBLIC_MODEL_SETTINGS` and :data:`PRIVATE_MODEL_SETTINGS`
    must classify between them)."""
    return {key for family in FAMILIES.values() for key in family.properties()} | {"family", FROM_CHECKPOINT_KEY}
