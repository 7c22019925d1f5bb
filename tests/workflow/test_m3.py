"""End-to-end runs with the BGE-M3 methods (tiny offline checkpoint), and incremental re-runs."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.helpers import M3_LANGS, M3_METHODS, REPO, m3_config, planned_jobs, snakemake, write_config

LANGS = M3_LANGS
METHODS = M3_METHODS


def _rows(path: Path) -> dict[str, list[str]]:
    header, *rows = [line.split("\t") for line in path.read_text().splitlines()]
    assert header == ["method", *LANGS, "mean"]
    return {r[0]: r[1:] for r in rows}


def _dry(work: Path, cfg: dict, name: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return snakemake(work, write_config(work, cfg, name), "results/miracl_ndcg.tsv", args=("-n", *extra))


def test_all_six_methods_have_rows(m3_run: Path) -> None:
    for table in ("miracl_ndcg.tsv", "miracl_recall100.tsv"):
        rows = _rows(m3_run / "results" / table)
        assert list(rows) == METHODS
        assert all(0.0 <= float(v) <= 1.0 for values in rows.values() for v in values)
    for lang in LANGS:
        shards = sorted((m3_run / "resources/miracl/encoded/bge-m3/corpus" / lang / "dense").iterdir())
        assert len(shards) == 3, "about 160 passages in shards of 60"


def test_fused_scores_are_weighted_sums_of_kept_components(m3_run: Path) -> None:
    weights = {"all": (1.0, 0.3, 1.0), "dense+sparse": (1.0, 0.3, 0.0), "multivec": (0.0, 0.0, 1.0)}
    for lang in LANGS:
        runs = m3_run / "runs" / "miracl" / lang / "bge-m3"
        for method, (wd, ws, wm) in weights.items():
            run = pq.read_table(runs / f"{method}.parquet").to_pylist()
            comps = pq.read_table(runs / f"{method}.components.parquet").to_pylist()
            by_pair = {(c["qid"], c["docid"]): c for c in comps}
            assert run and len(run) <= len(comps)
            for r in run:
                c = by_pair[(r["qid"], r["docid"])]
                expected = wd * c["dense"] + ws * c["sparse"] + (wm * c["multivec"] if wm else 0.0)
                assert r["score"] == pytest.approx(expected, abs=1e-9)
            trec = (runs / f"{method}.trec").read_text().splitlines()
            assert len(trec) == len(run) and all(line.endswith(f" bge-m3/{method}") for line in trec)


def test_rerun_has_nothing_to_do(m3_run: Path) -> None:
    proc = _dry(m3_run, m3_config(), "same.yaml")
    assert "Nothing to be done" in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "encoder",
    [{"block_size": 60}, {"block_size": 120}, {"batch_size": 3, "token_budget": 50, "tokenizer_workers": 3}],
    ids=["one-shard-blocks", "two-shard-blocks", "throughput"],
)
def test_block_size_and_throughput_settings_rerun_nothing(m3_run: Path, encoder: dict) -> None:
    """The corpus was encoded in blocks of three shards; other block sizes, batch sizes, token budgets
    and tokenizer workers change no result, so no job runs again."""
    cfg = m3_config()
    cfg["encoder"] = {**cfg["encoder"], **encoder}
    proc = _dry(m3_run, cfg, "throughput.yaml")
    assert "Nothing to be done" in proc.stdout + proc.stderr, proc.stdout[-3000:]


def test_a_new_block_size_applies_to_a_corpus_not_yet_encoded(m3_run: Path, tmp_path: Path) -> None:
    cfg = m3_config(encoder={**m3_config()["encoder"], "block_size": 120})
    path = write_config(tmp_path, cfg)
    snakemake(tmp_path, path, "--until", "preprocess_corpus", "preprocess_topics")  # the corpus sizes are known
    proc = snakemake(tmp_path, path, "results/miracl_ndcg.tsv", args=("-n",))
    blocks = {
        line.strip() for line in (proc.stdout + proc.stderr).splitlines() if "blocks/" in line and "output:" in line
    }
    # 160 and 161 passages in shards of 60 (3 each): blocks of two shards and of one, per language
    assert {b.rsplit("/", 1)[1] for b in blocks} == {"00000-00001.json", "00002-00002.json"}, blocks
    assert planned_jobs(proc)["encode_corpus_dense_sparse"] == 4


def test_fusion_weight_reruns_only_fusion_and_evaluation(m3_run: Path) -> None:
    cfg = m3_config(m3={"weights": {"sparse": 0.5}})
    # the two rows that weigh the sparse score (dense+sparse, all), in both languages; one evaluation a row
    assert planned_jobs(_dry(m3_run, cfg, "weights.yaml")) == {"fuse": 4, "evaluate": 2, "tables": 1}


def _job_blocks(proc: subprocess.CompletedProcess[str]) -> list[tuple[str, str]]:
    """(rule, wildcards line) of each job of a dry run."""
    out = proc.stdout + proc.stderr
    blocks = re.findall(r"^(?:local)?(?:rule|checkpoint) (\S+):\n((?:    .*\n)+)", out, flags=re.M)
    return [(rule, next((line for line in body.splitlines() if "wildcards:" in line), "")) for rule, body in blocks]


def test_added_language_runs_only_its_jobs(m3_run: Path) -> None:
    """Every job but the tables, the comparability check and the evaluations is the new language's; each
    row is evaluated on every language in one job (a second of work), so each row's evaluation runs again."""
    proc = _dry(m3_run, m3_config([*LANGS, "zh"]), "zh.yaml")
    jobs = _job_blocks(proc)
    assert jobs, proc.stdout
    evaluated = [wildcards for rule, wildcards in jobs if rule == "evaluate"]
    assert len(evaluated) == len(M3_METHODS)
    for rule, wildcards in jobs:
        if rule in ("tables", "all", "evaluate", "comparability"):
            continue
        assert "zh" in wildcards, (rule, wildcards)
    assert {"preprocess_corpus", "preprocess_topics", "bm25_index", "encode_queries_dense_sparse"} <= {
        r for r, _ in jobs
    }
    assert "tiny_model" not in {r for r, _ in jobs}


