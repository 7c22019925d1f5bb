# Shared names and input functions. Every path pattern of the workflow is spelled here, once (PATHS).

import errno
import re

from miracl_eval.jobs import requests
from miracl_eval.jobs.devices import gpu_faiss_installed
from miracl_eval.config.validate import fill_placeholders
from miracl_eval.inputs.datasets import MIRACL_LANGUAGES, get_dataset
from miracl_eval.encoders.registry import FAMILIES, encoding_settings
from miracl_eval.encoders.checkpoints import hub_folder_name, is_hub_id
from miracl_eval.fusion.weighted import (
    CANDIDATE_LIST,
    FUSED_COMPONENTS,
    candidates_per_query,
    fused_depth,
)
from miracl_eval.evaluation.metrics import MEASURES
from miracl_eval.config.models import BUILT_CHECKPOINTS, HUB_MODELS_DIR
from miracl_eval.encoders.outputs import vector_dim
from miracl_eval.encoders.blocks import manifest_dim
from miracl_eval.errors import InputError
from miracl_eval.schemas import count_rows, num_chunks
from miracl_eval.shards import (
    BLOCK_PATTERN,
    block_shards,
    covering_blocks,
    shard_name,
    shards_per_block,
    tiling,
)
from miracl_eval.config.systems import computed_systems, systems, training
from miracl_eval.rerankers.registry import scoring_settings
from miracl_eval.rerankers.stage import scored_depth
from miracl_eval.report.plan import report_pages
from miracl_eval.lucene.release import engine_facts, pyserini_release
from snakemake.settings.types import DeploymentMethod

DATASET = get_dataset(config["dataset"])
# a param of the corpus preprocessing only where passages are stripped (MTEB's datasets), so that the
# recorded params of every other dataset's preprocessed corpus stay as they were (no rerun)
STRIP_PASSAGES = {"strip": True} if DATASET.strip_passages else {}
# what the rows are matched on beside the configuration when compared with published numbers: the
# pyserini release the Lucene jobs run (its 2CR references change between releases)
ENGINE_FACTS = engine_facts(
    pyserini_release(
        workflow.basedir,
        DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method,
    )
)
PARTS = list(config["languages"])
CORPORA = DATASET.corpora(PARTS)
MEASURE_KEYS = [m.key for m in MEASURES]
SOURCE = config.get("source")
ENC = config["encoder"]
# the release of the topics and qrels asked for: MIRACL's is fixed, MessIRve's a setting
VERSION_SETTING = DATASET.version or config["hub"]["messirve_version"]
DENSE_INDEX = config["dense_index"]
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

#: the table rows (bm25, {model}/{method}, hybrids), in the config's order; labels are also paths
SYSTEMS = systems(config)
# per row: zero-shot, in-domain (its model trained on this dataset's training split) or unknown
ROW_TRAINING = training(config)
METHODS = [s.label for s in SYSTEMS]
#: every system whose run the rows need: the rows and the first stages of reranked rows
COMPUTED = computed_systems(config)
#: the resolved specs of the models that some computed system uses (a configured model no row uses gets no jobs)
MODELS = {
    name: spec
    for name, spec in config["models"].items()
    if any(s.model == name for s in COMPUTED)
}
HYBRIDS = {s.hybrid: config["hybrids"][s.hybrid] for s in COMPUTED if s.hybrid}
#: the resolved specs of the rerankers that some row uses
RERANKERS = {
    s.reranker: config["rerankers"][s.reranker] for s in COMPUTED if s.reranker
}
#: the labels whose top hits some reranker reranks (rows of the table or not)
FIRST_STAGES = list(
    dict.fromkeys(s.first_stage.label for s in COMPUTED if s.first_stage)
)
FUSED = list(FUSED_COMPONENTS)

