# Shared names and input functions. Every path of the workflow is built here.

from miracl_eval.config import fill_placeholders, method_names
from miracl_eval.datasets import get_dataset
from miracl_eval.fusion import FUSED_COMPONENTS
from miracl_eval.metrics import MEASURES
from miracl_eval.schemas import num_chunks

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
    corpus=_alternatives(sorted(set(DATASET.corpora(list(DATASET.partitions))))),
    method=_alternatives(method_names()),


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


def part_corpus(path):
    """An input function for a per-corpus file, seen from a partition's job."""
    return lambda wc: path.format(dataset=wc.dataset, corpus=DATASET.corpus_of(wc.part))


corpus_parquet = part_corpus("resources/{dataset}/corpus/{corpus}/corpus.parquet")
bm25_index = part_corpus("resources/{dataset}/indexes/{corpus}/bm25")
PER_QUERY = expand(
    "results/{{dataset}}/{part}/{method}.per_query.parquet", part=PARTS, method=METHODS
)


# ---------------------------------------------------------------- BGE-M3 methods

ENC = config["encoder"]
DENSE_INDEX = config["dense_index"]
MODEL = config["model"]
TINY_MODEL = "resources/models/tiny-bge-m3"
# GPU rules ask for a GPU unless the config pins the encoder to the CPU.
GPU = 0 if ENC["device"] == "cpu" else 1
FUSED = list(FUSED_COMPONENTS)


def model_input(wildcards):
    """The checkpoint folder as an input when it is local (so a rebuilt model re-runs encoding)."""
    if MODEL == TINY_MODEL or os.path.isdir(MODEL):
        return MODEL
    return []


def corpus_shards(kind):
    """The encoded shards of a corpus: their number follows from the preprocessed corpus's size."""

    def shards(wildcards):
        corpus = getattr(wildcards, "corpus", None) or DATASET.corpus_of(wildcards.part)
        parquet = checkpoints.preprocess_corpus.get(
            dataset=wildcards.dataset, corpus=corpus
        ).output[0]
        n = max(1, num_chunks(parquet, ENC["shard_size"]))
        return [
            f"resources/{wildcards.dataset}/encoded/{corpus}/{kind}/{i:05d}.parquet"
            for i in range(n)
        ]

    return shards


def query_chunks(kind):
    """The component-score chunk files of a partition (config `query_chunk` queries each)."""

    def chunks(wildcards):
        queries = checkpoints.preprocess_topics.get(
            dataset=wildcards.dataset, part=wildcards.part
        ).output.queries
        n = max(1, num_chunks(queries, config["query_chunk"]))
        return [
            f"resources/{wildcards.dataset}/scores/{wildcards.part}/{kind}/{i:04d}.parquet"
            for i in range(n)
        ]

    return chunks


def fusion_components(wildcards):
    kind = "union" if wildcards.method == "dense+sparse" else "rerank"
    return query_chunks(kind)(wildcards)
