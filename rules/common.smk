# Shared names and input functions. Every path pattern of the workflow is spelled here, once (PATHS).

import errno

from miracl_eval import costs
from miracl_eval.config import fill_placeholders
from miracl_eval.datasets import get_dataset
from miracl_eval.encoders.registry import FAMILIES, encoding_settings
from miracl_eval.fusion import FUSED_COMPONENTS
from miracl_eval.metrics import MEASURES
from miracl_eval.models import BUILT_CHECKPOINTS
from miracl_eval.dense import vector_dim
from miracl_eval.schemas import count_rows, num_chunks
from miracl_eval.systems import systems

DATASET = get_dataset(config["dataset"])
PARTS = list(config["languages"])
CORPORA = DATASET.corpora(PARTS)
MEASURE_KEYS = [m.key for m in MEASURES]
SOURCE = config.get("source")
ENC = config["encoder"]
# the release of the topics and qrels asked for: MIRACL's is fixed, MessIRve's a setting
VERSION_SETTING = DATASET.version or config["hub"]["messirve_version"]
DENSE_INDEX = config["dense_index"]
# GPU rules ask for a GPU unless the config pins the encoders to the CPU.
GPU = 0 if ENC["device"] == "cpu" else 1
# An encoding job on a GPU wants a CPU thread beside its device's; on the CPU, the configured
# threads (Snakemake sets the job's OMP_NUM_THREADS to them, which torch follows), so that on a
# small machine two short encoding jobs share the cores rather than queue for all of them.
ENCODE_THREADS = 2 if GPU else config["threads"]

#: the table rows (bm25, {model}/{method}, hybrids), in the config's order; labels are also paths
SYSTEMS = systems(config)
METHODS = [s.label for s in SYSTEMS]
#: the resolved specs of the models that some row uses (a configured model no row uses gets no jobs)
MODELS = {
    name: spec
    for name, spec in config["models"].items()
    if any(s.model == name for s in SYSTEMS)
}
HYBRIDS = {s.hybrid: config["hybrids"][s.hybrid] for s in SYSTEMS if s.hybrid}
FUSED = list(FUSED_COMPONENTS)

PATHS = {
    "corpus": "resources/{dataset}/corpus/{corpus}/corpus.parquet",
    "queries": "resources/{dataset}/topics/{part}/queries.parquet",
    "qrels": "resources/{dataset}/topics/{part}/qrels.parquet",
    "bm25_index": "resources/{dataset}/indexes/{corpus}/bm25",
    "shard": "resources/{dataset}/encoded/{model}/corpus/{corpus}/{kind}/{shard}.parquet",
    "encoded_queries": "resources/{dataset}/encoded/{model}/queries/{part}/{kind}.parquet",
    "dense_index": "resources/{dataset}/indexes/{corpus}/{model}/dense.faiss",
    "dense_docids": "resources/{dataset}/indexes/{corpus}/{model}/dense.docids.parquet",
    "sparse_index": "resources/{dataset}/indexes/{corpus}/{model}/sparse",
    "scores": "resources/{dataset}/scores/{model}/{part}/{kind}/{chunk}.parquet",
    "run": "runs/{dataset}/{part}/{system}.parquet",
    "trec": "runs/{dataset}/{part}/{system}.trec",
    "components": "runs/{dataset}/{part}/{system}.components.parquet",
    "per_query": "results/{dataset}/{part}/{system}.per_query.parquet",
    "judged_not_in_corpus": "results/{dataset}/{part}/judged_not_in_corpus.tsv",
    "effective_config": "results/{dataset}_config.yaml",
    "data_version": "resources/{dataset}/topics/version.txt",
    "table": "results/{dataset}_{measure}.tsv",
    "comparability": "results/{dataset}_comparability.tsv",
    "tiny_model": "resources/models/tiny-{tiny}",
    "me5_small": "resources/models/me5-small",
}


def path(name, **fixed):
    """The pattern ``PATHS[name]`` with some wildcards fixed (others stay wildcards)."""
    pattern = PATHS[name]
    for key, value in fixed.items():
        pattern = pattern.replace(f"{{{key}}}", value)
    return pattern


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


def corpus_source(wildcards):
    """The raw corpus: a local file from the config, or the folder of downloaded shards."""
    if SOURCE:
        return fill_placeholders(SOURCE["corpus"], wildcards.corpus)
    return f"resources/{wildcards.dataset}/downloads/corpus/{wildcards.corpus}"


def topics_source(wildcards):
    if SOURCE:
        return fill_placeholders(SOURCE["topics"], wildcards.part)
    return f"resources/{wildcards.dataset}/downloads/topics/{wildcards.part}/topics.tsv"


def qrels_source(wildcards):
    if SOURCE:
        return fill_placeholders(SOURCE["qrels"], wildcards.part)
    return f"resources/{wildcards.dataset}/downloads/topics/{wildcards.part}/qrels.tsv"


def part_corpus(pattern):
    """An input function for a per-corpus file, seen from a partition's job."""
    return lambda wc: expand(
        pattern, **dict(wc.items()), corpus=DATASET.corpus_of(wc.part)
    )[0]


PER_QUERY = expand(path("per_query", dataset="{{dataset}}"), part=PARTS, system=METHODS)


# ---------------------------------------------------------------- models


def model_input(wildcards):
    """The checkpoint folder as an input when it is local (so a rebuilt model re-runs its jobs)."""
    folder = MODELS[wildcards.model]["checkpoint"]
    if folder.startswith(BUILT_CHECKPOINTS) or os.path.isdir(folder):
        return folder
    return []


