# Every path pattern of the workflow, spelled here once (PATHS), the helpers that fix some of a
# pattern's wildcards (path; each job's log_path and benchmark_path) and the wildcards' constraints.

import re

from miracl_eval.config.models import BUILT_CHECKPOINTS, HUB_MODELS_DIR
from miracl_eval.shards import BLOCK_PATTERN

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
    # an API model's ledger: a file per encoding job, a line per request it sent (miracl_eval.encoders.api_ledger)
    "api_ledger": "resources/{dataset}/encoded/{model}/ledger",
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
    # the published numbers of the same task beside the run's rows: context, never a verdict
    "context": "results/{dataset}_context.tsv",
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


wildcard_constraints:
    dataset=re.escape(DATASET.name),
    part=_alternatives(DATASET.partitions),
    corpus=_alternatives(sorted(set(DATASET.corpora(list(DATASET.partitions))))),
    model=_alternatives(MODELS),
    system=_alternatives(METHODS),
    kind="dense|sparse|union|rerank",
    block=BLOCK_PATTERN,
