"""Correctness of the encoder's device code path, for a machine with a GPU (not a test: CI has none).

Runs on ``--device`` (default ``cuda``) what the test suite can only run on the CPU, and compares
it with independent references:

1. float32 on the device (TF32 off) against FlagEmbedding's ``BGEM3FlagModel`` on the same device
   and against our float32 encoder on the CPU: dense, lexical weights and multi-vector vectors;
2. bfloat16 on the device (the pipeline's default there) against FlagEmbedding in bfloat16 on
   the same device and against float32 on the CPU, to half precision;
3. ``multivec_scores`` (the rerank stage) on the device against ColBERT scores computed on the CPU;
4. ``encode_corpus_shard`` (the encode stage, streamed to Parquet) on the device against the CPU;
5. the dense and SPLADE families (mean pooling on an XLM-R encoder, last-token pooling on a
   Mistral decoder, a BERT masked LM) on the device, float32 and bfloat16, against the CPU;
6. Faiss on the GPU, when the installed Faiss has GPU support, against exact numpy top-k.

Prints one ``PASS``/``FAIL``/``SKIP`` line per check and exits 1 if any failed. Without a GPU,
``--device cpu`` runs the same checks on the CPU (a smoke test of the script).

    python benchmarks/gpu_checks.py                # on a GPU machine
    python benchmarks/gpu_checks.py --device cpu   # anywhere
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from encode_speed import sample_texts, write_corpus  # noqa: E402 - beside this script

from miracl_eval.encoders import bge_m3  # noqa: E402
from miracl_eval.encoders.bge_m3 import multivec_scores  # noqa: E402
from miracl_eval.encoders.encode import encode_corpus_shard  # noqa: E402
from miracl_eval.encoders.outputs import iter_vector_batches  # noqa: E402
from miracl_eval.encoders.registry import get_family  # noqa: E402
from miracl_eval.offline.tiny import build_tiny_checkpoint  # noqa: E402

FAILED: list[str] = []


def colbert_score(q: np.ndarray, p: np.ndarray) -> float:
    """The multi-vector score: the mean over query vectors of their best dot product with a passage vector."""
    return float((q @ p.T).max(axis=1).mean())


class M3:
    """A BGE-M3 encoder's three outputs of some texts (dense, lexical weight maps, colbert vectors)."""

    def __init__(self, encoder: bge_m3.BgeM3Encoder, texts: list[str], role: str = "passage") -> None:
        encoded = encoder.encode(texts, role, batch_size=16)  # type: ignore[arg-type]
        self.dense = encoded.dense
        self.sparse = [dict(zip(t.tolist(), w.tolist(), strict=True)) for t, w in encoded.sparse or []]
        self.colbert = encoder.encode_multivec(texts, role, batch_size=16)  # type: ignore[arg-type]


def check(name: str, fn: Callable[[], str]) -> None:
    """Run one check: ``fn`` returns a detail line or raises (AssertionError: FAIL; ImportError: SKIP)."""
    try:
        detail = fn()
    except ImportError as err:
        print(f"SKIP {name}: {err}", flush=True)
        return
    except Exception as err:  # noqa: BLE001 - report every failure and go on
        FAILED.append(name)
        print(f"FAIL {name}: {type(err).__name__}: {err}", flush=True)
        return
    print(f"PASS {name}: {detail}", flush=True)


def max_diff_sparse(a: list[dict], b: list[dict]) -> tuple[float, float]:
    """(largest weight difference over shared tokens, share of (text, token) pairs in both) of two weight-map lists.

    In half precision, weights near 0 can fall on either side of it: the share then drops below 1.
    """
    worst, shared, union = 0.0, 0, 0
    for x, y in zip(a, b, strict=True):
        x = {int(k): float(v) for k, v in x.items()}
        y = {int(k): float(v) for k, v in y.items()}
        both = x.keys() & y.keys()
        shared += len(both)
        union += len(x.keys() | y.keys())
        worst = max([worst, *(abs(x[k] - y[k]) for k in both)])
    return worst, shared / union if union else 1.0