PATHS = {
    "corpus": "resources/{dataset}/corpus/{corpus}/corpus.parquet",
    "queries": "resources/{dataset}/topics/{part}/queries.parquet",
    "qrels": "resources/{dataset}/topics/{part}/qrels.parquet",
    "bm25_index": "resources/{dataset}/indexes/{corpus}/bm25",
    "shard": "resources/{dataset}/encoded/{model}/corpus/{corpus}/{kind}/{shard}.parquet",
    # a block's manifest: written when every shard of the block is encoded (rules/encode.smk)
    "encoded_block": "resources/{dataset}/encoded/{model}/corpus/{corpus}/blocks/{block}.json",
    "encoded_queries": "resources/{dataset}/encoded/{model}/queries/{part}/{kind}.parquet",
    # an API model's cost plan: every encoding job of the model waits on it (rules/encode.smk)
    "api_plan": "resources/{dataset}/encoded/{model}/cost_plan.json",
    "dense_index": "resources/{dataset}/indexes/{corpus}/{model}/dense.faiss",
    # an exact search block's candidates for every partition of its corpus (rules/dense.smk)
    "dense_block": "resources/{dataset}/search/{model}/{corpus}/dense/{block}.parquet",
    # int8 storage: the corpus's per-dimension ranges, from a sample of its passages (rules/dense.smk)
    "int8_ranges": "resources/{dataset}/search/{model}/{corpus}/dense/int8_ranges.parquet",
    "dense_docids": "resources/{dataset}/indexes/{corpus}/{model}/dense.docids.parquet",
    "sparse_index": "resources/{dataset}/indexes/{corpus}/{model}/sparse",
    "scores": "resources/{dataset}/scores/{model}/{part}/{kind}/{chunk}.parquet",
    # a reranker's scores of a query chunk's top hits of the first stage {first} (a row's label)
    "reranker_scores": "resources/{dataset}/rerankers/{reranker}/{part}/{first}/{chunk}.parquet",
    "run": "runs/{dataset}/{part}/{system}.parquet",
    "trec": "runs/{dataset}/{part}/{system}.trec",
    "components": "runs/{dataset}/{part}/{system}.components.parquet",
    "per_query": "results/{dataset}/{part}/{system}.per_query.parquet",
    "judged_not_in_corpus": "results/{dataset}/{part}/judged_not_in_corpus.tsv",
    "effective_config": "results/{dataset}_config.yaml",
    "data_version": "resources/{dataset}/topics/version.txt",
    "table": "results/{dataset}_{measure}.tsv",
    # the report's pages and charts (results/{dataset}_published.html, ...; rules/report.smk)
    "report_file": "results/{dataset}_{page}.{ext}",
    "comparability": "results/{dataset}_comparability.tsv",
    "training": "results/{dataset}_training.tsv",
    "reproduction": "results/{dataset}_reproduction.tsv",
    "mteb": "results/mteb/{dataset}",
    "downloaded_corpus": "resources/{dataset}/downloads/corpus/{corpus}",
    "downloaded_topics": "resources/{dataset}/downloads/topics/{part}/topics.tsv",
    "downloaded_qrels": "resources/{dataset}/downloads/topics/{part}/qrels.tsv",
    "tiny_model": f"{BUILT_CHECKPOINTS}tiny-{{tiny}}",
    "hub_model": f"{HUB_MODELS_DIR}/{{hub_model}}",
    "me5_small": f"{BUILT_CHECKPOINTS}me5-small",
    # each job's log and benchmark file: {scope} is {dataset} (or models), {step} the rule and its wildcards
    "log": "logs/{scope}/{step}.log",
    "benchmark": "stats/{scope}/{step}.tsv",
}


def path(name, **fixed):
    """The pattern ``PATHS[name]`` with some wildcards fixed (others stay wildcards)."""
    pattern = PATHS[name]
    for key, value in fixed.items():
        pattern = pattern.replace(f"{{{key}}}", value)
    return pattern


def log_path(step, scope="{dataset}"):
    return path("log", scope=scope, step=step)


def benchmark_path(step, scope="{dataset}"):
    return path("benchmark", scope=scope, step=step)


def _alternatives(values):
    return "|".join(re.escape(v) for v in values) or "(?!)"


def models_with(need):
    """The used models whose family stores the output ``need`` (``dense``/``sparse``) or has the method."""
    return [
        m
        for m, spec in MODELS.items()
        if need in FAMILIES[spec["family"]].outputs
        or need in FAMILIES[spec["family"]].methods
    ]


wildcard_constraints:
    dataset=re.escape(DATASET.name),
    part=_alternatives(DATASET.partitions),
    corpus=_alternatives(sorted(set(DATASET.corpora(list(DATASET.partitions))))),
    model=_alternatives(MODELS),
    system=_alternatives(METHODS),
    kind="dense|sparse|union|rerank",
    block=BLOCK_PATTERN,


def corpus_source(wildcards):
    """The raw corpus: a local file from the config, or the folder of downloaded shards."""
    if SOURCE:
        return fill_placeholders(SOURCE["corpus"], wildcards.corpus)
    return expand(PATHS["downloaded_corpus"], **dict(wildcards.items()))[0]


def topics_source(wildcards):
    if SOURCE:
        return fill_placeholders(SOURCE["topics"], wildcards.part)
    return expand(PATHS["downloaded_topics"], **dict(wildcards.items()))[0]


