"""Resource requests follow the data: small for the sample, what a job needs at full size (dry runs)."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from miracl_eval.config.validate import validate
from miracl_eval.inputs.datasets import get_dataset
from miracl_eval.jobs import requests as costs
from tests.helpers import REPO

MB = costs.MB
NODE_MB = 4000  # the sample must fit a 4 GB node
ENGLISH, MESSIRVE, MESSIRVE_QUERIES = 32_893_221, 14_047_759, 156_528
SCALE = yaml.safe_load((REPO / "scale.yaml").read_text())
SCALE_IVFPQ = {**SCALE, "dense_index": {"type": "ivfpq", "ivf_lists": 16384, "pq_m": 64, "nprobe": 128}}
DATASETS = {name: get_dataset(name).corpus_of for name in ("miracl", "messirve")}


#: the settings of the full run's config (every default from the schema)
DEFAULTS = costs.Settings.from_config(validate(yaml.safe_load((REPO / "config.yaml").read_text())))


def _settings(**overrides: object) -> costs.Settings:
    return dataclasses.replace(DEFAULTS, **overrides)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ estimates

SAMPLE_JOBS = {
    "small": costs.Job(),
    "preprocess_corpus": costs.Job(input_mb=0.02),
    "preprocess_topics": costs.Job(input_mb=0.001),
    "judged_not_in_corpus": costs.Job(passages=24, queries=4),
    "bm25_index": costs.Job(passages=24),
    "bm25_search": costs.Job(passages=24, queries=4),
    "sparse_index": costs.Job(passages=24),
    "sparse_search": costs.Job(passages=24, queries=4),
    "encode_corpus": costs.Job(passages=24, checkpoint_mb=3),
    "encode_queries": costs.Job(queries=4, checkpoint_mb=3),
    "encode_api": costs.Job(passages=24),
    "api_cost_plan": costs.Job(),
    "dense_index": costs.Job(passages=24, dim=32),
    "dense_search": costs.Job(passages=24, queries=4, dim=32),
    "dense_block_search": costs.Job(passages=24, queries=4, dim=32),
    "int8_ranges": costs.Job(passages=24, dim=32),
    "dense_merge": costs.Job(queries=4, candidates=1000),
    "union_components": costs.Job(passages=24, queries=3, candidates=2000),
    "rerank_components": costs.Job(passages=24, queries=3, candidates=20, checkpoint_mb=3),
    "fuse": costs.Job(queries=4, candidates=2000),
    "reranker_scores": costs.Job(passages=24, queries=3, candidates=100, checkpoint_mb=3),
    "reranked_run": costs.Job(queries=4, candidates=100),
    "hybrid": costs.Job(queries=4, candidates=2000),
    "evaluate": costs.Job(queries=4),
    "report": costs.Job(queries=72),
}


def test_every_estimate_but_the_downloads_has_a_sample_job() -> None:
    declared = {name.split(":")[0] for name in costs.COSTS}
    assert declared - set(SAMPLE_JOBS) == {"download"}


@pytest.mark.parametrize("name", sorted(SAMPLE_JOBS))
def test_the_sample_asks_for_little(name: str) -> None:
    request = costs.estimate(name, SAMPLE_JOBS[name], _settings(java_heap="1g"))
    assert 0 < request.mem_mb <= NODE_MB and 0 < request.runtime <= 60, request


def test_a_flat_index_of_english_asks_for_its_vectors_ivfpq_for_its_codes() -> None:
    english = costs.Job(passages=ENGLISH, queries=799, dim=1024, threads=8)
    vectors_mb = ENGLISH * 1024 * 4 / MB  # 128,500 MB
    for name in ("dense_index", "dense_search"):
        flat = costs.estimate(name, english, _settings())
        assert flat.mem_mb >= vectors_mb
        ivfpq = costs.estimate(name, english, _settings(index_type="ivfpq", ivf_lists=16384, nprobe=128))
        assert ivfpq.mem_mb < 32_000 < flat.mem_mb
    # an IVF-PQ index of English: 72 bytes a passage, the centroids, the training sample of 64 per list
    assert costs.dense_index_mb(_settings(index_type="ivfpq", ivf_lists=16384), ENGLISH, 1024) == pytest.approx(
        (ENGLISH * 72 + (16384 + 64 * 16384) * 4096) / MB
    )


def test_requests_grow_with_the_data_and_the_settings() -> None:
    small, large = costs.Job(passages=10_000, threads=4), costs.Job(passages=10_000_000, threads=4)
    index_small = costs.estimate("bm25_index", small, _settings())
    index_large = costs.estimate("bm25_index", large, _settings())
    assert index_large.runtime > 10 * index_small.runtime
    assert costs.estimate("bm25_index", large, _settings(java_heap="16g")).mem_mb >= 16 * 1024
    # more threads, less time for a parallel stage
    assert costs.estimate("bm25_index", costs.Job(passages=10_000_000, threads=16), _settings()).runtime < (
        index_large.runtime
    )
    # fusion holds one query chunk's candidates; its time counts all of them
    fuse = costs.Job(queries=MESSIRVE_QUERIES, candidates=2000)
    chunked = costs.estimate("fuse", fuse, _settings(query_chunk=10_000))
    whole = costs.estimate("fuse", fuse, _settings(query_chunk=200_000))
    assert chunked.mem_mb < whole.mem_mb and chunked.runtime == whole.runtime
    with pytest.raises(costs.ConfigError, match="java_heap"):
        costs.estimate("bm25_index", small, _settings(java_heap="lots"))


def test_exact_search_blocks_fit_32gb_and_read_their_vectors_in_their_time() -> None:
    """A block of 4M English passages holds 16.4 GB of vectors (under 32 GB with the rest); its time
    counts reading them (at READ_MB_PER_S) beside the products, on a GPU and on the CPU."""
    block = costs.Job(passages=4_000_000, queries=799, dim=1024, threads=8, gpu=True)
    request = costs.estimate("dense_block_search", block, _settings())
    assert 4_000_000 * 4096 / MB < request.mem_mb < 32_000
    read_s = 4_000_000 * 4096 / MB / costs.READ_MB_PER_S
    assert request.runtime >= read_s / 60 * costs.TIME_MARGIN  # at least the read, not shared by the threads
    bigger = costs.estimate("dense_block_search", dataclasses.replace(block, passages=8_000_000), _settings())
    assert bigger.runtime > request.runtime and bigger.mem_mb > request.mem_mb
    cpu = costs.estimate("dense_block_search", dataclasses.replace(block, gpu=False, queries=156_528), _settings())
    assert cpu.runtime > request.runtime
    merge = costs.estimate("dense_merge", costs.Job(queries=156_528, candidates=4 * 1000), _settings())
    assert merge.mem_mb < 4_000  # one chunk of queries at a time


def test_a_reranker_chunk_grows_with_its_pairs_and_the_model_size_and_fits_a_gpu_job() -> None:
    """A chunk of 2,000 English queries' top 100 (200k pairs): bge-reranker-v2-m3 (2.2 GB) and
    bge-reranker-v2-gemma (about 10 GB in bf16 files): minutes on a GPU, far longer on CPUs."""
    m3 = costs.Job(passages=ENGLISH, queries=2000, candidates=100, checkpoint_mb=2200, gpu=True, threads=8)
    gemma = dataclasses.replace(m3, checkpoint_mb=10_000)
    on_gpu, bigger = (
        costs.estimate("reranker_scores", m3, _settings()),
        costs.estimate("reranker_scores", gemma, _settings()),
    )
    assert bigger.runtime > on_gpu.runtime and bigger.mem_mb > on_gpu.mem_mb
    assert on_gpu.runtime < 120 and on_gpu.mem_mb < 16_000
    assert (
        costs.estimate("reranker_scores", dataclasses.replace(m3, gpu=False), _settings()).runtime > 10 * on_gpu.runtime
    )
    # it reads the corpus's docids and its candidates' texts only
    assert costs.units("reranker_scores", m3, _settings())[1]["read_mb"] == pytest.approx(
        (ENGLISH * costs.DOCID_BYTES + 200_000 * costs.TEXT_BYTES) / MB
    )


@pytest.mark.parametrize(
    "name,job,read_bytes",
    [
        # the whole-corpus flat index (approximate methods' path) reads its 134 GB file
        ("dense_search", costs.Job(passages=ENGLISH, queries=799, dim=1024, threads=8), ENGLISH * 4096),
        # the union reads, at worst, every shard's vectors and weights, and the corpus's docids
        ("union_components", costs.Job(passages=ENGLISH, queries=799, candidates=2000), ENGLISH * (4096 + 512)),
        # the rerank reads the corpus's docids and the candidates' texts, no vector
        ("rerank_components", costs.Job(passages=ENGLISH, queries=799, candidates=100, gpu=True), ENGLISH * 412),
        ("encode_corpus", costs.Job(passages=1_000_000, gpu=True, checkpoint_mb=2200), 1_000_000 * 400),
    ],
)
def test_time_requests_include_reading_what_the_job_reads(name: str, job: costs.Job, read_bytes: int) -> None:
    """Each job's time counts its reads at READ_MB_PER_S, on top of its work: English's whole-index
    search asked for 15 minutes to read 134 GB before reads were counted."""
    request = costs.estimate(name, job, _settings())
    read_min = read_bytes / MB / costs.READ_MB_PER_S / 60
    assert request.runtime >= read_min * costs.TIME_MARGIN
    assert costs.units(name, job, _settings())[1]["read_mb"] == pytest.approx(read_bytes / MB, rel=0.01)


def test_the_shipped_config_feeds_a_gpu_from_one_setting() -> None:
    """config.yaml as shipped (not only scale.yaml) gives a GPU encoding job 6 tokenizer threads (about
    1,400 passages/s each: an H200's pace) and asks for their CPUs plus the model's and the writer's;
    the job's threads, capped by --cores or a profile, cap its workers the same way."""
    cfg = validate(yaml.safe_load((REPO / "config.yaml").read_text()))
    workers = cfg["encoder"]["tokenizer_workers"]
    assert workers == 6 and "tokenizer_workers" not in SCALE.get("encoder", {})
    threads = costs.encode_threads(workers, gpu=True, cpu_threads=cfg["threads"])
    assert threads == 8 and costs.tokenizer_workers(threads, gpu=True) == workers
    assert costs.tokenizer_workers(4, gpu=True) == 2  # snakemake --cores 4 gives the job 4 CPUs
    assert costs.tokenizer_workers(1, gpu=True) == 1
    # on the CPU the job asks for `threads` (torch's) and tokenizes with one thread beside them
    assert costs.encode_threads(workers, gpu=False, cpu_threads=3) == 3
    assert costs.tokenizer_workers(3, gpu=False) == 1
