"""The multi-vector rerank stage, the code of a baseline commit beside this checkout's: bytes read,
time and peak memory (not a test).

A synthetic corpus (``--passages`` short passages; the time that matters here is reading, and the
tiny model's forward pass is the same on both sides), ``--queries`` queries with a dense run of
``--depth`` candidates each, and BGE-M3-sized stored passage outputs (1024-wide float32 vectors and
lexical weights of about 60 tokens, as a real run stores them). The baseline (``--baseline``, by
default the commit before the one-pass rerank) scans the corpus for the candidates' texts and
every passage shard for their stored vectors; this checkout's reads the corpus's docids and the
candidates' row groups only, and takes all three scores from one encoding of each passage. Each
side runs the real stage (``rerank_components_stage``) in its own process; bytes read are the
process's ``rchar`` (``/proc/self/io``: every byte read through a read call, cached or not).

    python benchmarks/rerank_speed.py                                  # 500k passages, 10,000 x 200
    python benchmarks/rerank_speed.py --passages 100000 --queries 2000 # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DIM = 1024  # BGE-M3's stored dense vectors
SHARD = 100_000  # passages per stored shard (the default shard size)


def _rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return 0


def child(args: argparse.Namespace) -> dict:
    sys.path.insert(0, args.code)
    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    from miracl_eval.encoders.registry import get_family
    from miracl_eval.fusion import components

    work = Path(args.work)
    spec = get_family("bge-m3").resolve(
        {"checkpoint": str(work / "model"), "query_max_length": 32, "passage_max_length": 64}
    )
    shards = {k: sorted(str(p) for p in (work / k).glob("*.parquet")) for k in ("dense", "sparse")}
    scored = {"query_dense": str(work / "query_dense.parquet"), "query_sparse": str(work / "query_sparse.parquet")}
    if args.impl == "baseline":  # its dense scores use the stored 1024-wide passage vectors
        scored |= {"query_dense": str(work / "query_dense_wide.parquet"), "passage_dense": shards["dense"]}
        scored |= {"passage_sparse": shards["sparse"]}
    scored["output"] = str(work / f"{args.impl}.parquet")
    from miracl_eval.encoders import bge_m3

    bge_m3.load(spec, device="cpu", dtype="float32", multivec=True)  # the imports it makes: not the stage's reads
    before, started = _rchar(), time.perf_counter()
    pairs = components.rerank_components_stage(
        str(work / "run.parquet"), args.depth, str(work / "queries.parquet"), args.queries, 0, scored,
        spec=spec, corpus=str(work / "corpus.parquet"), batch_size=256, device="cpu", dtype="float32",
    )  # fmt: skip
    return {
        "seconds": time.perf_counter() - started,
        "read_mb": (_rchar() - before) / 2**20,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "pairs": pairs,
    }


def build(work: Path, args: argparse.Namespace) -> None:
    """The corpus, queries, dense run, stored query and passage outputs, and a tiny BGE-M3 checkpoint."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from miracl_eval import schemas
    from miracl_eval.offline.tiny import build_tiny_checkpoint

    rng = np.random.default_rng(0)
    words = np.array([f"w{i}" for i in range(5000)])

    def texts(n: int, length: int) -> list[str]:
        return [" ".join(row) for row in words[rng.integers(0, len(words), (n, length))]]

    docids = [f"{i}#0" for i in range(args.passages)]
    body = texts(args.passages, 12)
    corpus = pa.table({"docid": docids, "title": texts(args.passages, 2), "text": body, "contents": body})
    pq.write_table(corpus.cast(schemas.CORPUS), work / "corpus.parquet", row_group_size=65_536, compression="zstd")
    qids = [f"q{i}" for i in range(args.queries)]
    pq.write_table(pa.table({"qid": qids, "query": texts(args.queries, 5)}), work / "queries.parquet")
    hits = np.stack([rng.choice(args.passages, args.depth, replace=False) for _ in range(args.queries)])
    run = pa.table(
        {
            "qid": np.repeat(qids, args.depth),
            "docid": np.array(docids)[hits.ravel()],
            "rank": np.tile(np.arange(1, args.depth + 1, dtype=np.int32), args.queries),
            "score": np.tile(np.linspace(1, 0, args.depth), args.queries),
        }
    )
    pq.write_table(run.cast(schemas.RUN), work / "run.parquet")
    build_tiny_checkpoint(work / "model", body[:2000], kind="bge-m3")

    def vectors(path: Path, ids: list[str], dim: int, key: str) -> None:
        values = rng.standard_normal((len(ids), dim), dtype=np.float32)
        column = pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), dim)
        pq.write_table(pa.table({key: ids, "vector": column}, schema=schemas.dense_schema(dim, "float32", key=key)),
                       path, compression="zstd")  # fmt: skip

    def weights(path: Path, ids: list[str], key: str) -> None:
        n = 60
        tokens = np.sort(rng.choice(2000, (len(ids), n)), axis=1).astype(np.int32)
        tokens[:, 1:] += np.arange(1, n, dtype=np.int32)  # strictly ascending
        offsets = pa.array(np.arange(0, len(ids) * n + 1, n, dtype=np.int32))
        table = pa.table(
            {
                key: ids,
                "token_ids": pa.ListArray.from_arrays(offsets, pa.array(tokens.ravel())),
                "weights": pa.ListArray.from_arrays(offsets, pa.array(rng.random(len(ids) * n, dtype=np.float32))),
            }
        )
        pq.write_table(table.cast(schemas.SPARSE if key == "docid" else schemas.QUERY_SPARSE), path, compression="zstd")

    for kind in ("dense", "sparse"):
        (work / kind).mkdir()
    for s, start in enumerate(range(0, args.passages, SHARD)):
        ids = docids[start : start + SHARD]
        vectors(work / "dense" / f"{s:05d}.parquet", ids, DIM, "docid")
        weights(work / "sparse" / f"{s:05d}.parquet", ids, "docid")
    vectors(work / "query_dense_wide.parquet", qids, DIM, "qid")
    vectors(work / "query_dense.parquet", qids, 32, "qid")  # the tiny model's width
    weights(work / "query_sparse.parquet", qids, "qid")


