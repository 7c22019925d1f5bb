"""Reranker throughput: ours (``miracl_eval.rerankers``) beside FlagEmbedding's reranker on the same random
checkpoint, pairs, batch size, max length, device and dtype (not a test).

The reference is ``FlagReranker`` for the cross-encoder family and ``FlagLLMReranker`` for the llm family,
the harness of the BGE rerankers' published MIRACL numbers. Each side runs in its own process (pinned to
``--cpus`` when given) and scores the same ``--pairs`` (query, passage) pairs: ``--queries`` queries of
about 12 tokens, each with ``pairs / queries`` passages of about ``--tokens`` tokens (MIRACL's passages
average about 150 XLM-R tokens). Printed: pairs/s of each and their ratio, each process's peak RSS, and
the largest difference between the two sides' scores, also relative to the largest score (float32
sums in other batches: a random checkpoint's logits reach the hundreds).

    python benchmarks/reranker_speed.py                                     # tiny cross-encoder, CPU
    python benchmarks/reranker_speed.py --family llm --config small
    python benchmarks/reranker_speed.py --device cuda --dtype bfloat16 --config large \\
        --max-length 1024 --batch-size 64 --tokenizer .whl/xlmr-tokenizer  # bge-reranker-v2-m3's shape
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from encode_speed import CONFIGS, make_texts, run_child, sample_texts  # noqa: E402

#: family -> (tiny checkpoint kind, the reference's class in FlagEmbedding)
FAMILIES = {"cross-encoder": ("cross-encoder", "FlagReranker"), "llm": ("llm", "FlagLLMReranker")}


def make_pairs(model: str, pairs: int, queries: int, tokens: int) -> list[tuple[str, str]]:
    """The benchmark's pairs, the same in every process: short queries, passages of about ``tokens``."""
    per_query = max(1, pairs // queries)
    query_texts = [" ".join(t.split()[:8]) for t in make_texts(model, queries, 12)]
    passages = make_texts(model, pairs, tokens)
    return [(query_texts[min(i // per_query, queries - 1)], passages[i]) for i in range(pairs)]


def child(args: argparse.Namespace) -> dict:
    import numpy as np
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    pairs = make_pairs(args.model, args.pairs, args.queries, args.tokens)
    if args.impl == "ours":
        from miracl_eval.rerankers.registry import FAMILIES as RERANKERS

        family = RERANKERS[args.family]
        reranker = family.load(
            family.resolve({"checkpoint": args.model, "max_length": args.max_length}, "benchmark"),
            device=args.device,
            dtype=args.dtype,
        )

        def score() -> np.ndarray:
            return reranker.score(pairs, args.batch_size)
    else:
        import FlagEmbedding

        half = args.dtype in ("float16", "bfloat16") and args.device != "cpu"
        ref = getattr(FlagEmbedding, FAMILIES[args.family][1])(
            args.model, use_fp16=half, devices=args.device, max_length=args.max_length
        )

        def score() -> np.ndarray:
            return np.asarray(ref.compute_score([list(p) for p in pairs], batch_size=args.batch_size), dtype=np.float64)

    score_warm = score()  # the first call: kernels, allocator, caches
    seconds = []
    for _ in range(args.rounds):
        started = time.perf_counter()
        scores = score()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - started)
    np.save(args.out, scores)
    assert np.allclose(scores, score_warm, atol=1e-3, equal_nan=False)
    return {"seconds": statistics.median(seconds), "pairs": len(pairs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", choices=list(FAMILIES), default="cross-encoder")
    parser.add_argument("--config", choices=sorted(CONFIGS), default="tiny", help="the random checkpoint's size")
    parser.add_argument("--model", help="use this checkpoint instead of building a random one")
    parser.add_argument("--tokenizer", help="give the built checkpoint this tokenizer (a folder), e.g. XLM-R's")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=150, help="about this many tokens a passage")
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads in the children (0: torch's default)")
    parser.add_argument("--cpus", help="pin the children to these CPUs (0-7, or 0,2,4)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--impl", choices=["ours", "ref"], help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.cpus:
            from encode_speed import cpu_list

            os.sched_setaffinity(0, cpu_list(args.cpus))
        print(json.dumps(child(args)))
        return

    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model is None:
            from miracl_eval.offline.tiny import build_tiny_checkpoint

            started = time.perf_counter()
            kind = FAMILIES[args.family][0]
            model = str(Path(tmp) / kind)
            build_tiny_checkpoint(
                model, sample_texts(), kind=kind, **CONFIGS[args.config], tokenizer_from=args.tokenizer
            )
            print(f"built the random '{args.config}' {kind} checkpoint in {time.perf_counter() - started:.1f} s")
        common = ["--child", "--model", model, "--family", args.family, "--device", args.device, "--dtype", args.dtype]
        common += ["--pairs", str(args.pairs), "--queries", str(args.queries), "--tokens", str(args.tokens)]
        common += [
            "--max-length",
            str(args.max_length),
            "--batch-size",
            str(args.batch_size),
            "--rounds",
            str(args.rounds),
        ]
        common += (["--threads", str(args.threads)] if args.threads else []) + (
            ["--cpus", args.cpus] if args.cpus else []
        )
        print(
            f"== {args.family}: {args.pairs} pairs ({args.queries} queries), passages of about {args.tokens} tokens, "
            f"max_length {args.max_length}, batch {args.batch_size}, {args.device}/{args.dtype}, {args.rounds} round(s) =="
        )
        results = {}
        for impl in ("ours", "ref"):
            out = str(Path(tmp) / f"{impl}.npy")
            result, peak = run_child([*common, "--impl", impl, "--out", out], __file__)
            results[impl] = (result, peak, np.load(out))
            name = "ours" if impl == "ours" else f"FlagEmbedding {FAMILIES[args.family][1]}"
            rate = result["pairs"] / result["seconds"]
            print(f"{name:34s} {rate:10.1f} pairs/s  ({result['seconds']:.2f} s)  peak RSS {peak:8.0f} MiB")
        ours, ref = results["ours"], results["ref"]
        ratio = ref[0]["seconds"] / ours[0]["seconds"]
        print(f"throughput ratio ours/FlagEmbedding: {ratio:.2f}x")
        diff, scale = float(np.abs(ours[2] - ref[2]).max()), float(np.abs(ref[2]).max())
        print(
            f"largest score difference: {diff:.2e} (largest score {scale:.3g}: relative {diff / max(scale, 1e-30):.1e})"
        )


if __name__ == "__main__":
    main()
