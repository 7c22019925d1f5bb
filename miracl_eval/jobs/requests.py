"""Resource requests that follow the data: each rule's memory (``mem_mb``) and run time (``runtime``).

A job's request is a floor plus per-unit costs times the job's units, declared once in :data:`COSTS`
(the figures come from ``benchmarks/scale.py``, which measures every stage at 100k to 1M passages;
see the docs' Scale and costs page, docs/reference/scale.md). The units follow from the job's sizes (:class:`Job`: its passages
and queries, counted from the preprocessed Parquet files, the vector dimension, the model's size) and
the workflow's settings (:class:`Settings`):

* ``searched``: queries x passages (the work of a Lucene search);
* ``run_rows``: queries x ``hits``; ``pairs``: queries x candidates (``2 hits`` for the dense+sparse
  union, ``rerank_depth`` for the dense top);
* ``index_mb``: the memory of the dense index a job builds or loads: its float32 vectors (flat), or
  its codes, centroids and training sample (IVF-PQ); an exact search block's vectors in its view's
  storage, and a rescoring view's rounds (:func:`block_search_mb`); ``gflop``: the index's arithmetic (IVF-PQ
  training and assignment; for a search, the vectors or codes it scans);
* ``model_pairs``: pairs x the checkpoint's GB (a reranker's forward passes grow with its size: a
  2.2 GB cross-encoder is about 1 GB-pair per pair, a 10 GB LLM reranker about 5);
* ``heap_mb``: the Java heap of an Anserini job (``java_heap``), which runs in a child process;
* ``read_mb``: what the job reads (:func:`read_mb`), added to every time request at
  :data:`READ_MB_PER_S` (English's exact search reads 134 GB of vectors: 22 minutes at 100 MB/s).

Each job also declares the disk its outputs take (``disk_mb``, :func:`output_mb`): the same stored bytes
per passage, vector and ranked row that the reads count, so a run's disk is known before it starts.

Stages that stream queries hold one chunk (:data:`HELD_QUERIES`; fusion one ``query_chunk``) and
spend time on all of them, so each unit is counted for memory and for time separately. Memory is the
estimate times :data:`MEM_MARGIN`, rounded up to 100 MB; run time (minutes) the estimate times
:data:`TIME_MARGIN` (slower nodes, a busy shared file system), rounded up. The rules ask for
``request("<estimate>")`` (``rules/common/requests.smk``); a profile's ``set-resources`` overrides any rule.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from miracl_eval import schemas
from miracl_eval.errors import ConfigError, InputError
from miracl_eval.schemas import (
    DENSE_BLOCK_MB,
    DENSE_MERGE_CHUNK,
    DENSE_SEARCH_BATCH,
    EVAL_CHUNK,
    QUERY_CHUNK,
    RESCORE_PAIR_BYTES,
)
from miracl_eval.shards import block_rows

UNITS = (
    "passages", "queries", "searched", "run_rows", "pairs", "index_mb", "gflop", "heap_mb", "checkpoint_mb",
    "input_mb", "read_mb", "model_pairs", "batch_mb",
)  # fmt: skip
#: CPUs a GPU encoding job needs beside its tokenizer threads: the model's thread and the writer's
ENCODE_EXTRA_THREADS = 2
MEM_MARGIN = 1.3
TIME_MARGIN = 3.0
#: the margin on an API job's paced time (the pace is a floor the job cannot beat; a margin for the 429s of
#: other users of the key and for a plan that under-counts)
PACE_MARGIN = 1.5
#: tokens an API model's text is assumed to take before its cost plan exists (a dry run, a first run), by role,
#: and a passage of each MIRACL corpus by its language: the mean of cl100k_base tokens a passage of the bundled
#: sample (title and text joined), rounded up to ten (benchmarks/api_speed.py counts them: English 54, Telugu
#: 395); another corpus's passages 150
API_TOKENS_PER_TEXT: Mapping[str, float] = {"passage": 150.0, "query": 30.0}
API_TOKENS_PER_PASSAGE: Mapping[str, float] = {
    "ar": 140, "bn": 280, "de": 80, "en": 60, "es": 70, "fa": 140, "fi": 110, "fr": 70, "hi": 180, "id": 70,
    "ja": 100, "ko": 90, "ru": 120, "sw": 80, "te": 400, "th": 160, "yo": 140, "zh": 100,
}  # fmt: skip
MB = 1 << 20
#: queries whose hits a streamed stage holds at once (its query chunk)
HELD_QUERIES: Mapping[str, int] = {
    "bm25_search": QUERY_CHUNK,
    "sparse_search": QUERY_CHUNK,
    "dense_search": DENSE_SEARCH_BATCH,
    "evaluate": EVAL_CHUNK,
}
#: estimates whose job covers every partition (its queries are all of them)
ALL_PARTITIONS = frozenset({"evaluate", "report"})
#: estimates whose job runs a model: its checkpoint's size counts, and it runs on a GPU when the encoders do
MODEL_ESTIMATES = frozenset({"encode_corpus", "encode_queries", "rerank_components", "reranker_scores"})
#: estimates of an API model's encoding jobs: their time is never less than their pace allows (:class:`Pace`)
API_ESTIMATES = frozenset({"encode_api", "encode_api_queries"})
#: estimates with one cost per dense index type (``dense_index:flat``, ...)
PER_INDEX_TYPE = frozenset({"dense_index", "dense_search"})
#: estimates whose job holds dense vectors and searches them (``index_mb``, ``gflop``)
DENSE_ESTIMATES = PER_INDEX_TYPE | {"dense_block_search"}
#: estimates whose job runs on a GPU when the encoders do (a model's, and the exact search's torch products)
GPU_ESTIMATES = MODEL_ESTIMATES | {"dense_block_search"}
#: MB a second that a job reads its inputs at (a shared file system's share of one job): every job's
#: time request adds its reads (:func:`read_mb`) at this rate
READ_MB_PER_S = 100.0
#: stored bytes a passage takes in what the stages read (zstd Parquet; MIRACL's passages average about
#: 100 words): its title and text, its docid, its lexical weights (about 60 tokens: an int32 id and a
#: float32 weight each), and the postings a Lucene search reads for it (an upper bound)
TEXT_BYTES = 400
DOCID_BYTES = 12
SPARSE_BYTES = 500
POSTING_BYTES = 150
#: stored bytes of a ranked row (a run's Parquet row and its TREC line; a block's or a chunk's candidate
#: with its scores): qid, docid, rank and score in zstd Parquet about 20, the TREC line about 45
RUN_ROW_BYTES = 65
SCORE_ROW_BYTES = 24
#: k-means iterations of Faiss's IVF training (its default)
KMEANS_ITERATIONS = 25
#: vector dimension assumed before the first vector file exists (a dry run); the job itself reads it
DEFAULT_DIM = 1024
#: model size assumed when the checkpoint is neither a local folder nor in the hub cache
DEFAULT_CHECKPOINT_MB = 2_300.0
#: bytes per dimension of a vector in each storage of a dense view (miracl_eval.faiss.storage.bytes_per_vector)
STORAGE_BYTES: Mapping[str, float] = {"float32": 4.0, "float16": 2.0, "int8": 1.0, "binary": 1 / 8}
#: a rescoring view's candidate pairs per query, for its ties of the last hit (an allowance)
RESCORE_TIES = 1.5
#: raw corpus bytes per passage assumed to count passages before preprocessing (gzipped MIRACL JSONL
#: has about 250, plain JSONL about 700: fewer bytes per passage count more passages, the safe side)
RAW_BYTES_PER_PASSAGE = 200


@dataclass(frozen=True)
class Cost:
    """Floor plus per-unit costs of one estimate: MB of memory, seconds of one thread, per unit.

    ``parallel``: the per-unit time is divided by the job's threads. ``java``: the Java heap is added
    to the memory. ``gpu_seconds``: per-unit seconds used instead of ``seconds`` when the job has a GPU.
    """

    mem_mb: float
    minutes: float
    mem: Mapping[str, float] = field(default_factory=dict)
    seconds: Mapping[str, float] = field(default_factory=dict)
    gpu_seconds: Mapping[str, float] | None = None
    parallel: bool = False
    java: bool = False

    def __post_init__(self) -> None:
        unknown = {*self.mem, *self.seconds, *(self.gpu_seconds or {})} - set(UNITS)
        if unknown:
            raise ValueError(f"unknown unit(s) {', '.join(sorted(unknown))}; known: {', '.join(UNITS)}")


#: per-estimate costs (each rule names one); measured by benchmarks/scale.py on 2 cores (docs/reference/scale.md)
COSTS: Mapping[str, Cost] = {
    "download": Cost(1000, 240),
    "small": Cost(500, 5),
    "preprocess_corpus": Cost(800, 2, mem={"passages": 16e-6}, seconds={"passages": 60e-6}),
    "preprocess_topics": Cost(500, 2, mem={"input_mb": 20.0}, seconds={"input_mb": 2.0}),
    # the corpus's docids streamed in batches against the partition's judgements
    "judged_not_in_corpus": Cost(800, 2, mem={"queries": 0.05}, seconds={"passages": 2e-6}),
    "bm25_index": Cost(700, 2, seconds={"passages": 1.2e-3}, parallel=True, java=True),
    "bm25_search": Cost(900, 2, mem={"run_rows": 4e-4}, seconds={"searched": 2e-8, "run_rows": 4e-6}, parallel=True),
    "sparse_index": Cost(700, 2, seconds={"passages": 1.5e-3}, parallel=True, java=True),
    "sparse_search": Cost(900, 2, mem={"run_rows": 4e-4}, seconds={"searched": 2e-8, "run_rows": 4e-6}, parallel=True),
    # a block of shards, streamed: memory is the model and the pipeline's windows, whatever the block's
    # size; time on a GPU is per passage at 500/s (an older GPU; an H200 ran BGE-M3-large-shaped encoding at 2,569/s)
    "encode_corpus": Cost(
        3000,
        3,
        mem={"checkpoint_mb": 2.0},
        seconds={"passages": 0.5},
        gpu_seconds={"passages": 2e-3},
    ),
    "encode_queries": Cost(
        1500,
        3,
        mem={"checkpoint_mb": 2.0, "queries": 0.01},
        seconds={"queries": 0.1},
        gpu_seconds={"queries": 0.002},
    ),
    # an API model's encodings of a block of shards, or of a partition's queries: requests in flight, no model
    # here (about 500 texts/s a job at 8 requests of 256 texts in flight, each answered within 4 s)
    "encode_api": Cost(1000, 3, seconds={"passages": 2e-3}),
    "encode_api_queries": Cost(1000, 3, mem={"queries": 0.01}, seconds={"queries": 2e-3}),
    # its plan tokenizes up to 200k passages a corpus
    "api_cost_plan": Cost(2000, 20),
    # int8 storage's ranges: every passage vector of the corpus read once (float16 at 1,024 dimensions: 2 kB
    # each), a batch at a time, its sample's ranges taken as it comes (miracl_eval.faiss.blocks.calibrate): a
    # batch held as read and as float32 (65,536 x 1,024: 512 MB), whatever calibration_passages
    "int8_ranges": Cost(1000, 2, mem={"batch_mb": 1.0}, seconds={"passages": 5e-5}),
    "dense_index:flat": Cost(2000, 2, mem={"index_mb": 1.1}, seconds={"passages": 2e-4}),
    "dense_index:hnsw": Cost(1000, 2, mem={"index_mb": 1.2}, seconds={"passages": 5e-3}, parallel=True),
    "dense_index:ivfpq": Cost(1000, 2, mem={"index_mb": 1.2}, seconds={"passages": 2e-4, "gflop": 0.05}, parallel=True),
    "dense_search:flat": Cost(
        1000,
        2,
        mem={"index_mb": 1.05, "passages": 60e-6, "run_rows": 4e-4},
        seconds={"gflop": 0.05, "run_rows": 4e-6},
        parallel=True,
    ),
    "dense_search:hnsw": Cost(
        1000,
        2,
        mem={"index_mb": 1.05, "passages": 60e-6, "run_rows": 4e-4},
        seconds={"gflop": 0.05, "run_rows": 4e-6},
        parallel=True,
    ),
    "dense_search:ivfpq": Cost(
        1000,
        2,
        mem={"index_mb": 1.05, "passages": 60e-6, "run_rows": 4e-4},
        seconds={"gflop": 0.2, "run_rows": 4e-6},
        parallel=True,
    ),
    # exact search of one block: its vectors, a query batch's scores (1 GB),
    # every query of its corpus against every passage of the block
    "dense_block_search": Cost(
        2600,
        2,
        mem={"index_mb": 1.05, "queries": 0.01},
        seconds={"gflop": 0.05},
        gpu_seconds={"gflop": 2e-4},
        parallel=True,
    ),
    # the blocks' candidates of a chunk of queries, ranked (rank_table)
    "dense_merge": Cost(1000, 2, mem={"pairs": 1.5e-4}, seconds={"pairs": 2e-6}),
    "union_components": Cost(2000, 2, mem={"pairs": 2e-4}, seconds={"passages": 5e-5, "pairs": 3e-6}),
    # one encoding of each candidate passage (the queries' groups of tokens held: at most 1 GiB); the
    # corpus's docids looked up, the candidates' texts read (read_mb)
    "rerank_components": Cost(
        2500,
        3,
        mem={"checkpoint_mb": 2.0, "pairs": 1e-3},
        seconds={"passages": 2e-6, "pairs": 0.05},
        gpu_seconds={"passages": 2e-6, "pairs": 1e-3},
    ),
    # a reranker over a query chunk's top hits (the model, the pairs' texts): one forward pass per pair of
    # about 200 tokens (MIRACL's passages), 20 ms per GB of checkpoint on a CPU thread pool, 0.5 ms on a GPU
    "reranker_scores": Cost(
        2500,
        3,
        mem={"checkpoint_mb": 2.0, "pairs": 2e-3},
        seconds={"model_pairs": 0.02},
        gpu_seconds={"model_pairs": 5e-4},
    ),
    # the first stage's run streamed, its top hits joined with their scores and ranked
    "reranked_run": Cost(800, 2, mem={"pairs": 3e-4}, seconds={"run_rows": 2e-6, "pairs": 3e-6}),
    "fuse": Cost(600, 2, mem={"pairs": 3e-4}, seconds={"pairs": 2e-6}),
    "hybrid": Cost(800, 2, mem={"pairs": 2e-3}, seconds={"pairs": 2e-5}),
    "evaluate": Cost(600, 2, mem={"run_rows": 3e-4}, seconds={"run_rows": 3e-6}),
    "report": Cost(1000, 10, mem={"queries": 0.01}, seconds={"queries": 0.01}),
}


@dataclass(frozen=True)
class Settings:
    """The workflow settings that the requests depend on, from the validated config (whose schema
    holds every default)."""

    hits: int
    java_heap: str
    query_chunk: int
    shard_size: int
    #: whether model jobs run on a GPU (``encoder.device`` is not ``cpu``)
    gpu: bool
    index_type: str
    ivf_lists: int
    pq_m: int
    nprobe: int
    hnsw_m: int
    hnsw_ef_search: int
    #: bytes of a stored dense vector's component (``encoder.dense_dtype``: float32 4, float16 2)
    dense_bytes: int = 4

    @classmethod
    def from_config(cls, config: Mapping) -> Settings:
        index = config["dense_index"]
        return cls(
            hits=int(config["hits"]),
            java_heap=str(config["java_heap"]),
            query_chunk=int(config["query_chunk"]),
            shard_size=int(config["encoder"]["shard_size"]),
            gpu=config["encoder"]["device"] != "cpu",
            index_type=str(index["type"]),
            ivf_lists=int(index["ivf_lists"]),
            pq_m=int(index["pq_m"]),
            nprobe=int(index["nprobe"]),
            hnsw_m=int(index["hnsw_m"]),
            hnsw_ef_search=int(index["hnsw_ef_search"]),
            dense_bytes=2 if config["encoder"].get("dense_dtype") == "float16" else 4,
        )


@dataclass(frozen=True)
class Pace:
    """What holds one API encoding job back however fast the API answers: its share of the model's
    ``tokens_per_minute`` and ``requests_per_minute`` (each divided among ``api_jobs``), at the tokens a
    text takes (from the model's cost plan), ``inputs_per_request`` and ``tokens_per_request``."""

    tokens_per_text: float
    tokens_per_minute: float | None = None
    requests_per_minute: float | None = None
    inputs_per_request: int = 1
    tokens_per_request: float = math.inf

    def seconds(self, texts: int) -> float:
        """The fewest seconds ``texts`` texts take at this pace."""
        out = 0.0
        if self.tokens_per_minute:
            out = max(out, 60.0 * texts * self.tokens_per_text / self.tokens_per_minute)
        if self.requests_per_minute:  # requests hold inputs_per_request texts, or fewer when tokens_per_request binds
            per_request = max(1.0, min(self.inputs_per_request, self.tokens_per_request / self.tokens_per_text))
            out = max(out, 60.0 * math.ceil(texts / per_request) / self.requests_per_minute)
        return out


def api_pace(spec: Mapping[str, object], role: str, plan: str | os.PathLike[str] | None, part: str) -> Pace:
    """The :class:`Pace` of an API model's encoding job (``spec``: the resolved model; ``role`` ``passage``
    or ``query``; ``part`` the plan's part, ``corpus en`` or ``queries en``): tokens a text from the model's
    cost plan ``plan`` when it exists and has the part, else :data:`API_TOKENS_PER_PASSAGE` or
    :data:`API_TOKENS_PER_TEXT` (cut to the max length)."""
    limit = float(spec.get(f"{role}_max_length") or math.inf)  # type: ignore[arg-type]
    assumed = API_TOKENS_PER_PASSAGE.get(part.removeprefix("corpus "), API_TOKENS_PER_TEXT[role])
    per_text = min(limit, assumed if role == "passage" else API_TOKENS_PER_TEXT[role])
    if plan is not None and os.path.exists(plan):
        try:
            with open(plan, encoding="utf-8") as f:
                counted = json.load(f).get("parts", {}).get(part)
        except (ValueError, AttributeError) as err:
            raise InputError(plan, f"not a cost plan ({err}); remove it to plan again") from None
        if isinstance(counted, dict) and counted.get("inputs"):
            per_text = float(counted["tokens"]) / float(counted["inputs"])
    jobs = max(1, int(spec.get("api_jobs") or 1))  # type: ignore[call-overload]
    tpm, rpm = spec.get("tokens_per_minute"), spec.get("requests_per_minute")
    return Pace(
        tokens_per_text=per_text,
        tokens_per_minute=float(tpm) / jobs if tpm else None,  # type: ignore[arg-type]
        requests_per_minute=float(rpm) / jobs if rpm else None,  # type: ignore[arg-type]
        inputs_per_request=int(spec.get("inputs_per_request") or 1),  # type: ignore[call-overload]
        tokens_per_request=float(spec.get("tokens_per_request") or math.inf),  # type: ignore[arg-type]
    )


@dataclass(frozen=True)
class Job:
    """The sizes of one job: its passages (the corpus's, or an encoding shard's) and queries (the
    partition's, or a query chunk's), and what else its estimate needs."""

    passages: int = 0
    queries: int = 0
    dim: int = DEFAULT_DIM
    threads: int = 1
    gpu: bool = False
    checkpoint_mb: float = 0.0
    input_mb: float = 0.0
    #: candidate passages per query of component scoring, fusion and hybrids
    candidates: int = 0
    #: what an encoding job stores (``dense``, ``sparse``): its outputs' size
    kinds: tuple[str, ...] = ()
    #: an exact search block's view: its storage, its dimensions (0: the vectors') and its rescore depth
    storage: str = "float32"
    view_dim: int = 0
    rescore: int = 0
    #: an API encoding job's pace (its texts: the block's passages, or the partition's queries)
    pace: Pace | None = None


@dataclass(frozen=True)
class Request:
    mem_mb: int
    runtime: int  #: minutes


def heap_mb(heap: str) -> float:
    """MB of a Java heap setting such as ``4g`` or ``512m``."""
    m = re.fullmatch(r"(\d+)([kKmMgG])", heap)
    if not m:
        raise ConfigError("java_heap", f"{heap!r} is not a Java heap size such as 4g or 512m")
    return int(m[1]) * {"k": 1 / 1024, "m": 1, "g": 1024}[m[2].lower()]


def ivf_lists(settings: Settings, passages: int) -> int:
    """The lists an IVF-PQ index of ``passages`` vectors gets (:func:`miracl_eval.schemas.ivf_list_count`)."""
    return schemas.ivf_list_count(settings.ivf_lists, passages)


def dense_index_mb(settings: Settings, passages: int, dim: int) -> float:
    """Memory of a Faiss index of ``passages`` vectors of ``dim`` floats, built or loaded whole (MB).

    flat: the float32 vectors; HNSW: the vectors and ``2 M`` neighbour ids each; IVF-PQ: ``pq_m``
    code bytes and an 8-byte id per vector, the centroids, and the training sample (``max(64 lists,
    10000)`` vectors, as :func:`miracl_eval.faiss.index.build_dense_index` draws it).
    """
    vector = 4 * dim
    if settings.index_type == "flat":
        total = passages * vector
    elif settings.index_type == "hnsw":
        total = passages * (vector + 2 * settings.hnsw_m * 4)
    elif settings.index_type == "ivfpq":
        lists = ivf_lists(settings, passages)
        sample = min(passages, max(64 * lists, 10_000))
        total = passages * (settings.pq_m + 8) + (lists + sample) * vector
    else:
        raise ConfigError("dense_index.type", f"unknown index type {settings.index_type!r}")
    return total / MB


def block_search_mb(job: Job, passages: int) -> tuple[float, int]:
    """``(MB held, reads of the block)`` of an exact search block (:func:`miracl_eval.faiss.blocks.block_search`):
    its vectors in the view's storage at the view's dimensions (binary ``ceil(d / 8)`` bytes), and for a
    view that rescores its rounds of queries and candidate pairs (at most :data:`DENSE_BLOCK_MB` and a
    query chunk's), each round reading the block's vectors again."""
    dim = job.view_dim or job.dim
    held = passages * math.ceil(dim * STORAGE_BYTES[job.storage])
    if not job.rescore:
        return held / MB, 1
    per_query = job.rescore * RESCORE_TIES * RESCORE_PAIR_BYTES + 2 * 4 * dim
    rounds = max(1, math.ceil(job.queries * per_query / (DENSE_BLOCK_MB * MB)))
    return (held + min(job.queries, DENSE_BLOCK_MB * MB / per_query + DENSE_MERGE_CHUNK) * per_query) / MB, 1 + rounds


def dense_gflop(name: str, settings: Settings, passages: int, queries: int, dim: int) -> float:
    """Arithmetic of a dense index job, in 1e9 multiply-adds: building an IVF-PQ index (k-means
    training on the sample, assigning every vector to a list and to its PQ codes), or searching
    (flat: every vector; IVF-PQ: the centroids and ``nprobe`` lists of codes; HNSW: about
    ``ef_search x M`` vectors per query)."""
    lists = ivf_lists(settings, passages)
    if name == "dense_index":
        if settings.index_type != "ivfpq":
            return 0.0
        sample = min(passages, max(64 * lists, 10_000))
        return (KMEANS_ITERATIONS * sample * lists * dim + passages * (lists + 256) * dim) / 1e9
    per_query: float
    if settings.index_type == "flat":
        per_query = passages * dim
    elif settings.index_type == "ivfpq":
        per_query = lists * dim + passages * min(settings.nprobe, lists) / lists * settings.pq_m
    else:
        per_query = settings.hnsw_ef_search * settings.hnsw_m * dim
    return queries * per_query / 1e9


def read_mb(name: str, job: Job, settings: Settings, passages: int) -> float:
    """MB a job of estimate ``name`` reads, at most: the raw corpus it preprocesses, the texts it
    encodes or indexes, the vectors of its block or index, the shards its candidates live in (every
    one, at worst), the corpus's docids and its candidates' texts (the rerank: no stored vector)."""
    vectors = passages * 4 * job.dim
    reads = {
        "preprocess_corpus": job.input_mb * MB,
        "judged_not_in_corpus": passages * DOCID_BYTES,
        "encode_corpus": passages * TEXT_BYTES,
        "encode_api": passages * TEXT_BYTES,
        "bm25_index": passages * TEXT_BYTES,
        "sparse_index": passages * SPARSE_BYTES,
        "bm25_search": passages * POSTING_BYTES,
        "sparse_search": passages * POSTING_BYTES,
        "dense_index": vectors,
        "dense_search": dense_index_mb(settings, passages, job.dim) * MB,
        "dense_block_search": vectors * block_search_mb(job, passages)[1],
        "union_components": passages * (4 * job.dim + SPARSE_BYTES + DOCID_BYTES),
        "rerank_components": passages * (TEXT_BYTES + DOCID_BYTES),
        "reranker_scores": passages * DOCID_BYTES + job.queries * job.candidates * TEXT_BYTES,
    }
    return reads.get(name, 0.0) / MB


def output_mb(name: str, job: Job, settings: Settings) -> int:
    """MB that the outputs of a job of estimate ``name`` take on disk (its ``disk_mb``), at least 1: a
    corpus's download its passages' texts and a model's its checkpoint (``input_mb``), a preprocessed corpus
    its texts twice (title and text, and the joined contents), an encoding its vectors (``dim`` components of
    ``settings.dense_bytes``) and lexical weights (``job.kinds``), an index its postings or vectors, a
    search, fusion or rerank its ranked rows (``hits``, or ``candidates``, a query), scoring its scored
    pairs. Small outputs (topics, reports, per-query results) count 1 MB."""
    q, passages = job.queries, job.passages
    if name == "preprocess_corpus":  # counted from the raw corpus's size, as its time and memory are
        passages = passages or int(job.input_mb * MB / RAW_BYTES_PER_PASSAGE)
    vector = settings.dense_bytes * job.dim
    encoded = (vector if "dense" in job.kinds else 0) + (SPARSE_BYTES if "sparse" in job.kinds else 0)
    ranked = q * settings.hits * RUN_ROW_BYTES
    writes = {
        "download": passages * TEXT_BYTES + job.input_mb * MB,
        "preprocess_corpus": passages * (2 * TEXT_BYTES + DOCID_BYTES),
        "bm25_index": passages * (POSTING_BYTES + DOCID_BYTES),
        "sparse_index": passages * (SPARSE_BYTES + DOCID_BYTES),
        "encode_corpus": passages * (encoded + DOCID_BYTES),
        "encode_queries": q * encoded,
        "dense_index": dense_index_mb(settings, passages, job.dim) * MB if passages else 0,
        "bm25_search": ranked,
        "sparse_search": ranked,
        "dense_search": ranked,
        "dense_merge": ranked,
        "dense_block_search": q * settings.hits * SCORE_ROW_BYTES,
        "union_components": q * job.candidates * SCORE_ROW_BYTES,
        "rerank_components": q * job.candidates * SCORE_ROW_BYTES,
        "reranker_scores": q * job.candidates * SCORE_ROW_BYTES,
        "reranked_run": q * job.candidates * RUN_ROW_BYTES,
        "fuse": q * job.candidates * RUN_ROW_BYTES,
        "hybrid": q * job.candidates * RUN_ROW_BYTES,
    }
    return max(1, math.ceil(writes.get(name, 0) / MB))


def units(name: str, job: Job, settings: Settings) -> tuple[dict[str, float], dict[str, float]]:
    """The units of a job of estimate ``name``: ``(for its memory, for its time)``.

    Streamed stages hold the hits of one query chunk (:data:`HELD_QUERIES`), fusion the candidates
    of one ``query_chunk``. Before preprocessing, passages are counted from the raw corpus's size.
    """
    q = job.queries
    passages = job.passages or int(job.input_mb * MB / RAW_BYTES_PER_PASSAGE)
    dense = name in DENSE_ESTIMATES
    time = {
        "passages": float(passages),
        "queries": float(q),
        "searched": float(q) * passages,
        "run_rows": float(q * settings.hits),
        "pairs": float(q * job.candidates),
        "index_mb": (
            block_search_mb(job, passages)[0]
            if name == "dense_block_search"
            else dense_index_mb(settings, passages, job.dim)
            if dense
            else 0.0
        ),
        "gflop": dense_gflop(name, settings, passages, q, job.dim) if dense else 0.0,
        "heap_mb": heap_mb(settings.java_heap),
        "checkpoint_mb": job.checkpoint_mb,
        "model_pairs": float(q * job.candidates) * job.checkpoint_mb / 1024,
        "input_mb": job.input_mb,
        "read_mb": read_mb(name, job, settings, passages),
        # a batch of stored vectors as read and as float32 (a job that streams its vectors)
        "batch_mb": 2.0 * min(schemas.BATCH_ROWS, passages) * job.dim * 4 / MB,
    }
    mem = dict(time)
    if name in HELD_QUERIES:
        mem["run_rows"] = float(min(q, HELD_QUERIES[name]) * settings.hits)
    if name == "fuse":
        mem["pairs"] = float(min(q, settings.query_chunk) * job.candidates)
    if name == "dense_merge":
        mem["pairs"] = float(min(q, DENSE_MERGE_CHUNK) * job.candidates)
    return mem, time


def cost_of(name: str, settings: Settings) -> Cost:
    key = f"{name}:{settings.index_type}" if name in PER_INDEX_TYPE else name
    try:
        return COSTS[key]
    except KeyError:
        raise ValueError(f"no cost declared for {key!r}; known: {', '.join(COSTS)}") from None


def estimate(name: str, job: Job, settings: Settings) -> Request:
    """The ``mem_mb`` and ``runtime`` (minutes) to ask for one job of estimate ``name``."""
    cost = cost_of(name, settings)
    mem_units, time_units = units(name, job, settings)
    mem = cost.mem_mb + sum(per * mem_units[u] for u, per in cost.mem.items())
    if cost.java:
        mem += mem_units["heap_mb"]
    per_unit = cost.gpu_seconds if job.gpu and cost.gpu_seconds is not None else cost.seconds
    seconds = sum(per * time_units[u] for u, per in per_unit.items())
    if cost.parallel:
        seconds /= max(1, job.threads)
    seconds += time_units["read_mb"] / READ_MB_PER_S  # reading is not divided among threads
    runtime = int(math.ceil((cost.minutes + seconds / 60) * TIME_MARGIN))
    if job.pace is not None:  # an API job: never less than its share of the provider's limits allows
        paced = job.pace.seconds(job.queries if name == "encode_api_queries" else job.passages)
        runtime = max(runtime, int(math.ceil((cost.minutes + paced / 60) * PACE_MARGIN)))
    return Request(mem_mb=int(math.ceil(mem * MEM_MARGIN / 100) * 100), runtime=runtime)


def _share(total: int, size: int, index: int) -> int:
    """The size of part ``index`` of ``total`` items cut into parts of ``size``."""
    return max(0, min(size, total - index * size))


def job_for(
    name: str,
    wildcards: Mapping[str, str],
    threads: int,
    settings: Settings,
    *,
    passages: int = 0,
    queries: int = 0,
    dim: int = DEFAULT_DIM,
    input_mb: float = 0.0,
    checkpoint_mb: float = 0.0,
    candidates: int = 0,
    kinds: tuple[str, ...] = (),
    storage: str = "float32",
    view_dim: int = 0,
    rescore: int = 0,
    pace: Pace | None = None,
) -> Job:
    """The :class:`Job` of one job of estimate ``name``, from what the workflow knows before it runs.

    ``passages`` and ``queries`` are the whole corpus's and partition's (or, for a job over every
    partition, such as an evaluation or the report, all partitions') preprocessed rows; a job over a block of
    shards (an encoding job, a model's or an API's, and an exact search job) covers its block of the passages,
    and a scoring job its chunk of the queries (from the ``block`` and ``chunk`` wildcards). A model's job runs on a GPU
    when the encoders do (``settings.gpu``).
    """
    if "block" in wildcards:  # a job over a block of shards (encoding, local or by an API; exact search)
        passages = block_rows(wildcards["block"], passages, settings.shard_size)
    if "chunk" in wildcards:
        queries = _share(queries, settings.query_chunk, int(wildcards["chunk"]))
    return Job(
        passages=passages,
        queries=queries,
        dim=dim,
        threads=threads,
        gpu=settings.gpu and name in GPU_ESTIMATES,
        checkpoint_mb=checkpoint_mb if name in MODEL_ESTIMATES else 0.0,
        input_mb=input_mb,
        candidates=candidates,
        kinds=kinds,
        storage=storage,
        view_dim=view_dim,
        rescore=rescore,
        pace=pace,
    )


def queried_partitions(
    name: str, wildcards: Mapping[str, str], partitions: Sequence[str], of_corpus: Sequence[str]
) -> list[str]:
    """The partitions whose queries a job of estimate ``name`` counts: its own (a ``part`` wildcard), every one
    of the run (``partitions``: an evaluation, a report page, :data:`ALL_PARTITIONS`), those that search its
    corpus (``of_corpus``: an exact search block searches them all at once), else none."""
    if "part" in wildcards:
        return [wildcards["part"]]
    if name in ALL_PARTITIONS:
        return list(partitions)
    if name == "dense_block_search":
        return list(of_corpus)
    return []


def checkpoint_rows(path: str, inputs: Sequence[str]) -> int:
    """Rows of a checkpoint's Parquet output (a preprocessed corpus or partition) that a job's request counts.
    Until it exists (a dry run), a FileNotFoundError naming the job's first input (``inputs``; else ``path``):
    Snakemake then shows the request as ``<TBD>`` and evaluates it again when the job starts."""
    if not os.path.exists(path):
        missing = str(inputs[0]) if len(inputs) else path
        raise FileNotFoundError(errno.ENOENT, f"{path} does not exist yet", missing)
    return schemas.count_rows(path)


def path_mb(path: str | os.PathLike[str]) -> float:
    """Size of a file, or of every file under a folder, in MB (0 when it does not exist)."""
    p = Path(path)
    if p.is_file():
        return p.stat().st_size / MB
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) / MB if p.is_dir() else 0.0


