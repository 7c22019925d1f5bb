"""Exact search in each storage of a dense view (float32, float16, int8, binary): ours beside the engine's
exact kernel for that storage, in one run (not a test).

Three modes, each on ``--passages`` random unit vectors (default 1M of ``--dim`` 1,024: mE5-large's and
BGE-M3's), ``--queries`` queries (default 100) and their top ``--hits`` (default 1,000):

* default, the CPU (``--threads``, default 2): per storage two processes, Faiss's exact kernel of that
  storage (``IndexFlatIP``; ``IndexScalarQuantizer`` ``QT_fp16``; ``IndexScalarQuantizer``
  ``QT_8bit_direct_signed`` over sentence-transformers' int8 codes; ``IndexBinaryFlat``) and ours (the
  scorer :func:`miracl_eval.faiss.blocks.block_search` runs a query chunk through: numpy's BLAS, torch's
  CPU kernels, Faiss's Hamming kernels with every tie of the last hit), each building its store a chunk
  at a time, then timing the search of every query (best of ``--rounds``). Prints per storage the
  bytes per vector, both sides' time and peak RSS, ours / Faiss, whether each query's top ``hits``
  scores are the same, and the projection to MIRACL's dev set: its 13,495 queries, each searched against
  its language's corpus (106,332,152 passages in all), in hours on ``--threads`` cores, and the memory
  of the 106M vectors in the storage;
* ``--workflow``: the workflow's own path: Parquet shards of float32 vectors as the encoders write them,
  and per storage (binary and int8 also with ``rescore: 1000``) one process running
  :func:`miracl_eval.faiss.blocks.block_search` on them as the rule ``dense_block_search`` does: its wall
  time and peak RSS (the figures of the docs' Views page, docs/how-to/views.md);
* ``--device cuda``: on a GPU (no Faiss there): ours (the same scorer on the job's GPU: torch for every
  storage) beside a plain torch reference on the same GPU (float32 products of the widened codes, or of
  the ±1 bits, ``topk``), their times, the GPU memory, whether the top scores are the same, and each
  storage's top scores against exact numpy on the CPU for the first queries.

    python benchmarks/storage_search.py                              # CPU kernels, 1M x 1024, 100 queries
    python benchmarks/storage_search.py --workflow                   # block_search on 1M passages' shards
    python benchmarks/storage_search.py --device cuda --queries 1000 # a GPU machine
    python benchmarks/storage_search.py --passages 200000 --dim 384  # smaller
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
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CHUNK = 100_000
STORAGES = ("float32", "float16", "int8", "binary")
FAISS_KERNEL = {
    "float32": "IndexFlatIP",
    "float16": "IndexScalarQuantizer fp16",
    "int8": "IndexScalarQuantizer 8bit_direct_signed",
    "binary": "IndexBinaryFlat",
}


def miracl_dev() -> tuple[int, int, float]:
    """MIRACL v1.0 dev: its passages, its queries, and the pairs its exact search scores (each language's
    queries against its own corpus), from the shipped reference sizes."""
    ref = REPO / "miracl_eval" / "data" / "reference"
    rows = [line.split("\t") for line in (ref / "corpora.tsv").read_text().splitlines() if line.startswith("miracl\t")]
    passages = {r[1]: int(r[2]) for r in rows}
    topics = [line.split("\t") for line in (ref / "topics.tsv").read_text().splitlines()]
    queries = {r[3]: int(r[4]) for r in topics if r[:3] == ["miracl", "v1.0", "dev"]}
    pairs = sum(passages[lang] * n for lang, n in queries.items())
    return sum(passages.values()), sum(queries.values()), float(pairs)


def unit(rng, n: int, dim: int):  # type: ignore[no-untyped-def]
    import numpy as np

    x = rng.standard_normal((n, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def peak_rss_mib() -> float:
    """This process's peak RSS: ``VmHWM`` (its own memory's high-water mark; ``ru_maxrss`` would start
    from the RSS of the parent it was forked from, Linux keeping it across the exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource  # not Linux

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def top_scores(rows, scores, n_queries: int, hits: int):  # type: ignore[no-untyped-def]
    """Each query's ``hits`` best scores, descending (``[queries, hits]``; ours keep ties beyond them)."""
    import numpy as np

    out = np.full((n_queries, hits), -np.inf, dtype=np.float64)
    for i in range(n_queries):
        mine = np.sort(scores[rows == i])[::-1][:hits]
        out[i, : len(mine)] = mine
    return out


