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
6. a dense checkpoint's sentence-transformers module chain with LaBSE-like Dense heads (CLS pooling, a
   Tanh projection, then a GELU one, Normalize) on the device against ``SentenceTransformer`` on the same
   device (float32) and against our CPU vectors (bfloat16);
7. Faiss on the GPU, when the installed Faiss has GPU support, against exact numpy top-k;
8. the scores of a dense view in every storage (float32, float16, int8, binary) on the device
   (``miracl_eval.faiss.storage.TorchScores``: float16 natively in half precision, int8 and binary by
   ``torch._int_mm``) against exact numpy on the CPU: int8 and binary equal, float16 and float32 within
   float32 rounding; it says which float16 product the device's torch has;
9. ``block_search`` on the device, every storage and a binary view that rescores, merged: the run of
   exact numpy arithmetic on sentence-transformers' codes (quarter-valued vectors: every sum exact, many
   ties, ranked by docid), equal rank for rank.

Prints one ``PASS``/``FAIL``/``SKIP`` line per check and exits 1 if any failed. Without a GPU,
``--device cpu`` runs the same checks on the CPU (a smoke test of the script).

    python benchmarks/gpu_checks.py                # on a GPU machine
    python benchmarks/gpu_checks.py --device cpu   # anywhere
"""

from __future__ import annotations

import argparse
import itertools
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
from miracl_eval.offline.tiny import DenseHeadSpec, add_sentence_transformers_files, build_tiny_checkpoint  # noqa: E402

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


STORAGES = ("float32", "float16", "int8", "binary")


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _exact_scores(q: np.ndarray, p: np.ndarray, storage: str, ranges: np.ndarray | None) -> np.ndarray:
    """A view's scores in exact arithmetic on the CPU (float64): sentence-transformers' int8 and ubinary
    codes as integers, float16 passages widened, float32 as they are."""
    from miracl_eval.faiss.storage import encode

    if storage == "float16":
        return q.astype(np.float64) @ p.astype(np.float16).astype(np.float64).T
    if storage == "float32":
        return q.astype(np.float64) @ p.astype(np.float64).T
    a, b = encode(q, storage, ranges), encode(p, storage, ranges)
    if storage == "binary":
        d = q.shape[1]
        a, b = (np.unpackbits(x, axis=1)[:, :d].astype(np.int64) * 2 - 1 for x in (a, b))
    return (a.astype(np.int64) @ b.astype(np.int64).T).astype(np.float64)


def view_scores(dev: str) -> str:
    """Check 7: TorchScores on the device against exact numpy, 9 queries (padded to _int_mm's 32 rows)
    and 300; 5,003 passages in slabs of 1,024 (the last one padded); 1,024 and 70 dimensions (padded)."""
    import torch

    from miracl_eval.faiss.storage import Stored, TorchScores, int8_ranges

    torch.backends.cuda.matmul.allow_tf32 = False
    worst = dict.fromkeys(STORAGES, 0.0)
    half = ""
    for d in (1024, 70):
        rng = np.random.default_rng(d)
        corpus, queries = _unit(rng, 5003, d), _unit(rng, 300, d)
        ranges = int8_ranges([corpus])
        for storage in STORAGES:
            scorer = TorchScores(Stored(corpus, storage, ranges), dev, slab=1024)
            if storage == "float16":
                half = "in half-precision products" if scorer.half_native else "widened to float32"
            for q in (queries[:9], queries):
                got = scorer.scores(q).cpu().numpy().astype(np.float64)
                want = _exact_scores(q, corpus, storage, ranges)
                if storage in ("int8", "binary"):
                    assert np.array_equal(got, want), f"{storage} at {d} dimensions: not exact"
                diff = float(np.abs(got - want).max())
                assert diff <= 1e-5, f"{storage} at {d} dimensions: max |diff| {diff:.1e}"
                worst[storage] = max(worst[storage], diff)
    return (f"int8 and binary exact; float16 {half}: max |diff| {worst['float16']:.1e}, "
            f"float32 {worst['float32']:.1e}")  # fmt: skip


def view_blocks(dev: str, work: Path) -> str:
    """Check 8: block_search on the device (two blocks of three shards), merged, against the ranking of exact
    numpy scores (rank_table: score descending, ties by docid). On the CPU (a dry run: the device image has
    no Faiss) the GPU path runs with CPU tensors."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from miracl_eval import schemas
    from miracl_eval.faiss import blocks
    from miracl_eval.faiss import storage as storage_module
    from miracl_eval.runs import rank_table

    dim = 64
    rng = np.random.default_rng(7)
    vecs = rng.integers(-2, 3, size=(3000, dim)).astype(np.float32) / 4  # every product and sum exact
    vecs[100:140] = vecs[0]  # duplicates: ties
    docids = [f"d{rng.integers(1_000_000)}-{i}" for i in range(3000)]

    def write(path: Path, key: str, ids: list[str], v: np.ndarray) -> Path:
        values = pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), dim)
        pq.write_table(
            pa.table({key: pa.array(ids), "vector": values}, schema=schemas.dense_schema(dim, key=key)), path
        )
        return path

    cuts = [0, 700, 1900, 3000]
    shards = [
        write(work / f"s{i}.parquet", "docid", docids[a:b], vecs[a:b])
        for i, (a, b) in enumerate(itertools.pairwise(cuts))
    ]
    q = rng.integers(-2, 3, size=(37, dim)).astype(np.float32) / 4
    qpath = write(work / "q.parquet", "qid", [f"q{i}" for i in range(37)], q)
    ranges = work / "ranges.parquet"
    blocks.calibrate(shards, ranges, {}, sample=10_000)
    saved = blocks._resolve, blocks.TorchScores
    device = dev
    if dev == "cpu":  # a dry run: the GPU path with CPU tensors
        blocks._resolve = lambda _device: "cuda:stand-in"  # type: ignore[assignment]
        blocks.TorchScores = lambda stored, _device: storage_module.TorchScores(stored, "cpu")  # type: ignore[assignment,misc]
        device = "cuda"
    checked = []
    try:
        for storage, rescore, hits in [(s, 0, 30) for s in STORAGES] + [("binary", 25, 100)]:
            files = []
            for i, group in enumerate((shards[:2], shards[2:])):
                out = work / f"{storage}-{rescore}-{i}.parquet"
                stats = blocks.block_search(group, {"x": qpath}, out, hits=hits, device=device, view={"storage": storage},
                                            ranges=ranges if storage == "int8" else None, rescore=rescore)  # fmt: skip
                assert stats["device"].startswith("cuda"), stats
                files.append(out)
            run = work / f"{storage}-{rescore}.parquet"
            blocks.merge_blocks(files, "x", run, work / "run.trec", hits=hits, rescore=rescore)
            got = pq.read_table(run)
            qids = pa.array([f"q{i}" for i in range(len(q))])
            qpos = np.repeat(np.arange(len(q)), len(vecs))
            exact = _exact_scores(q, vecs, storage, blocks.read_ranges(ranges))
            want = rank_table(qids, qpos, pa.array(docids * len(q)), exact.ravel(), depth=rescore or hits)
            if rescore:  # the top `rescore` by the stored scores, ranked by float32
                index = {d: i for i, d in enumerate(docids)}
                rows = np.array([int(x[1:]) for x in want["qid"].to_pylist()])
                floats = (q.astype(np.float64) @ vecs.astype(np.float64).T)[
                    rows, [index[d] for d in want["docid"].to_pylist()]
                ]
                want = rank_table(qids, rows, want["docid"], floats, depth=hits)
            assert got.select(["qid", "docid", "rank"]).equals(want.select(["qid", "docid", "rank"])), storage
            assert np.array_equal(got["score"].to_numpy(), want["score"].to_numpy()), storage
            checked.append(f"{storage}{' rescored' if rescore else ''}")
    finally:
        blocks._resolve, blocks.TorchScores = saved  # type: ignore[assignment,misc]
    return f"{len(q)} queries x 3,000 passages in two blocks: {', '.join(checked)} equal, rank for rank"


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
                # float32 on an H200 against the CPU (2026-12-04): dense vectors within 5.0e-6, SPLADE's weights
                # (log(1 + relu(logits)) over a vocabulary) within 1.0e-4: GPU and CPU kernels sum in other
                # orders; the bound leaves five times that
                for dtype, atol, min_cos in (("float32", 5e-4, 0.9999), ("bfloat16", 1.0, 0.95)):
                    got = get_family(family).load(spec, device=dev, dtype=dtype).encode(passages, "passage", 16)
                    if family == "dense":
                        assert got.dense is not None and want.dense is not None
                        cos = float((got.dense * want.dense).sum(axis=1).min())
                        diff = float(np.abs(got.dense - want.dense).max())
                        assert cos >= min_cos and (dtype != "float32" or diff <= atol), f"{kind} {dtype}: {cos}, {diff}"
                        details.append(f"{kind} {dtype} lowest cosine {cos:.4f}, max |diff| {diff:.1e}")
                    else:
                        a = [dict(zip(t.tolist(), w.tolist(), strict=True)) for t, w in want.sparse or []]
                        b = [dict(zip(t.tolist(), w.tolist(), strict=True)) for t, w in got.sparse or []]
                        worst, share = max_diff_sparse(a, b)
                        assert worst <= atol and share >= (1.0 if dtype == "float32" else 0.7), f"{worst}, {share}"
                        details.append(f"{kind} {dtype} max |diff| {worst:.1e} (shared {share:.2f})")
            return "; ".join(details)

        check("dense and SPLADE families on the device ~ the CPU", families)

        def dense_heads() -> str:
            folder = build_tiny_checkpoint(work / "labse-like", texts, kind="xlm-r")
            heads = [DenseHeadSpec(24), DenseHeadSpec(16, "torch.nn.modules.activation.GELU")]
            add_sentence_transformers_files(folder, pooling="cls", dense=heads, normalize=True)
            family = get_family("dense")
            spec = family.resolve({"checkpoint": str(folder), "query_max_length": 64, "passage_max_length": 128})
            want = family.load(spec, device="cpu").encode(passages, "passage", 16).dense
            got32 = family.load(spec, device=dev, dtype="float32").encode(passages, "passage", 16).dense
            got16 = family.load(spec, device=dev, dtype="bfloat16").encode(passages, "passage", 16).dense
            assert want is not None and got32 is not None and got16 is not None and want.shape[1] == 16
            from sentence_transformers import SentenceTransformer

            st = SentenceTransformer(str(folder), device=dev)
            st.max_seq_length = 128
            ref = st.encode_document(passages, batch_size=16, convert_to_numpy=True)
            e_st = float(np.abs(got32 - ref).max())
            e_cpu = float(np.abs(got32 - want).max())
            cos16 = float((got16 * want).sum(axis=1).min())
            assert e_st <= 1e-4 and e_cpu <= 1e-4 and cos16 >= 0.95, f"{e_st:.1e}, {e_cpu:.1e}, {cos16:.4f}"
            return (
                f"16-dim vectors after two heads: float32 max |diff| vs SentenceTransformer {e_st:.1e}, vs CPU "
                f"{e_cpu:.1e}; bfloat16 lowest cosine vs CPU {cos16:.4f}"
            )

        check("dense heads (sentence-transformers chain) on the device = SentenceTransformer", dense_heads)

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
    check("dense views' scores on the device = exact numpy (float32, float16, int8, binary)", lambda: view_scores(dev))
    with tempfile.TemporaryDirectory(prefix="gpu-checks-views-") as tmp:
        check("block_search of every storage on the device = exact numpy ranking", lambda: view_blocks(dev, Path(tmp)))
    print(f"{'FAILED: ' + ', '.join(FAILED) if FAILED else 'all checks passed'}", flush=True)
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
