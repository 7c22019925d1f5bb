# Shared names and input functions. Every path of the workflow is built here.

from miracl_eval.config import fill_placeholders
from miracl_eval.datasets import get_dataset
from miracl_eval.metrics import MEASURES

DATASET = get_dataset(config["dataset"])
PARTS = list(config["languages"])
CORPORA = DATASET.corpora(PARTS)
METHODS = list(config["methods"])
MEASURE_KEYS = [m.key for m in MEASURES]
SOURCE = config.get("source")


def _alternatives(values):
    return "|".join(re.escape(v) for v in values)


wildcard_constraints:
    dataset=re.escape(DATASET.name),
    part=_alternatives(DATASET.partitions),
    corpus=_alternatives(set(DATASET.corpora(list(DATASET.partitions)))),
    method=_alternatives(["bm25", "dense", "sparse", "multivec", "dense+sparse", "all"]),


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


def corpus_parquet(wildcards):
    corpus = DATASET.corpus_of(wildcards.part)
    return f"resources/{wildcards.dataset}/corpus/{corpus}/corpus.parquet"


def bm25_index(wildcards):
    corpus = DATASET.corpus_of(wildcards.part)
    return f"resources/{wildcards.dataset}/indexes/{corpus}/bm25"
