"""Exact dense search in blocks and merged, beside one Faiss IndexFlatIP of the same vectors (not a test).

For each corpus size (default 100k, 300k and 1M random unit vectors of 1024 dimensions, in shards of
100k), in one run: (1) the reference, one ``faiss.IndexFlatIP`` holding every vector, searched top
``hits``; (2) ours, :func:`miracl_eval.faiss.blocks.block_search` over blocks of ``--block`` passages
(each in its own process, as the workflow's jobs are) and :func:`merge_blocks`. Each side runs in its
own process; prints wall time, CPU time and peak RSS of each (the blocks': the largest one's), whether
the hits are the same, and the ratios; then extrapolates from the largest size to MIRACL English and
MessIRve full with ``scale.yaml``'s block size: the number of search jobs, each job's memory, and the
total CPU time against one flat index's.

    python benchmarks/block_search.py                        # 100k, 300k, 1M; 200 queries; 2 cores
    python benchmarks/block_search.py --sizes 100000 --queries 50
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DIM = 1024
SHARD = 100_000
TARGETS = {"MIRACL English": (32_893_221, 799), "MessIRve full": (14_047_759, 156_528)}


def _write_vectors(path: Path, key: str, ids: list[str], vecs) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa
    import pyarrow.parquet as pq

    from miracl_eval import schemas

    table = pa.table(
        {key: pa.array(ids), "vector": pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), DIM)},
        schema=schemas.dense_schema(DIM, key=key),
    )
    pq.write_table(table, path)


def make_data(work: Path, n: int, queries: int) -> tuple[list[Path], Path]:
    import numpy as np

    rng = np.random.default_rng(n)
    shards = []
    for s, start in enumerate(range(0, n, SHARD)):
        m = min(SHARD, n - start)
        v = rng.standard_normal((m, DIM)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        path = work / f"shard-{s:05d}.parquet"
        _write_vectors(path, "docid", [f"d{start + i}" for i in range(m)], v)
        shards.append(path)
    q = rng.standard_normal((queries, DIM)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    _write_vectors(work / "queries.parquet", "qid", [f"q{i}" for i in range(queries)], q)
    return shards, work / "queries.parquet"


def child(args: argparse.Namespace) -> dict:
    import numpy as np
    import pyarrow.parquet as pq

    started, cpu0 = time.perf_counter(), time.process_time()
    shards = [Path(p) for p in args.shards.split(",")]
    if args.child == "flat":
        from miracl_eval.encoders.outputs import iter_vector_batches
        from miracl_eval.faiss.index import load_faiss

        faiss = load_faiss()
        index = faiss.IndexFlatIP(DIM)
        ids: list[str] = []
        for batch_ids, vecs in iter_vector_batches(shards, key="docid"):
            index.add(np.ascontiguousarray(vecs))
            ids.extend(batch_ids.to_pylist())
        q = np.array(pq.read_table(args.queries)["vector"].to_pylist(), dtype=np.float32)
        distances, labels = index.search(q, args.hits)
        hits = [[ids[j] for j in row] for row in labels]
        scores = distances.tolist()
    elif args.child == "block":
        from miracl_eval.faiss.blocks import block_search

        block_search(shards, {"x": args.queries}, args.out, hits=args.hits)
        hits, scores = [], []
    else:
        from miracl_eval.faiss.blocks import merge_blocks

        merge_blocks(args.shards.split(","), "x", args.out, args.out + ".trec", hits=args.hits)
        run = pq.read_table(args.out)
        hits = [[] for _ in range(args.n_queries)]
        scores = [[] for _ in range(args.n_queries)]
        for qid, docid, score in zip(
            run["qid"].to_pylist(), run["docid"].to_pylist(), run["score"].to_pylist(), strict=True
        ):
            hits[int(qid[1:])].append(docid)
            scores[int(qid[1:])].append(score)
    return {"wall": time.perf_counter() - started, "cpu": time.process_time() - cpu0, "hits": hits, "scores": scores}


def run_child(argv: list[str]) -> tuple[dict, float, float]:
    """The child's JSON, its peak RSS (MB) and its CPU seconds (user + system, from rusage)."""
    proc = subprocess.Popen([sys.executable, __file__, *argv], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"child {argv[:4]} failed")
    return json.loads(out.decode().strip().splitlines()[-1]), usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--hits", type=int, default=1000)
    parser.add_argument("--block", type=int, default=400_000, help="passages per block (whole shards of 100k)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--shards", help=argparse.SUPPRESS)
    parser.add_argument("--queries-file", dest="queries_path", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--n-queries", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.queries = args.queries_path
        print(json.dumps(child(args)))
        return
    import yaml

    scale_block = yaml.safe_load((REPO / "scale.yaml").read_text()).get("dense_index", {}).get("block_size", 4_000_000)
    per_block = max(1, args.block // SHARD)
    last = None
    print(f"{'passages':>9} {'side':6} {'wall s':>8} {'CPU s':>8} {'peak MB':>8}   hits against flat")
    for n in args.sizes:
        with tempfile.TemporaryDirectory(prefix="block-search-") as tmp:
            work = Path(tmp)
            shards, queries = make_data(work, n, args.queries)
            common = ["--queries-file", str(queries), "--hits", str(args.hits)]
            flat, flat_rss, flat_cpu = run_child(["--child", "flat", "--shards", ",".join(map(str, shards)), *common])
            groups = [shards[i : i + per_block] for i in range(0, len(shards), per_block)]
            block_files, block_wall, block_cpu, block_rss = [], 0.0, 0.0, 0.0
            for g, group in enumerate(groups):
                out = work / f"block-{g}.parquet"
                res, rss, cpu = run_child(
                    ["--child", "block", "--shards", ",".join(map(str, group)), "--out", str(out), *common]
                )
                block_files.append(str(out))
                block_wall, block_cpu, block_rss = block_wall + res["wall"], block_cpu + cpu, max(block_rss, rss)
            merged, merge_rss, merge_cpu = run_child(
                ["--child", "merge", "--shards", ",".join(block_files), "--out", str(work / "run.parquet"),
                 "--n-queries", str(args.queries), *common]
            )  # fmt: skip
            same_sets = sum(set(a) == set(b) for a, b in zip(merged["hits"], flat["hits"], strict=True))
            same_order = sum(a == b for a, b in zip(merged["hits"], flat["hits"], strict=True))
            score_diff = max(abs(x - y) for a, b in zip(merged["scores"], flat["scores"], strict=True)
                             for x, y in zip(a, b, strict=True))  # fmt: skip
            same = (f"same passages {same_sets}/{args.queries} queries, same order {same_order}/{args.queries} "
                    f"(ties within float32 rounding: max |score diff| {score_diff:.1e})")  # fmt: skip
            ours_wall, ours_cpu = block_wall + merged["wall"], block_cpu + merge_cpu
            print(f"{n:>9} {'flat':6} {flat['wall']:8.1f} {flat_cpu:8.1f} {flat_rss:8.0f}")
            print(f"{n:>9} {'blocks':6} {ours_wall:8.1f} {ours_cpu:8.1f} {max(block_rss, merge_rss):8.0f}   "
                  f"{same} ({len(groups)} block(s) of up to {per_block * SHARD:,}; merge {merged['wall']:.1f} s)")  # fmt: skip
            print(f"{'':>9} ratio blocks/flat: wall {ours_wall / flat['wall']:.2f}, CPU {ours_cpu / flat_cpu:.2f}, "
                  f"peak memory {max(block_rss, merge_rss) / flat_rss:.2f}")  # fmt: skip
            last = (n, ours_cpu / flat_cpu, block_rss, per_block * SHARD)
    if last is None:
        return
    n, cpu_ratio, rss, block = last
    vectors_mb = min(n, block) * DIM * 4 / 2**20
    fixed_mb = rss - vectors_mb  # the process, a query batch's scores, read buffers: whatever the block's size
    print(f"\nextrapolated with scale.yaml's block of {scale_block:,} passages (a block job's peak at {n:,}: "
          f"{rss:.0f} MB = {vectors_mb:.0f} MB of vectors + {fixed_mb:.0f} MB besides):")  # fmt: skip
    for name, (passages, queries) in TARGETS.items():
        jobs = -(-passages // scale_block)
        peak = (fixed_mb + min(passages, scale_block) * DIM * 4 / 2**20) / 1024
        print(f"  {name}: {jobs} search jobs, each about {peak:.1f} GB; {queries:,} queries; total CPU about "
              f"{cpu_ratio:.2f}x one flat index's (the ratio at {n:,})")  # fmt: skip


if __name__ == "__main__":
    main()