def qrels_source(wildcards):
    if SOURCE:
        return fill_placeholders(SOURCE["qrels"], wildcards.part)
    return expand(PATHS["downloaded_qrels"], **dict(wildcards.items()))[0]


def corpus_parts(corpus):
    """The run's partitions whose queries search this corpus."""
    return [p for p in PARTS if DATASET.corpus_of(p) == corpus]


def part_corpus(pattern):
    """An input function for a per-corpus file, seen from a partition's job."""
    return lambda wc: expand(
        pattern, **dict(wc.items()), corpus=DATASET.corpus_of(wc.part)
    )[0]


#: the report's pages (and charts), for a dataset ("{dataset}": a pattern)
def report_inputs(dataset):
    return [
        path("report_file", dataset=dataset, page=page, ext=ext)
        for page, ext in report_pages(MEASURE_KEYS, METHODS, HYBRIDS)
    ]


PER_QUERY = expand(path("per_query", dataset="{{dataset}}"), part=PARTS, system=METHODS)


# ---------------------------------------------------------------- models


def _loaded_from(given):
    """Where jobs load a checkpoint from: its folder, or the fetch_model rule's copy of a hub model."""
    if given.startswith(BUILT_CHECKPOINTS) or not is_hub_id(given):
        return given
    return path("hub_model", hub_model=hub_folder_name(given))


def checkpoint_folder(model):
    """Where a model's jobs load it from (an API's model: its name at the API)."""
    spec = MODELS[model]
    if FAMILIES[spec["family"]].remote:
        return spec["checkpoint"]
    return _loaded_from(spec["checkpoint"])


def reranker_folder(reranker):
    """Where a reranker's jobs load it from."""
    return _loaded_from(RERANKERS[reranker]["checkpoint"])


def mteb_rows():
    """What an MTEB result folder says of each row (miracl_eval.evaluation.mteb_results.placement): its
    kind, checkpoint, method (and whether it is its model's main one), settings, and the checkpoint's
    folder (a hub model's fetch record gives its revision)."""
    rows = {}
    for s in SYSTEMS:
        if s.model is not None:
            spec = MODELS[s.model]
            family = FAMILIES[spec["family"]]
            rows[s.label] = {
                "kind": "model",
                "checkpoint": spec["checkpoint"],
                "method": s.method,
                "main": s.method == family.methods[0],
                "api": family.remote,
                "settings": spec,
                "folder": checkpoint_folder(s.model),
            }
        elif s.hybrid is not None:
            rows[s.label] = {
                "kind": "hybrid",
                "method": "hybrid",
                "settings": HYBRIDS[s.hybrid],
            }
        elif s.reranker is not None:
            spec = RERANKERS[s.reranker]
            rows[s.label] = {
                "kind": "reranked",
                "checkpoint": spec["checkpoint"],
                "method": s.method,
                "first_stage": s.first_stage.label,
                "settings": spec,
                "folder": reranker_folder(s.reranker),
            }
        else:
            rows[s.label] = {
                "kind": "bm25",
                "method": "bm25",
                "settings": config["bm25"],
            }
    return rows


#: the hub checkpoints that the used models and rerankers name, by the folder they are fetched into
HUB_MODELS = {
    hub_folder_name(spec["checkpoint"]): spec["checkpoint"]
    for spec in [
        *(s for s in MODELS.values() if not FAMILIES[s["family"]].remote),
        *RERANKERS.values(),
    ]
    if _loaded_from(spec["checkpoint"]) != spec["checkpoint"]
}
#: the models behind an HTTP API (their jobs run on CPUs after a cost plan)
API_MODELS = [m for m, s in MODELS.items() if FAMILIES[s["family"]].remote]


def _folder_input(folder):
    """A checkpoint folder as an input when it is local or fetched (so a rebuilt model re-runs its jobs)."""
    if folder.startswith(BUILT_CHECKPOINTS) or os.path.isdir(folder):
        return folder
    return []


def api_plan_input(wildcards):
    """An API model's cost plan, which its encoding jobs wait on (its being there, not its age: a new
    price or budget plans again and re-runs no encoding)."""
    return {
        "plan": ancient(
            path("api_plan", dataset=wildcards.dataset, model=wildcards.model)
        )
    }


def api_plan_spec(wildcards):
    """What an API model's cost plan depends on: what is sent (its encoding settings), its price and
    budget; not its throughput settings."""
    spec = MODELS[wildcards.model]
    return {
        **encoding_settings(spec),
        "price_per_million_tokens": spec["price_per_million_tokens"],
        "max_usd": spec["max_usd"],
    }