def run_child(args: argparse.Namespace, impl: str, code: Path, work: Path) -> dict:
    argv = [sys.executable, __file__, "--child", "--impl", impl, "--code", str(code), "--work", str(work),
            "--queries", str(args.queries), "--depth", str(args.depth)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(code)}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        sys.exit(f"{impl} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=500_000)
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--depth", type=int, default=200)
    parser.add_argument("--baseline", default="cfa01a0", help="the commit to compare with (its code, by git worktree)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--impl", help=argparse.SUPPRESS)
    parser.add_argument("--code", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    sys.path.insert(0, str(REPO))
    with tempfile.TemporaryDirectory(prefix="rerank-speed-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        build(work, args)
        print(f"built {args.passages:,} passages, {args.queries:,} queries x {args.depth} in "
              f"{time.perf_counter() - started:.0f} s", flush=True)  # fmt: skip
        baseline = work / "baseline"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-f", str(baseline), args.baseline],
                       check=True, capture_output=True)  # fmt: skip
        try:
            results = {
                "baseline": run_child(args, "baseline", baseline, work),
                "new": run_child(args, "new", REPO, work),
            }
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(baseline)], check=False)
        stored = sum(p.stat().st_size for k in ("dense", "sparse") for p in (work / k).glob("*.parquet")) / 2**20
        corpus = (work / "corpus.parquet").stat().st_size / 2**20
        print(f"stored passage outputs {stored:,.0f} MB, corpus {corpus:,.0f} MB")
        print(f"{'':10s} {'pairs':>10s} {'read MB':>10s} {'seconds':>9s} {'peak MB':>9s}")
        for name, r in results.items():
            print(f"{name:10s} {r['pairs']:>10,} {r['read_mb']:>10,.0f} {r['seconds']:>9.1f} {r['peak_mb']:>9,.0f}")
        b, n = results["baseline"], results["new"]
        print(f"new / baseline: read {n['read_mb'] / b['read_mb']:.3f}x, time {n['seconds'] / b['seconds']:.2f}x, "
              f"peak {n['peak_mb'] / b['peak_mb']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
