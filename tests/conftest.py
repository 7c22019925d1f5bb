"""Shared test helpers: paths, the real MIRACL dev files in ../shared, and Snakemake runs."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from miracl_eval import schemas

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample"
SHARED = Path(os.environ.get("MIRACL_EVAL_SHARED", REPO.parent / "shared"))
MIRACL_DEV = SHARED / "data" / "miracl-v1.0-dev"
#: every bundled sample corpus: the texts the tiny BGE-M3 checkpoint is built from
CORPORA = [*sorted((SAMPLE / "miracl").glob("*/corpus.jsonl")), SAMPLE / "messirve" / "corpus.jsonl"]


@pytest.fixture
def restore_logging():
    """run_stage configures the root logger for a job process; give the test session its own back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def miracl_dev() -> Path:
    if not MIRACL_DEV.is_dir():
        pytest.skip("../shared/data/miracl-v1.0-dev is absent")
    return MIRACL_DEV


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op thread: tiny matrices gain nothing from more, and OpenMP threads crawl on a busy machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory) -> Callable[[str], Path]:
    """``kind -> folder``: the tiny checkpoint of a kind built from the sample corpora (once per test session)."""
    from miracl_eval.tiny_model import build_tiny_checkpoint, texts_from_corpora

    built: dict[str, Path] = {}
    texts = list(texts_from_corpora(CORPORA))

    def get(kind: str) -> Path:
        if kind not in built:
            built[kind] = build_tiny_checkpoint(tmp_path_factory.mktemp(kind) / "tiny", texts, kind=kind)
        return built[kind]

    return get


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny_checkpoints) -> Path:
    """The tiny BGE-M3 checkpoint built from the sample corpora (built once per test session)."""
    return tiny_checkpoints("bge-m3")


#: languages whose sample texts cover Latin, Cyrillic, Arabic, CJK, Hangul, Devanagari and Thai script
SCRIPT_LANGS = ["th", "zh", "ja", "ar", "ko", "hi", "ru", "en", "es"]


def sample_queries(langs: Sequence[str] = SCRIPT_LANGS) -> list[str]:
    """The bundled sample's queries of ``langs``."""
    out = []
    for lang in langs:
        for line in (SAMPLE / "miracl" / lang / "topics.tsv").read_text(encoding="utf-8").splitlines():
            if line.strip():
                out.append(line.split("\t", 1)[1])
    return out


def sample_passages(langs: Sequence[str] = SCRIPT_LANGS, per_lang: int = 5) -> list[str]:
    """The first ``per_lang`` passages (``"{title} {text}"``) of each of ``langs`` in the bundled sample."""
    from miracl_eval.tiny_model import texts_from_corpora

    out = []
    for lang in langs:
        out.extend(list(texts_from_corpora([SAMPLE / "miracl" / lang / "corpus.jsonl"]))[:per_lang])
    return out


def copy_checkpoint(src: Path, dst: Path, skip: Iterable[str] = ()) -> Path:
    """A copy of a checkpoint folder without the files named in ``skip``."""
    dst.mkdir()
    for f in src.iterdir():
        if f.name not in set(skip):
            (dst / f.name).write_bytes(f.read_bytes())
    return dst


def write_vectors(path: Path, ids: list[str], vecs: np.ndarray, dtype: str = "float32", key: str = "docid") -> Path:
    """A dense vector Parquet file (``schemas.dense_schema``)."""
    schema = schemas.dense_schema(vecs.shape[1], dtype, key=key)
    values = pa.array(vecs.astype(dtype).ravel(), schema.field("vector").type.value_type)
    table = pa.table({key: ids, "vector": pa.FixedSizeListArray.from_arrays(values, vecs.shape[1])}, schema=schema)
    pq.write_table(table, path, compression="zstd")
    return path


def write_weights(path: Path, vectors: dict[str, dict[int, float]], key: str = "docid") -> Path:
    """A lexical weight Parquet file (``schemas.SPARSE``, or ``QUERY_SPARSE`` for ``key="qid"``)."""
    schema = schemas.SPARSE if key == "docid" else schemas.QUERY_SPARSE
    table = pa.table(
        {
            key: list(vectors),
            "token_ids": [list(v) for v in vectors.values()],
            "weights": [list(v.values()) for v in vectors.values()],
        },
        schema=schema,
    )
    pq.write_table(table, path)
    return path