def test_encoder_max_length_reruns_encoding_and_downstream_only(m3_run: Path) -> None:
    jobs = planned_jobs(_dry(m3_run, m3_config(m3={"passage_max_length": 128}), "maxlen.yaml"))
    assert jobs == {
        "encode_corpus_dense_sparse": 2,  # one block of three shards per language
        "dense_block_search": 2,
        "sparse_index": 2,
        "dense_merge": 2,
        "sparse_search": 2,
        "union_components": 4,
        "rerank_components": 4,
        "fuse": 6,
        "evaluate": 5,  # every row but bm25
        "tables": 1,
    }


def test_model_change_reruns_encoding_and_downstream_only(m3_run: Path) -> None:
    other = m3_run / "other-model"
    if not other.exists():
        shutil.copytree(m3_run / "resources" / "models" / "tiny-bge-m3", other)
    jobs = planned_jobs(_dry(m3_run, m3_config(m3={"checkpoint": str(other)}), "model.yaml"))
    assert jobs["encode_corpus_dense_sparse"] == 2 and jobs["encode_queries_dense_sparse"] == 2
    assert not {"preprocess_corpus", "preprocess_topics", "bm25_index", "bm25_search", "tiny_model"} & set(jobs)
    assert jobs["evaluate"] == 5


def test_killed_encoding_resumes_with_finished_shards_and_equal_encodings(m3_run: Path, tmp_path: Path) -> None:
    """Kill a run while Swahili's block of 16 shards (of 10 passages) is encoded (the whole process group,
    as a lost node would): the re-run keeps the finished shards and its encodings equal an uninterrupted
    run's (the m3 run's, in shards of 60: the same docids and tokens; vectors and weights to 1e-5, as
    other shards batch the texts otherwise and the tiny random model's float32 rounding follows)."""
    cfg = m3_config()
    cfg["encoder"] = {**cfg["encoder"], "shard_size": 10}
    cfg_path = write_config(tmp_path, cfg)
    target = "resources/miracl/encoded/bge-m3/corpus/sw/blocks/00000-00015.json"  # every shard of Swahili
    cmd = [
        sys.executable, "-m", "snakemake", target, "-s", str(REPO / "Snakefile"),
        "--directory", str(tmp_path), "--configfile", str(cfg_path), "--cores", "1",
    ]  # fmt: skip
    shards = "resources/miracl/encoded/bge-m3/corpus/sw"
    shard_dir = tmp_path / shards / "dense"  # published after the shard's sparse file: both are there
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 600
        while time.time() < deadline and proc.poll() is None:
            done = list(shard_dir.glob("0*.parquet")) if shard_dir.exists() else []
            if 0 < len(done) < 16:
                break
            time.sleep(0.005)
        else:
            pytest.fail(f"no shard finished in time, or the run ended first (exit {proc.poll()})")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finished = {p.name: p.stat().st_mtime_ns for p in shard_dir.glob("0*.parquet")}
    assert 0 < len(finished) < 16 and not (tmp_path / target).exists()
    # what a user does after a kill: release the lock, re-run (incomplete jobs are redone)
    snakemake(tmp_path, cfg_path, target, args=("--unlock",))
    snakemake(tmp_path, cfg_path, target, args=("--rerun-incomplete",))
    for name, mtime in finished.items():
        assert (shard_dir / name).stat().st_mtime_ns == mtime, f"finished shard {name} was redone"
    manifest = json.loads((tmp_path / target).read_text())
    assert [s["encoded"] for s in manifest["shards"]].count(False) >= len(finished)
    for kind in ("dense", "sparse"):
        assert len(list((tmp_path / shards / kind).glob("*.parquet"))) == 16
        resumed, whole = (
            pq.read_table(sorted((d / shards / kind).glob("*.parquet"))).sort_by("docid") for d in (tmp_path, m3_run)
        )
        assert resumed["docid"].equals(whole["docid"])
        if kind == "dense":
            np.testing.assert_allclose(
                np.array(resumed["vector"].to_pylist()), np.array(whole["vector"].to_pylist()), atol=1e-5, rtol=1e-5
            )
        else:
            assert resumed["token_ids"].equals(whole["token_ids"])
            np.testing.assert_allclose(
                np.concatenate(resumed["weights"].to_numpy(zero_copy_only=False)),
                np.concatenate(whole["weights"].to_numpy(zero_copy_only=False)),
                atol=1e-5,
                rtol=1e-5,
            )