def checkpoint_mb(checkpoint: str) -> float:
    """Size of a model checkpoint: its local folder, else its copy in the Hugging Face hub cache,
    else :data:`DEFAULT_CHECKPOINT_MB`."""
    if os.path.isdir(checkpoint):
        return path_mb(checkpoint)
    from huggingface_hub.constants import HF_HUB_CACHE

    size = path_mb(Path(HF_HUB_CACHE) / f"models--{checkpoint.replace('/', '--')}" / "blobs")
    return size if size > 0 else DEFAULT_CHECKPOINT_MB


def encode_threads(tokenizer_workers: int, gpu: bool, cpu_threads: int) -> int:
    """The CPUs an encoding job asks for: on a GPU, ``encoder.tokenizer_workers`` and the model's and
    the writer's threads; on the CPU, the configured ``threads`` (torch's)."""
    return tokenizer_workers + ENCODE_EXTRA_THREADS if gpu else cpu_threads


def tokenizer_workers(job_threads: int, gpu: bool) -> int:
    """The tokenizer threads of an encoding job with ``job_threads`` CPUs: on a GPU all but the model's
    and the writer's (the inverse of :func:`encode_threads`, so that a cap on the job's threads, from
    ``--cores``, ``--set-threads`` or a profile, caps its workers too); on the CPU one, beside torch's."""
    return max(1, job_threads - ENCODE_EXTRA_THREADS) if gpu else 1
