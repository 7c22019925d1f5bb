"""How much our float32 outputs move with the shape of the batch a text is computed in: the bound that
the tests' tolerances against an oracle (FlagEmbedding, sentence-transformers), which batches texts
its own way, are set from (``tests/helpers.py``: ``BATCH_TOL``).

For each tiny checkpoint the tests use (built offline from the sample) and each output, the same texts
are encoded (or pairs scored) in batches of 1 to 64 rows, under token budgets of 64 to 32,768 padded
tokens, with 1 and 2 torch threads; the largest absolute difference from the texts encoded one at a
time is printed (for scores also relative to ``max(1, |score|)``). Padding changes the shapes of the
matrix products, and so the order of their float32 sums: nothing else differs.

    python benchmarks/batch_shape_bounds.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from miracl_eval.encoders import bge_m3  # noqa: E402
from miracl_eval.encoders.base import host_settings  # noqa: E402
from miracl_eval.encoders.registry import get_family  # noqa: E402
from miracl_eval.offline.tiny import (  # noqa: E402
    DenseHeadSpec,
    add_sentence_transformers_files,
    build_tiny_checkpoint,
    texts_from_corpora,
)
from miracl_eval.rerankers import cross_encoder, llm  # noqa: E402

SAMPLE = REPO / "sample" / "miracl"
LANGS = ["en", "zh", "ar", "sw", "th", "ru", "ja", "hi"]
BATCHES = (1, 2, 3, 4, 5, 7, 8, 13, 16, 32, 64)
BUDGETS = (64, 300, 32768)
THREADS = (1, 2)


def texts() -> tuple[list[str], list[str]]:
    queries, passages = [], []
    for lang in LANGS:
        lines = (SAMPLE / lang / "topics.tsv").read_text(encoding="utf-8").splitlines()
        queries += [line.split("\t", 1)[1] for line in lines if line.strip()][:4]
        passages += list(texts_from_corpora([SAMPLE / lang / "corpus.jsonl"]))[:6]
    return queries, passages


def sparse_diff(a: list[tuple[np.ndarray, np.ndarray]], b: list[tuple[np.ndarray, np.ndarray]]) -> float:
    """Largest weight difference, a token in one list only counting its weight."""
    worst = 0.0
    for (ta, wa), (tb, wb) in zip(a, b, strict=True):
        x, y = dict(zip(ta.tolist(), wa.tolist(), strict=True)), dict(zip(tb.tolist(), wb.tolist(), strict=True))
        worst = max([worst, *(abs(x.get(t, 0.0) - y.get(t, 0.0)) for t in x.keys() | y.keys())])
    return worst


def sweep(name: str, run: Callable[[int, int], dict[str, object]], kinds: dict[str, str]) -> None:
    """``run(batch, budget)`` -> outputs by kind; each compared with ``run(1, budget=32768)``."""
    worst = dict.fromkeys(kinds, 0.0)
    relative = dict.fromkeys(kinds, 0.0)
    for threads in THREADS:
        torch.set_num_threads(threads)
        alone = run(1, 32768)
        for batch in BATCHES:
            for budget in BUDGETS:
                got = run(batch, budget)
                for kind, how in kinds.items():
                    a, b = alone[kind], got[kind]
                    if how == "sparse":
                        d = sparse_diff(a, b)  # type: ignore[arg-type]
                    elif how == "ragged":
                        d = max(float(np.abs(x - y).max()) for x, y in zip(a, b, strict=True))  # type: ignore[call-overload]
                    else:
                        diff = np.abs(np.asarray(a) - np.asarray(b))
                        d = float(diff.max())
                        relative[kind] = max(relative[kind], float((diff / np.maximum(1, np.abs(a))).max()))
                    worst[kind] = max(worst[kind], d)
    for kind in kinds:
        rel = f", relative to max(1, |x|) {relative[kind]:.1e}" if kinds[kind] == "scores" else ""
        print(f"{name:<28} {kind:<10} largest difference {worst[kind]:.1e}{rel}", flush=True)


def main() -> None:
    queries, passages = texts()
    pairs = [(q, p) for i, q in enumerate(queries) for j, p in enumerate(passages) if (i + j) % 5 == 0]
    corpus = list(texts_from_corpora(sorted(SAMPLE.glob("*/corpus.jsonl"))))
    print(f"{len(queries)} queries, {len(passages)} passages, {len(pairs)} pairs; batches {BATCHES}, token budgets "
          f"{BUDGETS}, torch threads {THREADS}; torch {torch.__version__}", flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)

        def build(kind: str) -> str:
            return str(build_tiny_checkpoint(work / kind, corpus, kind=kind))

        m3 = bge_m3.load(get_family("bge-m3").resolve({"checkpoint": build("bge-m3"), "passage_max_length": 96}),
                         device="cpu", multivec=True)  # fmt: skip

        def m3_run(batch: int, budget: int) -> dict[str, object]:
            host = host_settings(batch, budget)
            out = m3.encode(passages, "passage", batch, host)
            return {"dense": out.dense, "sparse": out.sparse, "colbert": m3.encode_multivec(passages, "passage", batch)}

        sweep("bge-m3 (tiny)", m3_run, {"dense": "dense", "sparse": "sparse", "colbert": "ragged"})
        docs = {f"d{i}": t for i, t in enumerate(passages)}
        index = [(qi, f"d{pi}") for qi in range(len(queries)) for pi in range(len(passages)) if (qi + pi) % 5 == 0]
        query_weights = m3.encode(queries, "query", 1).sparse or []

        def m3_scores(batch: int, budget: int) -> dict[str, object]:
            weights = m3.encode(passages, "passage", batch, host_settings(batch, budget)).sparse or []
            lexical = []
            for qi, d in index:
                (qt, qw), (pt, pw) = query_weights[qi], weights[int(d[1:])]
                shared = dict(zip(pt.tolist(), pw.tolist(), strict=True))
                lexical.append(sum(w * shared.get(t, 0.0) for t, w in zip(qt.tolist(), qw.tolist(), strict=True)))
            multivec = bge_m3.multivec_scores(m3, queries, docs, index, batch, token_budget=budget)
            return {"lexical": np.array(lexical), "multivec": multivec}

        sweep("bge-m3 pair scores (tiny)", m3_scores, {"lexical": "scores", "multivec": "scores"})
        for family, kind, settings in (
            ("dense", "xlm-r", {"pooling": "mean", "normalize": True}),
            ("dense", "decoder", {"pooling": "last", "normalize": True}),
            ("splade", "mlm", {}),
        ):
            spec = get_family(family).resolve({"checkpoint": build(kind), "passage_max_length": 96, **settings})
            model = get_family(family).load(spec, device="cpu")
            output = "dense" if family == "dense" else "sparse"

            def run(batch: int, budget: int, model=model, output=output) -> dict[str, object]:  # noqa: ANN001
                out = model.encode(passages, "passage", batch, host_settings(batch, budget))
                return {output: out.dense if output == "dense" else out.sparse}

            sweep(f"{family} {kind} (tiny)", run, {output: output})
        # sentence-transformers module chains: every pooling mode, Dense heads after it, normalised or not
        tanh, gelu = DenseHeadSpec(16), DenseHeadSpec(8, "torch.nn.modules.activation.GELU")
        for kind, chain in (
            ("bert", {"pooling": "cls", "dense": [tanh], "normalize": True}),
            ("xlm-r", {"pooling": "max", "dense": [DenseHeadSpec(24, "torch.nn.modules.linear.Identity"), gelu]}),
            ("bert", {"pooling": "mean_sqrt_len_tokens", "dense": [tanh]}),
            ("xlm-r", {"pooling": "weightedmean", "dense": [gelu]}),
            ("decoder", {"pooling": "lasttoken", "dense": [tanh]}),
        ):
            copy = shutil.copytree(
                work / kind if (work / kind).is_dir() else build(kind), work / f"{kind}-{chain['pooling']}"
            )
            folder = add_sentence_transformers_files(copy, **chain)  # type: ignore[arg-type]
            model = get_family("dense").load(get_family("dense").resolve({"checkpoint": str(folder),
                                             "passage_max_length": 96}), device="cpu")  # fmt: skip

            def run_chain(batch: int, budget: int, model=model) -> dict[str, object]:  # noqa: ANN001
                return {"dense": model.encode(passages, "passage", batch, host_settings(batch, budget)).dense}

            sweep(f"dense {kind} {chain['pooling']} + heads", run_chain, {"dense": "dense"})
        for name, module, kind, spec in (
            ("cross-encoder", cross_encoder, "cross-encoder", {"max_length": 512, "sigmoid": False}),
            ("llm", llm, "llm", {"max_length": 48, "prompt": llm.DEFAULT_PROMPT, "query_instruction": "A: ",
                                 "passage_instruction": "B: "}),
        ):  # fmt: skip
            reranker = module.load({"family": name, "checkpoint": build(kind), **spec}, device="cpu")

            def score(batch: int, budget: int, reranker=reranker) -> dict[str, object]:  # noqa: ANN001, ARG001
                return {"scores": reranker.score(pairs, batch_size=batch)}

            sweep(f"{name} (tiny)", score, {"scores": "scores"})


if __name__ == "__main__":
    main()
