"""Exact search over 1M passages in each storage of a dense view (float32, float16, int8, binary), beside
Faiss's flat indexes of the same vectors (IndexFlatIP for float32, IndexBinaryFlat for binary) (not a test).

Each side runs in its own process: random unit vectors (``--dim``, default 1024, mE5-large's and BGE-M3's)
are made a chunk at a time and held in the storage only (int8 calibrated on the first 100k), then
``--queries`` queries are scored and their top ``--hits`` kept. Prints per side the bytes per vector, the
held vectors' size, the search's wall time and queries per second, the peak RSS, the ratio to Faiss, and the
memory 106M passages (MIRACL's 18 corpora) take in that storage.

    python benchmarks/storage_search.py                      # 1M x 1024, 100 queries
    python benchmarks/storage_search.py --passages 200000 --dim 384
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CHUNK = 100_000
MIRACL_PASSAGES = 106_332_152  # the 18 corpora's passages (miracl_eval/data/reference/corpora.tsv)
SIDES = ("faiss-float32", "float32", "float16", "int8", "faiss-binary", "binary")


def _unit(rng, n: int, dim: int):  # type: ignore[no-untyped-def]
    import numpy as np

    x = rng.standard_normal((n, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def side(name: str, passages: int, dim: int, queries: int, hits: int) -> dict[str, float]:
    """Build one side's store a chunk at a time, then time the search of every query."""
    import numpy as np

    from miracl_eval.faiss.blocks import _keep_top
    from miracl_eval.faiss.storage import Stored, int8_ranges, pack_binary

    rng = np.random.default_rng(0)
    q = _unit(np.random.default_rng(1), queries, dim)
    storage = name.removeprefix("faiss-")
    ranges = int8_ranges([_unit(np.random.default_rng(0), CHUNK, dim)]) if storage == "int8" else None
    index = None
    parts = []
    for start in range(0, passages, CHUNK):
        chunk = _unit(rng, min(CHUNK, passages - start), dim)
        if name == "faiss-float32":
            import faiss

            index = index or faiss.IndexFlatIP(dim)
            index.add(chunk)
        elif name == "faiss-binary":
            import faiss

            index = index or faiss.IndexBinaryFlat(dim)
            index.add(pack_binary(chunk))
        else:
            parts.append(Stored(chunk, storage, ranges).data)
        del chunk
    stored = Stored.of_codes(np.concatenate(parts), dim, storage, ranges) if parts else None
    del parts
    held = index.ntotal * (index.code_size if name == "faiss-binary" else 4 * dim) if index else stored.data.nbytes
    started = time.perf_counter()
    if name == "faiss-float32":
        index.search(q, hits)
    elif name == "faiss-binary":
        index.search(pack_binary(q), hits)
    else:
        for row in range(0, queries, 16):  # 16 queries at a time: [16, 1M] float32 scores, 64 MB
            _keep_top(stored.scores(q[row : row + 16]), hits)
    seconds = time.perf_counter() - started
    return {
        "bytes_per_vector": held / passages,
        "held_mib": held / 2**20,
        "seconds": seconds,
        "qps": queries / seconds,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--hits", type=int, default=1000)
    parser.add_argument("--side", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(side(args.side, args.passages, args.dim, args.queries, args.hits)))
        return 0
    print(f"{args.passages:,} random unit vectors of {args.dim} dimensions, {args.queries} queries, top {args.hits}")
    header = f"{'side':<14} {'B/vector':>9} {'held MiB':>9} {'search s':>9} {'queries/s':>10} {'peak RSS MiB':>13}"
    print(header + f" {'x Faiss time':>12} {'106M passages':>14}")
    results: dict[str, dict[str, float]] = {}
    for name in SIDES:
        cmd = [sys.executable, __file__, "--side", name, "--passages", str(args.passages), "--dim", str(args.dim),
               "--queries", str(args.queries), "--hits", str(args.hits)]  # fmt: skip
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        r = results[name] = json.loads(out.strip().splitlines()[-1])
        ref = results.get("faiss-binary" if "binary" in name else "faiss-float32", r)
        total_gib = r["bytes_per_vector"] * MIRACL_PASSAGES / 2**30
        print(
            f"{name:<14} {r['bytes_per_vector']:>9.1f} {r['held_mib']:>9.0f} {r['seconds']:>9.2f} {r['qps']:>10.1f} "
            f"{r['peak_rss_mib']:>13.0f} {r['seconds'] / ref['seconds']:>12.2f} {total_gib:>11.1f} GiB"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
