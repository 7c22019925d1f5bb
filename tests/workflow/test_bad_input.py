"""Bad input as a user gives it to the workflow (#45): a config error stops it at start-up naming the key, a
view wider than the vectors stops its jobs naming the key and the shard, MTEB's Parquet queries and qrels read
as local files; each failure with a non-zero exit and no output left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from miracl_eval import schemas
from tests.helpers import SAMPLE, TINY_M3, sample_config, snakemake, write_config

TINY = {"family": "dense", "checkpoint": TINY_M3, "pooling": "cls", "normalize": True}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--config", "reproduction={sources: {pyserini-2cr: 0.005}}"),
         "config key 'reproduction.sources.pyserini-2cr': no published source has this id"),
        (("--config", "reproduction={tolerance: 0.5}"), "config key 'reproduction.tolerance': 0.5 is 50 points"),
        (("--config", "models={m: {family: dense, checkpoint: x/y, pooling: cls, normalize: true, "
                      "query_template: '{{query}}'}}", "methods=[m/dense]"),
         "config key 'models.m.query_template': holds '{{'"),
        (("--config", "models={m: {family: dense, checkpoint: x/y, pooling: cls, normalize: true}, "
                      "v: {view_of: m, storage: binary, calibration_passages: 10}}", "methods=[v/dense]"),
         "config key 'models.v.calibration_passages': calibrates int8 storage only"),
    ],
    ids=["unknown-source", "tolerance-in-points", "escaped-query", "calibration-without-int8"],
)  # fmt: skip
def test_config_errors_stop_the_workflow_naming_the_key(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    cfg = write_config(tmp_path, sample_config(["yo"], methods=["bm25"], hybrids={}, rerankers={}))
    proc = snakemake(tmp_path, cfg, "results/miracl_ndcg.tsv", args=("-n", *args), check=False, timeout=300)
    assert proc.returncode != 0 and message in proc.stdout + proc.stderr
    assert not (tmp_path / "resources").exists()


def test_a_view_wider_than_its_vectors_fails_its_jobs_naming_the_key_and_the_shard(tmp_path: Path) -> None:
    """Known only once the model has encoded (the tiny model's 32 dimensions): the search and the int8 ranges'
    job fail with the key and the shard, the full model's row is computed, the views leave nothing."""
    views = {"tiny@wide": {"view_of": "tiny", "dimensions": 4096}, "tiny@wide8": {"view_of": "tiny", "dimensions": 4096, "storage": "int8"}}  # fmt: skip
    cfg = sample_config(
        ["yo"], threads=1, models={"tiny": TINY, **views}, methods=["tiny/dense", "tiny@wide/dense", "tiny@wide8/dense"],
        hybrids={}, rerankers={}, encoder={"device": "cpu", "shard_size": 100, "batch_size": 8},
    )  # fmt: skip
    targets = [f"runs/miracl/yo/{m}/dense.parquet" for m in ("tiny", "tiny@wide", "tiny@wide8")]
    proc = snakemake(tmp_path, write_config(tmp_path, cfg), *targets, args=("--keep-going",), check=False, timeout=900)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    shard = "resources/miracl/encoded/tiny/corpus/yo/dense/"
    for view in views:
        assert f"models.{view}.dimensions is 4096, more than the 32 dimensions of the vectors" in text, view
        assert not (tmp_path / f"runs/miracl/yo/{view}").exists()
        assert not list((tmp_path / "resources/miracl/search").glob(f"{view}/**/*.parquet"))
    assert shard in text and "Traceback" not in text
    assert (tmp_path / targets[0]).exists()


def mteb_files(folder: Path, lang: str = "yo", score: pa.Array | None = None) -> tuple[Path, Path]:
    """The sample's topics and qrels of ``lang`` as MTEB's queries and qrels Parquet files."""
    topics = [line.split("\t") for line in (SAMPLE / "miracl" / lang / "topics.tsv").read_text().splitlines()]
    qrels = [line.split() for line in (SAMPLE / "miracl" / lang / "qrels.tsv").read_text().splitlines()]
    folder.mkdir(exist_ok=True)
    pq.write_table(
        pa.table({"_id": [q for q, _ in topics], "text": [t for _, t in topics]}), folder / "queries.parquet"
    )
    scores = score if score is not None else pa.array([int(q[3]) for q in qrels], pa.int64())
    judged = {"query-id": [q[0] for q in qrels], "corpus-id": [q[2] for q in qrels], "score": scores}
    pq.write_table(pa.table(judged), folder / "qrels.parquet")
    return folder / "queries.parquet", folder / "qrels.parquet"


def test_mtebs_queries_and_qrels_files_are_local_sources(tmp_path: Path) -> None:
    """MTEB's layout of a partition (a corpus with ``_id``, queries, qrels, all Parquet) runs as the TSV files
    do; a qrels file with a fractional score stops the job naming the file and the record, writing nothing."""
    queries, qrels = mteb_files(tmp_path / "mteb")
    passages = [json.loads(line) for line in (SAMPLE / "miracl/yo/corpus.jsonl").read_text().splitlines()]
    corpus = tmp_path / "mteb" / "corpus.parquet"
    pq.write_table(pa.table({"_id": [p["docid"] for p in passages], "title": [p["title"] for p in passages],
                             "text": [p["text"] for p in passages]}), corpus)  # fmt: skip
    cfg = sample_config(["yo"], dataset="miracl-hn", methods=["bm25"], hybrids={}, rerankers={}, threads=1)
    cfg["source"] = {"corpus": str(corpus), "topics": str(queries), "qrels": str(qrels)}
    out = ("resources/miracl-hn/topics/yo/queries.parquet", "resources/miracl-hn/topics/yo/qrels.parquet")
    snakemake(tmp_path, write_config(tmp_path, cfg), *out, timeout=300)
    got = schemas.read_table(tmp_path / out[1], schemas.QRELS).to_pylist()
    want = [line.split() for line in (SAMPLE / "miracl/yo/qrels.tsv").read_text().splitlines()]
    assert [(r["qid"], r["docid"], r["relevance"]) for r in got] == [(q, d, int(r)) for q, _, d, r in want]
    assert schemas.read_table(tmp_path / out[0], schemas.QUERIES).num_rows == len(
        (SAMPLE / "miracl/yo/topics.tsv").read_text().splitlines()
    )

    work = tmp_path / "broken"
    work.mkdir()
    n = len(want)
    _, bad = mteb_files(work / "mteb", score=pa.array([1.0] * (n - 1) + [0.5]))
    cfg["source"]["qrels"] = str(bad)
    proc = snakemake(work, write_config(work, cfg), *out, check=False, timeout=300)
    assert proc.returncode != 0
    assert f"{bad}: record {n}: score 0.5 of " in proc.stdout + proc.stderr
    assert not (work / out[0]).exists() and not (work / out[1]).exists()
