"""Resource requests follow the data: small for the sample, what a job needs at full size (dry runs)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import yaml

from miracl_eval.config.validate import validate
from miracl_eval.errors import InputError
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
    "encode_api_queries": costs.Job(queries=4),
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


@pytest.mark.parametrize("name", ["encode_corpus", "encode_api", "dense_block_search"])
def test_a_block_job_asks_for_its_block_not_its_corpus(name: str) -> None:
    """Every job over a block of shards (a model's or an API's encoding, the exact search) asks for what its
    block holds: English's first block of 1M passages asks what a corpus of exactly that block asks (an API
    block asked for 55 hours, its corpus's 32.9M passages at 500/s)."""
    settings = _settings(shard_size=100_000, gpu=True)
    block = {"corpus": "en", "block": "00000-00009"}  # 10 shards of 100k

    def request(corpus_passages: int) -> costs.Request:
        job = costs.job_for(name, block, 8, settings, passages=corpus_passages, queries=799, checkpoint_mb=2200)
        assert job.passages == 1_000_000
        return costs.estimate(name, job, settings)

    assert request(ENGLISH) == request(1_000_000)
    if name == "encode_api":  # 500 texts a second, with the margin: under two hours, not 55
        assert request(ENGLISH).runtime <= 120


@pytest.mark.parametrize(
    ("limits", "plan_tokens", "paced_minutes"),
    [
        ({"tokens_per_minute": 1_000_000}, 80, 320),  # tier 1 shared by 4 jobs: 80M tokens at 250k a minute
        ({"tokens_per_minute": 1_000_000}, None, 240),  # before the plan exists: English's 60 tokens a passage
        ({"tokens_per_minute": 10_000_000, "requests_per_minute": 200}, 80, 78.14),  # 3,907 requests at 50 a minute
        # requests of 20,480 tokens hold 256 passages of 80 tokens, but only 128 of 160: 7,813 at 50 a minute
        ({"tokens_per_minute": 10**8, "requests_per_minute": 200, "tokens_per_request": 20_480}, 160, 156.26),
    ],
)
def test_an_api_block_asks_for_the_time_its_pace_allows(tmp_path: Path, limits, plan_tokens, paced_minutes) -> None:
    """A 1M-passage API block at its share (1/api_jobs) of the model's limits: never less than the pace allows
    (with PACE_MARGIN), whatever the API's speed; the plan's tokens a passage when it exists."""
    plan = tmp_path / "cost_plan.json"
    if plan_tokens is not None:
        parts = {
            "corpus en": {"inputs": ENGLISH, "tokens": ENGLISH * plan_tokens},
            "queries en": {"inputs": 1, "tokens": 9},
        }
        plan.write_text(json.dumps({"parts": parts}))
    spec = {"api_jobs": 4, "inputs_per_request": 256, "passage_max_length": 8192, "tokens_per_minute": None,
            "requests_per_minute": None, **limits}  # fmt: skip
    settings = _settings(shard_size=100_000)
    pace = costs.api_pace(spec, "passage", plan, "corpus en")
    job = costs.job_for(
        "encode_api", {"corpus": "en", "block": "00000-00009"}, 1, settings, passages=ENGLISH, pace=pace
    )
    runtime = costs.estimate("encode_api", job, settings).runtime
    floor = costs.COSTS["encode_api"].minutes
    assert pace.seconds(1_000_000) / 60 == pytest.approx(paced_minutes, rel=0.01)
    assert (
        math.ceil((floor + paced_minutes) * costs.PACE_MARGIN) - 2
        <= runtime
        <= (floor + paced_minutes) * costs.PACE_MARGIN + 2
    )
    unpaced = costs.estimate("encode_api", costs.Job(passages=1_000_000), settings).runtime
    assert runtime > unpaced  # without its pace the request was the API's speed alone (110 min)