def test_exact_search_in_small_blocks_gives_the_runs_of_one_block(m3_run: Path, tmp_path: Path) -> None:
    """Dense search in blocks of one shard (three per language) and merged: the runs of the one-block
    search of the m3 run (the same hits and ranks; scores to float32 rounding, as BLAS rounds products
    of other shapes; exact products merge exactly: tests/unit/faiss/test_blocks.py)."""
    cfg = write_config(tmp_path, m3_config(dense_index={"block_size": 60}))
    targets = [f"runs/miracl/{lang}/bge-m3/dense.parquet" for lang in LANGS]
    snakemake(tmp_path, cfg, *targets)
    for lang in LANGS:
        blocks = sorted(p.name for p in (tmp_path / f"resources/miracl/search/bge-m3/{lang}/dense").iterdir())
        assert blocks == ["00000-00000.parquet", "00001-00001.parquet", "00002-00002.parquet"]
        small, one = (pq.read_table(d / f"runs/miracl/{lang}/bge-m3/dense.parquet") for d in (tmp_path, m3_run))
        assert small.select(["qid", "docid", "rank"]).equals(one.select(["qid", "docid", "rank"]))
        assert max(abs(a - b) for a, b in zip(small["score"].to_pylist(), one["score"].to_pylist(), strict=True)) < 1e-6
        log = (tmp_path / f"logs/miracl/dense_block_search/bge-m3/{lang}/00001-00001.log").read_text()
        assert "block search on cpu" in log  # where the search ran
    assert not (tmp_path / "resources/miracl/indexes/sw/bge-m3").exists()  # no index of the whole corpus