def sample_config(languages: list[str] | None = None, file: str = "miracl.yaml", **overrides: Any) -> dict[str, Any]:
    """A bundled sample's config (``sample/{file}``) with absolute paths (usable from any working dir)."""
    cfg = yaml.safe_load((SAMPLE / file).read_text(encoding="utf-8"))
    cfg["source"] = {k: str(REPO / v) for k, v in cfg["source"].items()}
    if languages is not None:
        cfg["languages"] = languages
    cfg.update(overrides)
    return cfg


M3_LANGS = ["sw", "yo"]
M3_METHODS = ["bm25", "bge-m3/dense", "bge-m3/sparse", "bge-m3/multivec", "bge-m3/dense+sparse", "bge-m3/all"]
TINY_M3 = "resources/models/tiny-bge-m3"


def m3_config(languages: list[str] = M3_LANGS, m3: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    """The MIRACL sample with every method and the tiny checkpoint on the CPU (small shards and chunks).

    ``m3``: settings of the ``bge-m3`` model over the tiny checkpoint and a rerank depth of 20."""
    cfg = sample_config(languages, threads=1)
    cfg.update(
        methods=M3_METHODS,
        models={"bge-m3": {"checkpoint": TINY_M3, "rerank_depth": 20, **(m3 or {})}},
        hybrids={},
        encoder={
            "device": "cpu",
            "shard_size": 60,
            "batch_size": 8,
            "preload": True,
        },  # about 160 passages: three shards each
        query_chunk=7,  # 11-13 queries per language: two rerank chunks each
    )
    cfg.update(overrides)
    return cfg


def write_config(directory: Path, cfg: dict[str, Any], name: str = "config.yaml") -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def snakemake(
    workdir: Path, configfile: Path, *targets: str, args: tuple[str, ...] = (), check: bool = True, timeout: int = 1500
) -> subprocess.CompletedProcess[str]:
    """Run the workflow with ``python -m snakemake`` from another working directory."""
    cmd = [
        sys.executable, "-m", "snakemake", *targets,
        "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--configfile", str(configfile), "--cores", "2", *args,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


def planned_jobs(proc: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """The job counts of a (dry) run, from Snakemake's 'Job stats' table."""
    jobs: dict[str, int] = {}
    lines = (proc.stdout + proc.stderr).splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Job stats:"):
            for row in lines[i + 3 :]:
                parts = row.split()
                if len(parts) != 2 or parts[0] == "total":
                    break
                jobs[parts[0]] = int(parts[1])
            break
    return jobs


# ------------------------------------------------------------------ runs shared by several test modules
# Each is one real Snakemake run, made once per session; a module that builds more in it (a report,
# the published table) only adds outputs, and dry runs against it plan from what is there.

#: one language per analysis path: English default, Lucene language analyzers (ar, zh), Anserini's
#: whitespace mapping (sw), pretokenized (yo) and Thai. `make run` covers all 18 languages.
BM25_LANGS = ["ar", "en", "sw", "th", "yo", "zh"]


@pytest.fixture(scope="session")
def sample_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """BM25 on the sample (BM25_LANGS), with relative source paths, in a fresh working directory."""
    work = tmp_path_factory.mktemp("work")
    shutil.copytree(SAMPLE / "miracl", work / "data")
    cfg = sample_config(BM25_LANGS, threads=1, methods=["bm25"])
    cfg["source"] = {
        "corpus": "data/{lang}/corpus.jsonl",
        "topics": "data/{lang}/topics.tsv",
        "qrels": "data/{lang}/qrels.tsv",
    }
    snakemake(work, write_config(work, cfg), "results/miracl_ndcg.tsv")
    return work


@pytest.fixture(scope="session")
def m3_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every BGE-M3 method on the tiny checkpoint (``m3_config()``): the tables."""
    work = tmp_path_factory.mktemp("m3")
    snakemake(work, write_config(work, m3_config()), "results/miracl_ndcg.tsv")
    return work