def encoder_spec(role=None):
    """What a model's encoding of one role's texts (None: both) depends on (its params)."""
    return lambda wc: encoding_settings(MODELS[wc.model], role)


def model_setting(key):
    return lambda wc: MODELS[wc.model][key]


def corpus_shards(kind):
    """The encoded shards of a corpus: their number follows from the preprocessed corpus's size."""

    def shards(wildcards):
        corpus = getattr(wildcards, "corpus", None) or DATASET.corpus_of(wildcards.part)
        parquet = checkpoints.preprocess_corpus.get(
            dataset=wildcards.dataset, corpus=corpus
        ).output[0]
        n = max(1, num_chunks(parquet, ENC["shard_size"]))
        return expand(
            path("shard", kind=kind),
            dataset=wildcards.dataset,
            model=wildcards.model,
            corpus=corpus,
            shard=[f"{i:05d}" for i in range(n)],
        )

    return shards


def query_chunks(kind):
    """The component-score chunk files of a partition (config `query_chunk` queries each)."""

    def chunks(wildcards):
        queries = checkpoints.preprocess_topics.get(
            dataset=wildcards.dataset, part=wildcards.part
        ).output.queries
        n = max(1, num_chunks(queries, config["query_chunk"]))
        return expand(
            path("scores", kind=kind),
            dataset=wildcards.dataset,
            model=wildcards.model,
            part=wildcards.part,
            chunk=[f"{i:04d}" for i in range(n)],
        )

    return chunks


def fusion_components(wildcards):
    kind = "union" if wildcards.method == "dense+sparse" else "rerank"
    return query_chunks(kind)(wildcards)


# ---------------------------------------------------------------- resource requests

COST_SETTINGS = costs.Settings.from_config(config)
#: estimates whose job runs a model (its size counts) on the GPU when the rule asks for one
MODEL_ESTIMATES = ("encode_corpus", "encode_queries", "rerank_components")


def _rows(path, input):
    """Rows of a checkpoint's Parquet output. Until it exists (a dry run), a FileNotFoundError on the
    job's input: Snakemake then shows the request as <TBD> and evaluates it again when the job starts.
    """
    if not os.path.exists(path):
        missing = str(input[0]) if len(input) else path
        raise FileNotFoundError(errno.ENOENT, f"{path} does not exist yet", missing)
    return count_rows(path)


def _dim(path):
    return vector_dim(path)[1] if os.path.exists(path) else costs.DEFAULT_DIM


def _chunk_of(total, size, index):
    return max(0, min(size, total - index * size))


def job_sizes(name, wildcards, input, threads):
    """The :class:`miracl_eval.costs.Job` of one job of estimate ``name``, from the preprocessed
    corpus and queries (their Parquet row counts) and the job's wildcards."""
    w = dict(wildcards.items())
    sizes = {"threads": threads}
    if name in ("download", "small"):
        return costs.Job(**sizes)
    if name in ("preprocess_corpus", "preprocess_topics"):
        return costs.Job(input_mb=sum(costs.path_mb(f) for f in input), **sizes)
    corpus = w.get("corpus") or (DATASET.corpus_of(w["part"]) if "part" in w else None)
    if corpus is not None and "dataset" in w:
        sizes["passages"] = _rows(
            expand(PATHS["corpus"], dataset=w["dataset"], corpus=corpus)[0], input
        )
    if "part" in w:
        sizes["queries"] = _rows(expand(PATHS["queries"], **w)[0], input)
    elif name == "report":
        sizes["queries"] = sum(
            _rows(expand(PATHS["queries"], dataset=DATASET.name, part=p)[0], input)
            for p in PARTS
        )
    if name == "encode_corpus":
        sizes["passages"] = _chunk_of(
            sizes["passages"], ENC["shard_size"], int(w["shard"])
        )
    if "chunk" in w:
        sizes["queries"] = _chunk_of(
            sizes["queries"], config["query_chunk"], int(w["chunk"])
        )
    if name == "dense_index":
        sizes["dim"] = _dim(input[0])
    if name == "dense_search":
        sizes["dim"] = _dim(input.queries)
    if name in MODEL_ESTIMATES:
        folder = model_input(
            wildcards
        )  # a local checkpoint is an input: <TBD> until it exists
        if folder and not os.path.isdir(folder):
            raise FileNotFoundError(
                errno.ENOENT, "the checkpoint does not exist yet", folder
            )
        sizes["checkpoint_mb"] = costs.checkpoint_mb(
            folder or MODELS[w["model"]]["checkpoint"]
        )
        sizes["gpu"] = GPU == 1
    if name == "union_components" or (name == "fuse" and w["method"] == "dense+sparse"):
        sizes["candidates"] = 2 * config["hits"]
    elif name in ("rerank_components", "fuse"):
        sizes["candidates"] = MODELS[w["model"]]["rerank_depth"]
    if name == "hybrid":
        hybrid = HYBRIDS[w["hybrid"]]
        sizes["candidates"] = len(hybrid["systems"]) * hybrid["depth"]
    return costs.Job(**sizes)


def request(name):
    """A rule's ``mem_mb`` and ``runtime`` (minutes) from estimate ``name`` of miracl_eval.costs,
    evaluated per job (``resources: **request("bm25_index")``)."""

    def value(key):
        return lambda wildcards, input, threads: getattr(
            costs.estimate(
                name, job_sizes(name, wildcards, input, threads), COST_SETTINGS
            ),
            key,
        )

    return {"mem_mb": value("mem_mb"), "runtime": value("runtime")}