def test_before_its_plan_an_api_block_assumes_its_languages_tokens(tmp_path: Path) -> None:
    """Without a cost plan, a passage takes its language's tokens (Telugu's 400, not English's 60; another
    corpus 150); a plan that is not JSON is an error naming it."""
    spec = {"api_jobs": 4, "inputs_per_request": 256, "passage_max_length": 8192, "tokens_per_minute": 1_000_000}
    assert costs.api_pace(spec, "passage", None, "corpus te").tokens_per_text == 400
    assert costs.api_pace(spec, "passage", None, "corpus eswiki").tokens_per_text == 150
    assert costs.api_pace({**spec, "passage_max_length": 256}, "passage", None, "corpus te").tokens_per_text == 256
    assert costs.api_pace(spec, "query", None, "queries te").tokens_per_text == 30
    broken = tmp_path / "cost_plan.json"
    broken.write_text("{not json")
    with pytest.raises(InputError, match="not a cost plan") as err:
        costs.api_pace(spec, "passage", broken, "corpus te")
    assert str(broken) in str(err.value)


def test_an_int8_calibration_asks_for_a_batch_whatever_its_sample() -> None:
    """int8_ranges takes its ranges batch by batch (miracl_eval.faiss.blocks.calibrate holds no sample): its
    request follows the vectors' dimension, not calibration_passages nor the corpus's size."""
    settings = _settings()

    def mem(passages: int, dim: int) -> int:
        return costs.estimate("int8_ranges", costs.Job(passages=passages, dim=dim), settings).mem_mb

    assert mem(ENGLISH, 1024) == mem(1_000_000, 1024) < 2_500  # a batch of 65,536 x 1,024, twice: 512 MB
    assert mem(ENGLISH, 3072) / costs.MEM_MARGIN >= 1000 + 2 * 65_536 * 3072 * 4 / costs.MB
    assert mem(10_000, 3072) < mem(ENGLISH, 3072)  # a corpus smaller than a batch


def test_an_api_query_job_asks_for_its_queries_not_the_corpus() -> None:
    settings = _settings()
    english = costs.job_for("encode_api_queries", {"part": "en"}, 1, settings, passages=ENGLISH, queries=799)
    assert costs.estimate("encode_api_queries", english, settings) == costs.estimate(
        "encode_api_queries", costs.Job(queries=799), settings
    )
    assert costs.estimate("encode_api_queries", english, settings).runtime <= 15


def test_an_exact_search_blocks_memory_follows_its_views_storage_and_rescore() -> None:
    """A block of 4M passages of 1,024 dimensions holds 15,625 MiB of float32 vectors, half of that in
    float16, a quarter in int8 or at 256 dimensions, 488 MiB of bits; a view that rescores adds its round
    of queries and pairs (1 GiB at most, and a query chunk's) and reads the block again per round."""
    block = costs.Job(passages=4_000_000, queries=799, dim=1024, threads=8, gpu=True)
    mem = {
        s: costs.estimate("dense_block_search", dataclasses.replace(block, storage=s), _settings()).mem_mb
        for s in ("float32", "float16", "int8", "binary")
    }
    per_mb = costs.COSTS["dense_block_search"].mem["index_mb"] * costs.MEM_MARGIN  # an MB held, requested
    for storage, held in (("float16", 7812.5), ("int8", 3906.25), ("binary", 488.28125)):
        assert abs(mem["float32"] - mem[storage] - per_mb * (15625 - held)) <= 100, storage
    assert mem["binary"] < 4_200  # a 4 GB node's job
    quarter = dataclasses.replace(block, view_dim=256)
    assert costs.estimate("dense_block_search", quarter, _settings()).mem_mb == mem["int8"]
    binary = dataclasses.replace(block, storage="binary")
    plain = costs.estimate("dense_block_search", binary, _settings())
    english = costs.estimate("dense_block_search", dataclasses.replace(binary, rescore=1000), _settings())
    all_messirve = dataclasses.replace(binary, queries=MESSIRVE_QUERIES)
    messirve = costs.estimate("dense_block_search", dataclasses.replace(all_messirve, rescore=1000), _settings())
    # English's 799 queries: one round (80 MB of pairs), the block read twice
    assert 0 < english.mem_mb - plain.mem_mb <= 200
    assert english.runtime > plain.runtime
    # MessIRve's 156,528 queries: about 1 GiB of pairs a round, 16 rounds
    assert 1_300 <= messirve.mem_mb - costs.estimate("dense_block_search", all_messirve, _settings()).mem_mb <= 1_700
    assert costs.block_search_mb(dataclasses.replace(all_messirve, rescore=1000), 4_000_000)[1] == 17


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


