# Models and rerankers: where a job loads each one from (its local or built folder, or the fetch_model
# rule's copy of a hub checkpoint at its revision), the hub checkpoints to fetch, the models behind an
# HTTP API, and the settings that a model's or reranker's jobs take as params.

import os

from miracl_eval.config.models import BUILT_CHECKPOINTS, hub_checkpoints, hub_folder
from miracl_eval.encoders.api_ledger import job_name
from miracl_eval.encoders.checkpoints import stale_fetch
from miracl_eval.encoders.registry import FAMILIES, encoding_settings, searched_view
from miracl_eval.rerankers.registry import scoring_settings
from miracl_eval.rerankers.stage import scored_depth
from snakemake.logging import logger


def encoded_model(model):
    """The model whose encodings ``model`` searches: itself, or the model a view is of (``view_of``)."""
    return MODELS[model].get("view_of") or model


def _loaded_from(spec):
    """Where jobs load a checkpoint from: its folder, or the fetch_model rule's copy of a hub model at
    its revision (a folder per revision)."""
    folder = hub_folder(spec)
    return spec["checkpoint"] if folder is None else path("hub_model", hub_model=folder)


def checkpoint_folder(model):
    """Where a model's jobs load it from (an API's model: its name at the API)."""
    spec = MODELS[model]
    if FAMILIES[spec["family"]].remote:
        return spec["checkpoint"]
    return _loaded_from(spec)


def reranker_folder(reranker):
    """Where a reranker's jobs load it from."""
    return _loaded_from(RERANKERS[reranker])


#: the hub checkpoints (repository, revision) that the used models and rerankers name, by the folder
#: they are fetched into
HUB_MODELS = hub_checkpoints(MODELS, RERANKERS)
#: the fetched folders of the hub models and rerankers, by the settings page's section and key
FETCHED = {
    **{
        f"models.{m}.commit": checkpoint_folder(m)
        for m in MODELS
        if checkpoint_folder(m) != MODELS[m]["checkpoint"]
    },
    **{
        f"rerankers.{r}.commit": reranker_folder(r)
        for r in RERANKERS
        if reranker_folder(r) != RERANKERS[r]["checkpoint"]
    },
}
if workflow.is_main_process:
    for _folder in dict.fromkeys(FETCHED.values()):
        _stale = stale_fetch(_folder)
        if _stale:
            logger.warning(_stale)
#: the models behind an HTTP API (their jobs run on CPUs after a cost plan)
API_MODELS = [m for m, s in MODELS.items() if FAMILIES[s["family"]].remote]
#: the API models whose encodings their own jobs request (not views of another's)
API_ENCODED = [m for m in API_MODELS if not MODELS[m].get("view_of")]


def _folder_input(folder):
    """A checkpoint folder as an input when it is local or fetched (so a rebuilt model re-runs its jobs)."""
    if folder.startswith(BUILT_CHECKPOINTS) or os.path.isdir(folder):
        return folder
    return []


def model_input(wildcards):
    return _folder_input(checkpoint_folder(wildcards.model))


def reranker_input(wildcards):
    return _folder_input(reranker_folder(wildcards.reranker))


def reranker_spec(wildcards):
    """What a reranker's scores depend on (its params): its settings but the depth, batch size and
    training, with the folder its jobs load."""
    spec = {
        **RERANKERS[wildcards.reranker],
        "checkpoint": reranker_folder(wildcards.reranker),
    }
    return scoring_settings(spec)


def reranker_scored_depth(wildcards, input, output):
    """The depth a chunk's scores are computed at: the configured depth, or the greater depth of its
    stored scores when they are newer than the job's inputs and of the same settings
    (miracl_eval.rerankers.stage.scored_depth): a lower depth runs no model.
    """
    depth = RERANKERS[wildcards.reranker]["depth"]
    return scored_depth(output[0], reranker_spec(wildcards), depth, list(input))


def encoder_spec(role=None):
    """What a model's encoding of one role's texts (None: both) depends on (its params); the
    checkpoint is the folder the job loads (checkpoint_folder)."""
    return lambda wc: encoding_settings(
        {**MODELS[wc.model], "checkpoint": checkpoint_folder(wc.model)}, role
    )


def model_setting(key):
    return lambda wc: MODELS[wc.model][key]


def search_view(wildcards):
    """How a model's vectors are searched (miracl_eval.faiss.storage.View): a job's params."""
    return searched_view(MODELS[wildcards.model])


def api_plan_input(wildcards):
    """An API model's cost plan, which its encoding jobs wait on (its being there, not its age: a new
    price or budget plans again and re-runs no encoding)."""
    return {
        "plan": ancient(
            path("api_plan", dataset=wildcards.dataset, model=wildcards.model)
        )
    }


def api_run(wildcards):
    """What an API encoding job records and checks (its params): the model, the job's name in the ledger,
    the ledger folder and the cost plan (max_usd is checked against both before each request).
    """
    w = dict(wildcards.items())
    return {
        "model": w["model"],
        "job": job_name(w),
        "ledger": path("api_ledger", dataset=w["dataset"], model=w["model"]),
        "plan": path("api_plan", dataset=w["dataset"], model=w["model"]),
    }


def no_input(wildcards):
    return {}