def no_input(wildcards):
    return {}


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


def _corpus_shard_count(wildcards):
    """A job's corpus and its number of shards (from the preprocessed corpus's size)."""
    corpus = getattr(wildcards, "corpus", None) or DATASET.corpus_of(wildcards.part)
    parquet = checkpoints.preprocess_corpus.get(
        dataset=wildcards.dataset, corpus=corpus
    ).output[0]
    return corpus, max(1, num_chunks(parquet, ENC["shard_size"]))


def encoded_model(model):
    """The model whose encodings ``model`` searches: itself, or the model a view is of (``view_of``)."""
    return MODELS[model].get("view_of") or model


def corpus_shards(kind):
    """The encoded shard files of a corpus (a job's params; its input is the blocks)."""

    def shard_files(wildcards):
        corpus, n = _corpus_shard_count(wildcards)
        return expand(
            path("shard", kind=kind),
            dataset=wildcards.dataset,
            model=encoded_model(wildcards.model),
            corpus=corpus,
            shard=[shard_name(i) for i in range(n)],
        )

    return shard_files


def corpus_blocks(wildcards):
    """The block manifests of a corpus's encodings: those written before when they cover it (any
    block size), else the blocks of `encoder.block_size` (miracl_eval.shards.covering_blocks).
    """
    corpus, n = _corpus_shard_count(wildcards)
    fixed = dict(
        dataset=wildcards.dataset, model=encoded_model(wildcards.model), corpus=corpus
    )
    folder = os.path.dirname(expand(PATHS["encoded_block"], **fixed, block="x")[0])
    written = (
        [f[: -len(".json")] for f in os.listdir(folder) if f.endswith(".json")]
        if os.path.isdir(folder)
        else []
    )
    per_block = shards_per_block(ENC["block_size"], ENC["shard_size"])
    return expand(
        PATHS["encoded_block"], **fixed, block=covering_blocks(written, n, per_block)
    )


#: encoding shards per exact search block (rules/dense.smk)
SEARCH_PER_BLOCK = shards_per_block(DENSE_INDEX["block_size"], ENC["shard_size"])


def search_blocks(wildcards):
    """The exact search's block files of a partition's corpus."""
    corpus, n = _corpus_shard_count(wildcards)
    return expand(
        PATHS["dense_block"],
        dataset=wildcards.dataset,
        model=wildcards.model,
        corpus=corpus,
        block=tiling(n, SEARCH_PER_BLOCK),
    )


def block_shard_files(wildcards):
    """The dense shard files of a search block."""
    return expand(
        path("shard", kind="dense"),
        dataset=wildcards.dataset,
        model=encoded_model(wildcards.model),
        corpus=wildcards.corpus,
        shard=[shard_name(i) for i in block_shards(wildcards.block)],
    )


def search_view(wildcards):
    """How a model's vectors are searched (miracl_eval.faiss.storage.View): a job's params."""
    spec = MODELS[wildcards.model]
    api = FAMILIES[spec["family"]].remote
    return {
        # an API model's own dimensions are the API's (its vectors are that size); a view's truncate
        "dimensions": (
            spec.get("dimensions") if spec.get("view_of") or not api else None
        ),
        "storage": spec.get("storage", "float32"),
        # an API's vectors are unit length (OpenAI's): a truncated view of them is normalised again
        "normalize": True if api else bool(spec.get("normalize")),
    }


def int8_ranges(wildcards):
    """A block search's int8 ranges file (none unless the model stores int8)."""
    if MODELS[wildcards.model].get("storage") != "int8":
        return []
    return expand(
        PATHS["int8_ranges"],
        dataset=wildcards.dataset,
        model=wildcards.model,
        corpus=wildcards.corpus,
    )


def search_gpu(wildcards):
    """A block search uses the GPU for vectors searched in float32 (others are scored on the CPU)."""
    return GPU if MODELS[wildcards.model].get("storage", "float32") == "float32" else 0


def query_chunks(kind):
    """The component-score chunk files of a partition (config `query_chunk` queries each)."""

    def chunks(wildcards):
        return expand(
            path("scores", kind=kind),
            dataset=wildcards.dataset,
            model=wildcards.model,
            part=wildcards.part,
            chunk=_chunk_names(wildcards),
        )

    return chunks


def _chunk_names(wildcards):
    queries = checkpoints.preprocess_topics.get(
        dataset=wildcards.dataset, part=wildcards.part
    ).output.queries
    return [
        f"{i:04d}" for i in range(max(1, num_chunks(queries, config["query_chunk"])))
    ]