# ------------------------------------------------------------------------------------------ the CPU kernels


def kernel_side(side: str, storage: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """One side (``ours`` or ``faiss``) of one storage: build the store a chunk at a time, time the search."""
    import numpy as np

    from miracl_eval.faiss.blocks import _Scorer
    from miracl_eval.faiss.storage import Stored, int8_ranges, pack_binary, quantize_int8
    from miracl_eval.schemas import DENSE_BLOCK_MB

    dim, hits = args.dim, args.hits
    q = unit(np.random.default_rng(1), args.queries, dim)
    ranges = int8_ranges([unit(np.random.default_rng(0), min(CHUNK, args.passages), dim)])
    rng = np.random.default_rng(0)
    index: Any = None
    stored = Stored.allocate(args.passages, dim, storage, ranges) if side == "ours" else None
    if side == "faiss":
        import faiss

        faiss.omp_set_num_threads(args.threads)
        index = {
            "float32": lambda: faiss.IndexFlatIP(dim),
            "float16": lambda: faiss.IndexScalarQuantizer(
                dim, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT
            ),
            "int8": lambda: faiss.IndexScalarQuantizer(
                dim, faiss.ScalarQuantizer.QT_8bit_direct_signed, faiss.METRIC_INNER_PRODUCT
            ),
            "binary": lambda: faiss.IndexBinaryFlat(8 * -(-dim // 8)),
        }[storage]()
    for start in range(0, args.passages, CHUNK):
        chunk = unit(rng, min(CHUNK, args.passages - start), dim)
        if stored is not None:
            stored.put(start, chunk)
        elif storage == "int8":  # the codes as floats: 8bit_direct_signed stores each as code + 128
            index.add(quantize_int8(chunk, ranges).astype(np.float32))
        elif storage == "binary":
            index.add(pack_binary(chunk))
        else:
            index.add(chunk)
        del chunk
    held = (
        stored.data.nbytes
        if stored is not None
        else index.ntotal * (index.code_size if storage != "float32" else 4 * dim)
    )
    scorer = _Scorer(stored, hits, "cpu", DENSE_BLOCK_MB, args.threads) if stored is not None else None
    best = float("inf")
    for attempt in range(args.rounds + 1):  # the first: a warm-up of two queries (thread pools, JIT kernels)
        batch = q[:2] if attempt == 0 else q
        started = time.perf_counter()
        if scorer is not None:
            rows, _, scores = scorer.top(batch)
        elif storage == "binary":
            dist, _ = index.search(pack_binary(batch), hits)
        elif storage == "int8":
            found, _ = index.search(quantize_int8(batch, ranges).astype(np.float32), hits)
        else:
            found, _ = index.search(batch, hits)
        if attempt:
            best = min(best, time.perf_counter() - started)
    if scorer is not None:
        top = top_scores(rows, scores, len(q), hits)
    else:
        top = (dim - 2 * dist.astype(np.float64)) if storage == "binary" else found.astype(np.float64)
    np.save(out / f"{storage}-{side}.npy", top)
    return {"held_mib": held / 2**20, "bytes_per_vector": held / args.passages, "seconds": best,
            "peak_rss_mib": peak_rss_mib(), "kernel": scorer.kernel if scorer else FAISS_KERNEL[storage]}  # fmt: skip


def child(argv: list[str], threads: int) -> dict[str, Any]:
    env = {**os.environ, **{k: str(threads) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}}
    out = subprocess.run([sys.executable, __file__, *argv], check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def cpu_kernels(args: argparse.Namespace) -> None:
    import numpy as np

    passages, queries, pairs = miracl_dev()
    print(f"{args.passages:,} random unit vectors of {args.dim} dimensions, {args.queries} queries, top {args.hits}, "
          f"{args.threads} thread(s), best of {args.rounds}")  # fmt: skip
    print(f"{'storage':<8} {'B/vector':>8} {'ours s':>7} {'RSS MiB':>8} {'Faiss s':>8} {'RSS MiB':>8} {'ours/Faiss':>10} "
          f"{'same top':>8}   MIRACL dev: {queries:,} queries x their corpora ({passages:,} passages)")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="storage-search-") as tmp:
        common = ["--passages", str(args.passages), "--dim", str(args.dim), "--queries", str(args.queries),
                  "--hits", str(args.hits), "--threads", str(args.threads), "--rounds", str(args.rounds), "--out", tmp]  # fmt: skip
        results: dict[str, dict[str, dict[str, Any]]] = {}
        for storage in STORAGES:
            r = results[storage] = {
                side: child(["--side", side, "--storage", storage, *common], args.threads) for side in ("faiss", "ours")
            }
            ours, ref = (np.load(Path(tmp) / f"{storage}-{side}.npy") for side in ("ours", "faiss"))
            exact = storage in ("int8", "binary")
            same = np.array_equal(ours, ref) if exact else np.allclose(ours, ref, rtol=0, atol=1e-5)
            hours = r["ours"]["seconds"] / (args.passages * args.queries) * pairs / 3600
            memory = r["ours"]["bytes_per_vector"] * passages / 2**30
            print(f"{storage:<8} {r['ours']['bytes_per_vector']:>8.0f} {r['ours']['seconds']:>7.2f} "
                  f"{r['ours']['peak_rss_mib']:>8.0f} {r['faiss']['seconds']:>8.2f} {r['faiss']['peak_rss_mib']:>8.0f} "
                  f"{r['ours']['seconds'] / r['faiss']['seconds']:>10.2f} {'yes' if same else 'NO':>8}   "
                  f"{hours:,.1f} h on {args.threads} cores, {memory:,.1f} GiB of vectors", flush=True)  # fmt: skip
        f16 = results["float16"]["ours"]["seconds"] / results["float32"]["ours"]["seconds"]
        print(f"ours: float16 / float32 time {f16:.2f}; kernels: "
              + ", ".join(f"{s} {results[s]['ours']['kernel']} vs {FAISS_KERNEL[s]}" for s in STORAGES))  # fmt: skip


# ------------------------------------------------------------------------------------------ the workflow's path


def write_block(work: Path, args: argparse.Namespace) -> tuple[list[Path], Path]:
    """Float32 vector shards of 100k passages, in row groups of 4,096 (as the encoders write them: a
    window of texts at a time), and the queries' file."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from miracl_eval import schemas

    def write(path: Path, key: str, ids: list[str], vecs) -> Path:  # type: ignore[no-untyped-def]
        values = pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), args.dim)
        pq.write_table(pa.table({key: pa.array(ids), "vector": values}, schema=schemas.dense_schema(args.dim, key=key)),
                       path, compression="zstd", row_group_size=4096)  # fmt: skip
        return path

    rng = np.random.default_rng(0)
    shards = [write(work / f"shard-{s:05d}.parquet", "docid", [f"d{start + i}" for i in range(m)], unit(rng, m, args.dim))
              for s, start in enumerate(range(0, args.passages, CHUNK))
              for m in [min(CHUNK, args.passages - start)]]  # fmt: skip
    queries = write(work / "queries.parquet", "qid", [f"q{i}" for i in range(args.queries)],
                    unit(np.random.default_rng(1), args.queries, args.dim))  # fmt: skip
    return shards, queries


def workflow_side(args: argparse.Namespace) -> dict[str, Any]:
    from miracl_eval.faiss.blocks import block_search

    started = time.perf_counter()
    stats = block_search(args.shards.split(","), {"x": args.queries_file}, args.out, hits=args.hits,
                         threads=args.threads, view={"storage": args.storage},
                         ranges=args.ranges if args.storage == "int8" else None, rescore=args.rescore)  # fmt: skip
    return {"seconds": time.perf_counter() - started, "peak_rss_mib": peak_rss_mib(), **stats}


def workflow(args: argparse.Namespace) -> None:
    from miracl_eval.faiss.blocks import calibrate
    from miracl_eval.faiss.storage import bytes_per_vector

    print(f"block_search (rule dense_block_search) on {args.passages:,} float32 vectors of {args.dim} dimensions in "
          f"shards of {CHUNK:,}, {args.queries} queries, top {args.hits}, {args.threads} thread(s)")  # fmt: skip
    print(f"{'storage':<8} {'rescore':>7} {'held MiB':>9} {'wall s':>7} {'peak RSS MiB':>12} {'candidates':>10}")
    with tempfile.TemporaryDirectory(prefix="storage-workflow-") as tmp:
        work = Path(tmp)
        shards, queries = write_block(work, args)
        ranges = work / "ranges.parquet"
        calibrate(shards, ranges, {}, sample=100_000)
        for storage, rescore in [(s, 0) for s in STORAGES] + [("int8", 1000), ("binary", 1000)]:
            r = child(["--workflow-side", "--storage", storage, "--rescore", str(rescore), "--passages", str(args.passages),
                       "--dim", str(args.dim), "--hits", str(args.hits), "--threads", str(args.threads),
                       "--shards", ",".join(map(str, shards)), "--queries-file", str(queries),
                       "--ranges", str(ranges), "--out", str(work / "out.parquet")], args.threads)  # fmt: skip
            held = args.passages * bytes_per_vector(storage, args.dim) / 2**20
            print(f"{storage:<8} {rescore:>7} {held:>9.0f} {r['seconds']:>7.1f} {r['peak_rss_mib']:>12.0f} "
                  f"{r['candidates']:>10,}", flush=True)  # fmt: skip


# ------------------------------------------------------------------------------------------ a GPU


def _codes(torch, x, storage: str, ranges):  # type: ignore[no-untyped-def]
    """Vectors (a tensor) in a storage's codes, made on their device as :func:`miracl_eval.faiss.storage.encode`
    makes them (float16 rounded to nearest, int8 steps of the ranges, sign bits eight to a byte, first
    dimension highest)."""
    if storage == "float16":
        return x.to(torch.float16)
    if storage == "int8":
        lo, hi = (torch.from_numpy(r).to(x.device) for r in ranges)
        steps = (hi - lo) / 255
        steps = torch.where(steps == 0, torch.ones_like(steps), steps)
        return (torch.clamp(torch.floor((x - lo) / steps), 0, 255) - 128).to(torch.int8)
    if storage == "binary":
        bits = (x > 0).to(torch.uint8)
        bits = torch.nn.functional.pad(bits, (0, -x.shape[1] % 8)).reshape(len(x), -1, 8)
        weights = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8, device=x.device)
        return (bits * weights).sum(dim=2, dtype=torch.uint8)
    return x


def _exact(torch, codes, storage: str, dim: int):  # type: ignore[no-untyped-def]
    """Codes as float32 (the bits as ±1): their products are exact (integers below 2^24, or float32's own)."""
    if storage == "binary":
        shifts = torch.arange(7, -1, -1, dtype=torch.uint8, device=codes.device)
        return (((codes.unsqueeze(-1) >> shifts) & 1).reshape(len(codes), -1)[:, :dim].to(torch.float32)) * 2 - 1
    return codes.to(torch.float32)


def _numpy_exact(codes, storage: str, dim: int):  # type: ignore[no-untyped-def]
    """The same, with numpy on the CPU (float64: every sum exact)."""
    import numpy as np

    if storage == "binary":
        return np.unpackbits(codes, axis=1)[:, :dim].astype(np.float64) * 2 - 1
    return codes.astype(np.float64) if storage != "float32" else codes


def gpu(args: argparse.Namespace) -> None:
    """Ours on the GPU beside plain torch references there; the first queries' scores against numpy.
    ``--device cpu``: the same with CPU tensors (a dry run of the device session)."""
    import numpy as np
    import torch

    from miracl_eval.faiss.blocks import _keep_top_torch, _Scorer
    from miracl_eval.faiss.storage import Stored, TorchScores, int8_ranges
    from miracl_eval.schemas import DENSE_BLOCK_MB

    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    passages, queries, pairs = miracl_dev()
    name = torch.cuda.get_device_name(dev) if cuda else "CPU tensors (a dry run of the GPU path)"
    print(f"{name}, torch {torch.__version__}: {args.passages:,} random unit vectors of {args.dim} dimensions, "
          f"{args.queries} queries, top {args.hits}, best of {args.rounds}", flush=True)  # fmt: skip
    gen = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn((args.passages, args.dim), generator=gen, device=dev)
    x /= x.norm(dim=1, keepdim=True)
    qt = torch.randn((args.queries, args.dim), generator=gen, device=dev)
    qt /= qt.norm(dim=1, keepdim=True)
    q = qt.cpu().numpy()
    ranges = int8_ranges([x[:CHUNK].cpu().numpy()])
    check, sample = min(8, args.queries), min(CHUNK, args.passages)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(dev)

    def timed(fn):  # type: ignore[no-untyped-def]
        fn()  # warm-up
        best = float("inf")
        for _ in range(args.rounds):
            sync()
            started = time.perf_counter()
            result = fn()
            sync()
            best = min(best, time.perf_counter() - started)
        return result, best

    print(f"{'storage':<8} {'ours s':>8} {'torch ref s':>11} {'ours/ref':>8} {'GPU GiB':>8} {'same top':>8} "
          f"{'= numpy':>8}   MIRACL dev ({queries:,} queries) on one GPU", flush=True)  # fmt: skip
    for storage in STORAGES:
        codes = _codes(torch, x, storage, ranges)
        stored = Stored.of_codes(codes.cpu().numpy(), args.dim, storage, ranges)
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
        scorer = _Scorer(stored, args.hits, str(dev) if cuda else "cpu", DENSE_BLOCK_MB)
        if not cuda:  # the GPU path with CPU tensors
            scorer.torch, scorer.gpu, scorer.rows = TorchScores(stored, "cpu"), True, max(1, scorer.rows)
        assert scorer.torch is not None
        (rows, _, scores), ours_s = timed(lambda s=scorer: s.top(q))
        memory = torch.cuda.max_memory_allocated(dev) / 2**30 if cuda else 0.0
        first = scorer.torch.scores(q[:check])[:, :sample].cpu().numpy().astype(np.float64)
        reference = _exact(torch, codes, storage, args.dim)
        # float16 holds the passages only: the queries stay float32; int8 and binary queries are coded as ours
        # are (numpy on the CPU: a GPU's division can put a value at a step's edge on the other side of it)
        ref_q = (
            qt if storage == "float16" else _exact(torch, torch.from_numpy(stored.encode(q)).to(dev), storage, args.dim)
        )
        del scorer

        batch = max(1, (DENSE_BLOCK_MB << 20) // (4 * args.passages))  # as many query rows as ours

        def plain(c=reference, rq=ref_q, batch=batch):  # type: ignore[no-untyped-def]
            found = [_keep_top_torch(rq[i : i + batch] @ c.T, args.hits) for i in range(0, len(rq), batch)]
            return (
                np.concatenate([r + i * batch for i, (r, _, _) in enumerate(found)]),
                np.concatenate([s for _, _, s in found]),
            )

        (ref_rows, ref_scores), ref_s = timed(plain)
        del reference, codes
        ours_top = top_scores(rows, scores, len(q), args.hits)
        ref_top = top_scores(ref_rows, ref_scores, len(q), args.hits)
        exact = storage in ("int8", "binary")
        same = np.array_equal(ours_top, ref_top) if exact else np.allclose(ours_top, ref_top, rtol=0, atol=1e-5)
        qx = _numpy_exact(stored.encode(q[:check]) if storage != "float16" else q[:check], storage, args.dim)
        want = qx.astype(np.float64) @ _numpy_exact(stored.data[:sample], storage, args.dim).T
        agree = np.array_equal(first, want) if exact else np.allclose(first, want, rtol=0, atol=1e-5)
        hours = ours_s / (args.passages * args.queries) * pairs / 3600
        print(f"{storage:<8} {ours_s:>8.3f} {ref_s:>11.3f} {ours_s / ref_s:>8.2f} {memory:>8.1f} "
              f"{'yes' if same else 'NO':>8} {'yes' if agree else 'NO':>8}   {hours:.3f} GPU-hours", flush=True)  # fmt: skip
        del stored


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--hits", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1, help="best of this many searches")
    parser.add_argument("--workflow", action="store_true", help="block_search on Parquet shards (peak RSS)")
    parser.add_argument("--device", help="cuda: ours beside torch references on a GPU (cpu: that, with CPU tensors)")
    for hidden in ("--side", "--storage", "--out", "--shards", "--queries-file", "--ranges"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--rescore", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--workflow-side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(kernel_side(args.side, args.storage, args, Path(args.out))))
    elif args.workflow_side:
        print(json.dumps(workflow_side(args), default=str))
    elif args.device:
        import torch

        if args.device.startswith("cuda") and not torch.cuda.is_available():
            print("storage_search: CUDA is not available here", file=sys.stderr)
            return 1
        gpu(args)
    elif args.workflow:
        workflow(args)
    else:
        cpu_kernels(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