def test_rerank_scores_from_one_pass_equal_the_stored_vectors_scores(m3_run: Path) -> None:
    """The rerank's dense and sparse scores (from one encoding of each candidate passage) equal the
    stored-vector scores of the same pairs (the union's way: every shard scanned) to 1e-5, and so do
    the fused values of ``all`` (dense + 0.3 sparse + multi-vector)."""
    from miracl_eval.fusion.components import score_candidates

    res = m3_run / "resources" / "miracl"
    for lang in LANGS:
        rerank = pq.read_table(sorted((res / "scores/bge-m3" / lang / "rerank").glob("*.parquet")))
        assert len(rerank) > 100
        queries = res / "encoded/bge-m3/queries" / lang
        shards = res / "encoded/bge-m3/corpus" / lang
        stored = score_candidates(
            rerank.select(["qid", "docid"]),
            queries / "dense.parquet",
            queries / "sparse.parquet",
            sorted((shards / "dense").glob("*.parquet")),
            sorted((shards / "sparse").glob("*.parquet")),
        )
        for name in ("dense", "sparse"):
            np.testing.assert_allclose(rerank[name].to_numpy(), stored[name].to_numpy(), atol=1e-5, rtol=0)
        assert (stored["sparse"].to_numpy() > 0).mean() > 0.3  # the tiny model's lexical scores are not all 0
        fused = pq.read_table(m3_run / "runs/miracl" / lang / "bge-m3/all.parquet")
        by_pair = {
            (q, d): wd + 0.3 * ws
            for q, d, wd, ws in zip(*(stored[c].to_pylist() for c in ("qid", "docid", "dense", "sparse")), strict=True)
        }
        multivec = dict(
            zip(
                zip(rerank["qid"].to_pylist(), rerank["docid"].to_pylist(), strict=True),
                rerank["multivec"].to_pylist(),
                strict=True,
            )
        )
        for q, d, score in zip(*(fused[c].to_pylist() for c in ("qid", "docid", "score")), strict=True):
            assert score == pytest.approx(by_pair[(q, d)] + multivec[(q, d)], abs=1e-5)


def test_an_upgrade_keeps_the_shards_an_earlier_release_encoded_with_auto(tmp_path: Path) -> None:
    """Shards and manifests as releases before the resolved dtype was recorded wrote them (encoder.dtype auto,
    stamped as 'auto'), on the CPU this job runs on: the block job run again (as an upgrade's new script makes
    Snakemake do; --forcerun here) keeps every shard, its log says so in one line, and nothing is left to do.
    (Every shard was encoded again: GPU-days per model at full size.)"""
    from miracl_eval.encoders import blocks
    from miracl_eval.encoders.outputs import MODEL_DTYPE_KEY

    cfg = m3_config(["sw"], methods=["bge-m3/dense"])
    cfg_path = write_config(tmp_path, cfg)
    snakemake(tmp_path, cfg_path, "results/miracl_ndcg.tsv")
    folder = tmp_path / "resources/miracl/encoded/bge-m3/corpus/sw"
    (manifest_path,) = sorted((folder / "blocks").glob("*.json"))
    manifest = json.loads(manifest_path.read_text())
    assert manifest["dtype"] == "float32"
    # the spec the block job fingerprints, as its rule passes it
    shard = next((folder / "dense").glob("*.parquet"))
    spec_mark = pq.read_schema(shard).metadata[blocks.FINGERPRINT_KEY].decode()
    assert spec_mark == manifest["fingerprint"]
    from miracl_eval.config.validate import validate
    from miracl_eval.encoders.registry import encoding_settings

    spec = encoding_settings(validate(cfg)["models"]["bge-m3"], "passage")
    assert blocks.fingerprint(spec, "float32", "float32", 60) == spec_mark
    earlier = blocks.fingerprint(spec, "auto", "float32", 60)
    for path in sorted(folder.glob("*/*.parquet")):
        table = pq.read_table(path)
        meta = {k: v for k, v in table.schema.metadata.items() if k != MODEL_DTYPE_KEY}
        pq.write_table(table.replace_schema_metadata({**meta, blocks.FINGERPRINT_KEY: earlier.encode()}), path)
    old = {k: v for k, v in manifest.items() if k != "dtype"} | {"fingerprint": earlier, "device": "cpu"}
    manifest_path.write_text(json.dumps(old))
    shards = {p: p.stat().st_mtime_ns for p in sorted(folder.glob("*/*.parquet"))}
    snakemake(tmp_path, cfg_path, "results/miracl_ndcg.tsv", args=("--forcerun", "encode_corpus_dense_sparse"))
    assert {p: p.stat().st_mtime_ns for p in shards} == shards  # not one shard encoded again
    (log,) = (tmp_path / "logs/miracl/encode_corpus_dense_sparse/bge-m3/sw").glob("*.log")
    kept = [line for line in log.read_text().splitlines() if "earlier release" in line]
    assert len(kept) == 1 and "are kept as float32" in kept[0], log.read_text()[-3000:]
    assert json.loads(manifest_path.read_text())[blocks.KEPT_KEY]["shards"] == [0, 1, 2]
    assert "Nothing to be done" in (lambda p: p.stdout + p.stderr)(_dry(tmp_path, cfg, "again.yaml"))