def test_a_jobs_disk_is_what_its_outputs_store() -> None:
    """Vectors are their components' bytes, exactly; the rest counts the stored bytes per row the reads count."""
    block = costs.Job(passages=1_000_000, dim=1024, kinds=("dense", "sparse"))
    vectors = 1_000_000 * (4 * 1024 + costs.SPARSE_BYTES + costs.DOCID_BYTES)
    assert costs.output_mb("encode_corpus", block, DEFAULTS) == -(-vectors // MB)
    half = costs.output_mb("encode_corpus", dataclasses.replace(block, kinds=("dense",)), _settings(dense_bytes=2))
    assert half == -(-1_000_000 * (2 * 1024 + costs.DOCID_BYTES) // MB)
    flat = costs.Job(passages=ENGLISH, dim=1024)
    assert costs.output_mb("dense_index", flat, DEFAULTS) == math.ceil(ENGLISH * 4 * 1024 / MB)
    run = costs.Job(passages=ENGLISH, queries=799)
    assert costs.output_mb("bm25_search", run, DEFAULTS) == math.ceil(799 * DEFAULTS.hits * costs.RUN_ROW_BYTES / MB)
    # a preprocessed corpus counted from its raw size before it exists, a model's download its checkpoint
    raw = costs.Job(input_mb=10_000)
    passages = int(10_000 * MB / costs.RAW_BYTES_PER_PASSAGE)
    assert costs.output_mb("preprocess_corpus", raw, DEFAULTS) == math.ceil(
        passages * (2 * costs.TEXT_BYTES + costs.DOCID_BYTES) / MB
    )
    assert costs.output_mb("download", costs.Job(input_mb=2_270.0), DEFAULTS) == 2_270
    assert costs.output_mb("evaluate", costs.Job(queries=799), DEFAULTS) == 1  # small outputs: 1 MB
    assert (
        costs.Settings.from_config(validate({"languages": ["sw"], "encoder": {"dense_dtype": "float16"}})).dense_bytes
        == 2
    )


def test_a_jobs_queries_are_its_partitions_or_every_one_it_covers() -> None:
    every, of_corpus = ["en", "sw", "yo"], ["sw"]
    assert costs.queried_partitions("bm25_search", {"part": "yo"}, every, of_corpus) == ["yo"]
    assert costs.queried_partitions("evaluate", {"system": "bm25"}, every, of_corpus) == every
    assert costs.queried_partitions("report", {}, every, of_corpus) == every
    assert costs.queried_partitions(
        "dense_block_search", {"corpus": "sw", "block": "00000-00009"}, every, of_corpus
    ) == ["sw"]
    assert costs.queried_partitions("bm25_index", {"corpus": "sw"}, every, of_corpus) == []


def test_a_checkpoints_rows_are_counted_once_it_is_there(tmp_path) -> None:
    """Until the preprocessed table exists, a FileNotFoundError naming the job's first input, which Snakemake
    shows as a request to be known (<TBD>) and evaluates again when the job starts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = tmp_path / "queries.parquet"
    with pytest.raises(FileNotFoundError) as err:
        costs.checkpoint_rows(str(table), ["resources/miracl/topics/sw/queries.parquet", "other"])
    assert err.value.filename == "resources/miracl/topics/sw/queries.parquet"
    with pytest.raises(FileNotFoundError) as err:
        costs.checkpoint_rows(str(table), [])
    assert err.value.filename == str(table)
    pq.write_table(pa.table({"qid": ["1", "2", "3"]}), table)
    assert costs.checkpoint_rows(str(table), []) == 3