def reranker_chunks(wildcards):
    """A reranker's score files of a partition's query chunks."""
    return expand(
        PATHS["reranker_scores"],
        **dict(wildcards.items()),
        chunk=_chunk_names(wildcards),
    )


def fusion_components(wildcards):
    """The component-score chunks that a fused method reads: its candidate list's."""
    return query_chunks(CANDIDATE_LIST[wildcards.method])(wildcards)


# ---------------------------------------------------------------- resource requests
# What a job's request depends on is decided by miracl_eval.jobs.requests (job_for, estimate); here
# the workflow only reads the sizes that it knows before the job runs.

#: estimates whose job covers every partition (its queries are all of them)
ALL_PARTITIONS = ("evaluate", "report")


def _rows(path, input):
    """Rows of a checkpoint's Parquet output. Until it exists (a dry run), a FileNotFoundError on the
    job's input: Snakemake then shows the request as <TBD> and evaluates it again when the job starts.
    """
    if not os.path.exists(path):
        missing = str(input[0]) if len(input) else path
        raise FileNotFoundError(errno.ENOENT, f"{path} does not exist yet", missing)
    return count_rows(path)


def _dim(path):
    """The vector dimension of a job's first vector input (a vector file, or a block manifest); the
    default until it exists (in a dry run, the pending checkpoint's output stands in for it).
    """
    try:
        if str(path).endswith(".json"):
            return manifest_dim(path) or requests.DEFAULT_DIM
        return vector_dim(path)[1]
    except (OSError, InputError):
        return requests.DEFAULT_DIM


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


def _candidates(name, w):
    """Candidate passages per query of a scoring, fusion or hybrid job."""
    if name in ("union_components", "rerank_components", "fuse"):
        kind = CANDIDATE_LIST[w["method"]] if name == "fuse" else name.split("_")[0]
        depth = MODELS[w["model"]]["rerank_depth"]
        return candidates_per_query(kind, config["hits"], depth)
    if name == "hybrid":
        hybrid = HYBRIDS[w["hybrid"]]
        return len(hybrid["systems"]) * hybrid["depth"]
    if name in ("reranker_scores", "reranked_run"):
        return RERANKERS[w["reranker"]]["depth"]
    return 0


def job_sizes(name, wildcards, input, threads):
    """The sizes of one job of estimate ``name`` (:func:`miracl_eval.jobs.requests.job_for`)."""
    w = dict(wildcards.items())
    sizes = {}
    if name in ("preprocess_corpus", "preprocess_topics"):
        sizes["input_mb"] = sum(requests.path_mb(f) for f in input)
    elif name not in ("download", "small"):
        corpus = w.get("corpus") or (
            DATASET.corpus_of(w["part"]) if "part" in w else None
        )
        if corpus is not None:
            sizes["passages"] = _rows(
                expand(PATHS["corpus"], dataset=w["dataset"], corpus=corpus)[0], input
            )
        parts = (
            [w["part"]]
            if "part" in w
            else (
                PARTS
                if name in ALL_PARTITIONS
                else corpus_parts(corpus) if name == "dense_block_search" else []
            )
        )
        if parts:
            sizes["queries"] = sum(
                _rows(expand(PATHS["queries"], dataset=DATASET.name, part=p)[0], input)
                for p in parts
            )
    if name == "dense_index":
        sizes["dim"] = _dim(input[0])
    if name == "dense_search":
        sizes["dim"] = _dim(input.queries)
    if name == "dense_block_search":
        sizes["dim"] = _dim(input.blocks[0])
    if name == "dense_merge":
        sizes["candidates"] = len(input) * config["hits"]
    if name in requests.MODEL_ESTIMATES:
        sizes["checkpoint_mb"] = _checkpoint_mb(wildcards)
    return requests.job_for(
        name,
        w,
        threads,
        REQUEST_SETTINGS,
        **{"candidates": _candidates(name, w), **sizes},
    )


def request(name):
    """A rule's ``mem_mb`` and ``runtime`` (minutes) from estimate ``name`` of miracl_eval.jobs.requests,
    evaluated per job (``resources: **request("bm25_index")``)."""

    def value(key):
        return lambda wildcards, input, threads: getattr(
            requests.estimate(
                name, job_sizes(name, wildcards, input, threads), REQUEST_SETTINGS
            ),
            key,
        )

    return {"mem_mb": value("mem_mb"), "runtime": value("runtime")}