def compare(ours, dense, sparse, colbert, atol: float, min_share: float) -> str:
    """Assert that an :class:`M3` equals (dense, lexical weights, colbert vectors) to ``atol``."""
    d = float(np.abs(ours.dense - dense).max())
    w, share = max_diff_sparse(sparse, ours.sparse)
    c = max(float(np.abs(x - y).max()) for x, y in zip(ours.colbert, colbert, strict=True))
    assert d <= atol and w <= 4 * atol and c <= atol and share >= min_share, (
        f"dense {d:.2e}, lexical {w:.2e} (shared {share:.2f}), colbert {c:.2e} over tolerance {atol}"
    )
    return f"max |diff| dense {d:.1e}, lexical {w:.1e} (tokens shared {share:.3f}), colbert {c:.1e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()

    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # float32 checks compare true float32
    torch.backends.cudnn.allow_tf32 = False
    dev = args.device
    if dev.startswith("cuda"):
        if not torch.cuda.is_available():
            sys.exit("gpu_checks: CUDA is not available here; use --device cpu for a smoke run")
        print(f"device: {torch.cuda.get_device_name()} (torch {torch.__version__})", flush=True)

    texts = sample_texts()
    queries = [t[:60] for t in texts[::7]]
    passages = texts[:120]
    with tempfile.TemporaryDirectory(prefix="gpu-checks-") as tmp:
        work = Path(tmp)

        def bge_m3_checks() -> None:
            """Checks 1-4, on one tiny BGE-M3 checkpoint (its setup failing fails them, not the script)."""
            ckpt = str(build_tiny_checkpoint(work / "tiny", texts))
            spec = get_family("bge-m3").resolve({"checkpoint": ckpt, "query_max_length": 32, "passage_max_length": 128})
            cpu = bge_m3.load(spec, device="cpu", dtype="float32", multivec=True)
            ref = M3(cpu, passages)
            f32 = bge_m3.load(spec, device=dev, dtype="float32", multivec=True)
            b16 = bge_m3.load(spec, device=dev, dtype="bfloat16", multivec=True)

            def flag_model(dtype: str):
                from FlagEmbedding import BGEM3FlagModel

                return BGEM3FlagModel(
                    ckpt,
                    use_fp16=False,
                    use_bf16=dtype == "bfloat16",
                    devices=dev,
                    batch_size=16,
                    passage_max_length=128,
                )

            def flag_encode(model):
                out = model.encode(
                    passages, batch_size=16, max_length=128, return_sparse=True, return_colbert_vecs=True
                )
                return np.asarray(out["dense_vecs"], dtype=np.float32), out["lexical_weights"], out["colbert_vecs"]

            ours32 = M3(f32, passages)
            check(
                "float32 on the device = our float32 on the CPU",
                lambda: compare(ours32, ref.dense, ref.sparse, ref.colbert, 1e-4, 1.0),
            )
            check(
                "float32 on the device = FlagEmbedding float32 on the device",
                lambda: compare(ours32, *flag_encode(flag_model("float32")), 1e-4, 1.0),
            )
            ours16 = M3(b16, passages)
            check(
                "bfloat16 on the device ~ float32 on the CPU",
                lambda: compare(ours16, ref.dense, ref.sparse, ref.colbert, 0.15, 0.95),
            )
            check(
                "bfloat16 on the device ~ FlagEmbedding bfloat16 on the device",
                lambda: compare(ours16, *flag_encode(flag_model("bfloat16")), 0.15, 0.95),
            )

            def rerank() -> str:
                q = cpu.encode_multivec(queries, "query", batch_size=16)
                docs = {f"d{i}": t for i, t in enumerate(passages)}
                pairs = [
                    (qi, f"d{pi}") for qi in range(len(queries)) for pi in range(len(passages)) if (qi + pi) % 5 == 0
                ]
                want = np.array([colbert_score(q[qi], ref.colbert[int(d[1:])]) for qi, d in pairs])
                got32 = multivec_scores(f32, queries, docs, pairs, 16)
                got16 = multivec_scores(b16, queries, docs, pairs, 16)
                e32, e16 = float(np.abs(got32 - want).max()), float(np.abs(got16 - want).max())
                assert e32 <= 1e-4 and e16 <= 0.05, f"float32 {e32:.2e}, bfloat16 {e16:.2e}"
                return f"{len(pairs)} pairs, max |diff| float32 {e32:.1e}, bfloat16 {e16:.1e}"

            check("multivec_scores on the device = ColBERT scores on the CPU", rerank)

            def shard() -> str:
                corpus = work / "corpus.parquet"
                write_corpus(corpus, 400)
                vectors = {}
                for name, device, dtype in (("cpu", "cpu", "float32"), ("dev", dev, "bfloat16")):
                    folder = work / name
                    folder.mkdir()
                    outputs = {"dense": folder / "d.parquet", "sparse": folder / "s.parquet"}
                    stats = encode_corpus_shard(corpus, 1, 200, outputs, spec, 32, device, dtype, dense_dtype="float16")
                    batches = list(iter_vector_batches(folder / "d.parquet"))
                    ids = [i for batch_ids, _ in batches for i in batch_ids.to_pylist()]
                    vectors[name] = (ids, np.concatenate([v for _, v in batches]))
                (ids_a, a), (ids_b, b) = vectors["cpu"], vectors["dev"]
                assert ids_a == ids_b, "docids differ"
                cos = float((a * b).sum(axis=1).min())
                assert cos >= 0.98, f"lowest cosine {cos:.4f}"
                return f"shard 1: {stats['rows']} rows, lowest cosine bfloat16 vs CPU {cos:.4f}"

            check("encode_corpus_shard on the device ~ the CPU", shard)

        try:
            bge_m3_checks()
        except Exception as err:  # noqa: BLE001 - the other checks still run
            FAILED.append("BGE-M3 setup")
            print(f"FAIL BGE-M3 setup (checks 1-4 not run): {type(err).__name__}: {err}", flush=True)

        def families() -> str:
            details = []
            for family, kind, settings in (
                ("dense", "xlm-r", {"pooling": "mean", "normalize": True}),
                ("dense", "decoder", {"pooling": "last", "normalize": True}),
                ("splade", "mlm", {}),
            ):
                folder = build_tiny_checkpoint(work / kind, texts, kind=kind)
                spec = get_family(family).resolve({"checkpoint": str(folder), "passage_max_length": 128, **settings})
                want = get_family(family).load(spec, device="cpu").encode(passages, "passage", 16)
                for dtype, atol, min_cos in (("float32", 1e-4, 0.9999), ("bfloat16", 1.0, 0.95)):
                    got = get_family(family).load(spec, device=dev, dtype=dtype).encode(passages, "passage", 16)
                    if family == "dense":
                        assert got.dense is not None and want.dense is not None
                        cos = float((got.dense * want.dense).sum(axis=1).min())
                        diff = float(np.abs(got.dense - want.dense).max())
                        assert cos >= min_cos and (dtype != "float32" or diff <= atol), f"{kind} {dtype}: {cos}, {diff}"
                        details.append(f"{kind} {dtype} lowest cosine {cos:.4f}")
                    else:
                        a = [dict(zip(t.tolist(), w.tolist(), strict=True)) for t, w in want.sparse or []]
                        b = [dict(zip(t.tolist(), w.tolist(), strict=True)) for t, w in got.sparse or []]
                        worst, share = max_diff_sparse(a, b)
                        assert worst <= atol and share >= (1.0 if dtype == "float32" else 0.7), f"{worst}, {share}"
                        details.append(f"{kind} {dtype} max |diff| {worst:.1e} (shared {share:.2f})")
            return "; ".join(details)

        check("dense and SPLADE families on the device ~ the CPU", families)

    def faiss_gpu() -> str:
        from miracl_eval.faiss import index as dense

        gpus = dense.num_gpus()
        if not gpus:
            raise ImportError("this Faiss has no GPU support (or sees no GPU)")
        import faiss

        rng = np.random.default_rng(0)
        xb = rng.standard_normal((20000, 64)).astype(np.float32)
        xq = rng.standard_normal((100, 64)).astype(np.float32)
        index = faiss.IndexFlatIP(64)
        index.add(xb)
        _, got = faiss.index_cpu_to_all_gpus(index).search(xq, 100)
        want = np.argsort(-(xq @ xb.T), axis=1, kind="stable")[:, :100]
        agree = float(np.mean([len(set(g) & set(w)) / 100 for g, w in zip(got, want, strict=True)]))
        assert agree >= 0.999, f"top-100 overlap {agree:.4f}"
        return f"{gpus} GPU(s), top-100 overlap with exact numpy {agree:.4f}"

    check("Faiss flat search on the GPU = exact numpy", faiss_gpu)
    print(f"{'FAILED: ' + ', '.join(FAILED) if FAILED else 'all checks passed'}", flush=True)
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
