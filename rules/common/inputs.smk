# Input functions: the raw data's sources, the per-corpus files a partition's job reads, the encoded
# shards and blocks of a corpus and the query chunks of a partition (counted from the preprocessing
# checkpoints' outputs), the exact search's blocks, and what the evaluation and the report gather.

import os

from miracl_eval.config.validate import fill_placeholders
from miracl_eval.encoders.blocks import written_blocks
from miracl_eval.fusion.weighted import CANDIDATE_LIST
from miracl_eval.report.plan import report_pages
from miracl_eval.schemas import num_chunks
from miracl_eval.shards import (
    block_shards,
    covering_blocks,
    shard_name,
    shards_per_block,
    tiling,
)


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


def encoded_block_folders():
    """The block manifests' folders of every corpus of every model this run encodes."""
    models = sorted({encoded_model(m) for m in MODELS})
    pattern = os.path.dirname(PATHS["encoded_block"])
    return expand(pattern, dataset=DATASET.name, model=models, corpus=CORPORA)


def download_folders(wildcards):
    """The folders of a run's hub downloads (corpora, and each partition's topics and qrels), whose records
    say which revision of the data was downloaded (miracl_eval.inputs.download.read_source).
    """
    corpora = expand(
        PATHS["downloaded_corpus"], dataset=wildcards.dataset, corpus=CORPORA
    )
    topics = expand(PATHS["downloaded_topics"], dataset=wildcards.dataset, part=PARTS)
    return [*corpora, *(os.path.dirname(t) for t in topics)]


def _corpus_shard_count(wildcards):
    """A job's corpus and its number of shards (from the preprocessed corpus's size)."""
    corpus = getattr(wildcards, "corpus", None) or DATASET.corpus_of(wildcards.part)
    parquet = checkpoints.preprocess_corpus.get(
        dataset=wildcards.dataset, corpus=corpus
    ).output[0]
    return corpus, max(1, num_chunks(parquet, ENC["shard_size"]))


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
    written = written_blocks(folder)
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
