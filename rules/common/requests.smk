# Each job's resource requests: its threads, GPU, memory, time and disk, from the sizes the workflow
# knows before the job runs (`resources: **request("bm25_index")`). What a request depends on is
# decided by miracl_eval.jobs.requests (job_for, estimate); here the workflow only reads those sizes.

import errno
import os

from miracl_eval.encoders.api_pace import slot_resources
from miracl_eval.encoders.blocks import encoded_dim, planned_dim
from miracl_eval.evaluation.comparability import reference_passages
from miracl_eval.fusion.candidates import candidates_per_job
from miracl_eval.jobs import requests
from miracl_eval.jobs.devices import gpu_faiss_installed

#: what the resource requests read of the config (miracl_eval.jobs.requests)
REQUEST_SETTINGS = requests.Settings.from_config(config)
# GPU rules ask for a GPU unless the config pins the encoders to the CPU.
GPU = int(REQUEST_SETTINGS.gpu)
# The approximate indexes use a GPU only through GPU Faiss: their jobs ask for one only when it is installed.
GPU_FAISS = int(GPU and DENSE_INDEX["gpu"] and gpu_faiss_installed())
# An encoding job on a GPU wants its tokenizer workers' CPUs, plus the model's thread and the
# writer's; on the CPU, the configured threads (Snakemake sets the job's OMP_NUM_THREADS to them,
# which torch follows), so that on a small machine two short encoding jobs share the cores rather
# than queue for all of them.
ENCODE_THREADS = requests.encode_threads(
    ENC["tokenizer_workers"], GPU, config["threads"]
)

#: per API model, the Snakemake resource that holds its encoding jobs to `api_jobs` at once (each job keeps
#: to 1/api_jobs of the model's tokens_per_minute and requests_per_minute: miracl_eval.encoders.api_pace)
API_RESOURCES = slot_resources(API_ENCODED)
for _model, _name in API_RESOURCES.items():
    workflow.register_resource(_name, MODELS[_model]["api_jobs"])


def api_slots():
    """An API encoding job's resources: one of its model's `api_jobs` slots (none of another model's)."""
    return {
        name: (lambda wc, model=model: int(wc.model == model))
        for model, name in API_RESOURCES.items()
    }


def _checkpoint_mb(wildcards):
    reranks = "reranker" in wildcards.keys()
    # a local checkpoint is an input: <TBD> until it exists
    folder = reranker_input(wildcards) if reranks else model_input(wildcards)
    if folder and not os.path.isdir(folder):
        raise FileNotFoundError(
            errno.ENOENT, "the checkpoint does not exist yet", folder
        )
    given = (RERANKERS[wildcards.reranker] if reranks else MODELS[wildcards.model])[
        "checkpoint"
    ]
    return requests.checkpoint_mb(folder or given)


#: the dataset's corpora's passages as published: what a corpus download will hold (its disk)
REFERENCE_PASSAGES = reference_passages(DATASET.name)


def job_sizes(name, wildcards, input, threads, kinds=()):
    """The sizes of one job of estimate ``name`` (:func:`miracl_eval.jobs.requests.job_for`)."""
    w = dict(wildcards.items())
    sizes = {}
    if name == "download" and "corpus" in w:
        sizes["passages"] = REFERENCE_PASSAGES.get(w["corpus"], 0)
    if (
        name == "download" and "hub_model" in w
    ):  # what a model's download takes: its checkpoint
        sizes["input_mb"] = requests.checkpoint_mb(HUB_MODELS[w["hub_model"]][0])
    if name in ("preprocess_corpus", "preprocess_topics"):
        sizes["input_mb"] = sum(requests.path_mb(f) for f in input)
    elif name not in ("download", "small"):
        corpus = w.get("corpus") or (
            DATASET.corpus_of(w["part"]) if "part" in w else None
        )
        if corpus is not None:
            sizes["passages"] = requests.checkpoint_rows(
                expand(PATHS["corpus"], dataset=w["dataset"], corpus=corpus)[0], input
            )
        parts = requests.queried_partitions(name, w, PARTS, corpus_parts(corpus))
        if parts:
            sizes["queries"] = sum(
                requests.checkpoint_rows(
                    expand(PATHS["queries"], dataset=DATASET.name, part=p)[0], input
                )
                for p in parts
            )
    # the vectors' dimension: their files', else (a dry run) what the model will write, its checkpoint read
    # where its jobs load it (a hub model's fetched folder); a view's model's when the run has it
    planned = requests.DEFAULT_DIM
    if w.get("model") in MODELS:
        known = encoded_model(w["model"])
        known = known if known in MODELS else w["model"]
        planned = planned_dim(
            {**MODELS[known], "checkpoint": checkpoint_folder(known)}, planned
        )
    sizes["dim"] = planned  # an encoding job writes them; a dense job reads them
    if name in ("dense_index", "int8_ranges"):
        sizes["dim"] = encoded_dim(input[0], planned)
    if name == "dense_search":
        sizes["dim"] = encoded_dim(input.queries, planned)
    if name == "dense_block_search":
        sizes["dim"] = encoded_dim(input.blocks[0], planned)
        view = search_view(wildcards)
        sizes["storage"] = view["storage"]
        sizes["view_dim"] = view["dimensions"] or 0
        sizes["rescore"] = MODELS[wildcards.model].get("rescore", 0)
    if name == "dense_merge":
        sizes["candidates"] = len(input) * config["hits"]
    if name in requests.MODEL_ESTIMATES:
        sizes["checkpoint_mb"] = _checkpoint_mb(wildcards)
    if name in requests.API_ESTIMATES:  # its share of the provider's limits
        queries = name == "encode_api_queries"
        sizes["pace"] = requests.api_pace(
            MODELS[w["model"]],
            "query" if queries else "passage",
            input.get("plan"),
            f"queries {w['part']}" if queries else f"corpus {w['corpus']}",
        )
    return requests.job_for(
        name,
        w,
        threads,
        REQUEST_SETTINGS,
        kinds=tuple(kinds),
        **{"candidates": candidates_per_job(name, w, config), **sizes},
    )


def request(name, kinds=(), writes=None):
    """A rule's ``mem_mb`` and ``runtime`` (minutes) from estimate ``name`` of miracl_eval.jobs.requests,
    evaluated per job (``resources: **request("bm25_index")``), and the disk its outputs take
    (``disk_mb``: ``writes`` names their estimate when it is not ``name``'s; ``kinds``: what an encoding
    job stores)."""

    def value(key):
        return lambda wildcards, input, threads: getattr(
            requests.estimate(
                name, job_sizes(name, wildcards, input, threads), REQUEST_SETTINGS
            ),
            key,
        )

    def disk(wildcards, input, threads):
        job = job_sizes(writes or name, wildcards, input, threads, kinds)
        return requests.output_mb(writes or name, job, REQUEST_SETTINGS)

    return {"mem_mb": value("mem_mb"), "runtime": value("runtime"), "disk_mb": disk}
