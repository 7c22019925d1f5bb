"""Views of one encoding (``view_of``): me5-small searched at 128 of its 384 dimensions, in int8 and in binary,
rows of one run beside the full model, each equal to an independent search of the same vectors (Faiss's
IndexFlatIP and IndexBinaryFlat, sentence-transformers' quantize_embeddings)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from miracl_eval.encoders.outputs import iter_vector_batches
from miracl_eval.evaluation.published import read_results_table
from miracl_eval.runs import read_run
from tests.helpers import planned_jobs, sample_config, snakemake, write_config

LANGS = ["sw", "yo"]
VIEWS = {
    "me5-small@128": {"view_of": "me5-small", "dimensions": 128},
    "me5-small@int8": {"view_of": "me5-small", "storage": "int8"},
    "me5-small@bin": {"view_of": "me5-small", "storage": "binary"},
    "me5-small@bin-rescored": {"view_of": "me5-small", "storage": "binary", "rescore": 30},
}
METHODS = ["me5-small/dense", *(f"{v}/dense" for v in VIEWS)]


def config(instruction: dict | None = None, **views: dict) -> dict:
    return sample_config(
        LANGS, threads=1, methods=METHODS, hybrids={}, rerankers={}, preload=True,
        # a task instruction in the query template (what instruction-tuned models have; meaningless for me5-small)
        models={"me5-small": {"checkpoint": "resources/models/me5-small", "query_template": "query: {task}: {query}",
                              **(instruction or {})}, **VIEWS, **views},
        encoder={"device": "cpu", "shard_size": 60, "batch_size": 16},
        dense_index={"block_size": 60},  # three search blocks per language: the merge is exercised
    )  # fmt: skip


@pytest.fixture(scope="module")
def views_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("views")
    snakemake(work, write_config(work, config()), "results/miracl_ndcg.tsv", timeout=900)
    return work


def vectors(work: Path, lang: str, what: str) -> tuple[list[str], np.ndarray]:
    """me5-small's stored vectors (passages of the language's corpus, or its queries)."""
    root = work / "resources/miracl/encoded/me5-small"
    files = sorted((root / "corpus" / lang / "dense").glob("*.parquet")) if what == "passages" else [
        root / "queries" / lang / "dense.parquet"]  # fmt: skip
    key = "docid" if what == "passages" else "qid"
    ids: list[str] = []
    vecs = []
    for batch_ids, v in iter_vector_batches(files, key=key):
        ids += batch_ids.to_pylist()
        vecs.append(v)
    return ids, np.concatenate(vecs).astype(np.float32)


def ranked(ids: list[str], qids: list[str], scores: np.ndarray) -> dict[str, list[tuple[str, float]]]:
    """Each query's passages by score (descending), ties by docid: as every run of the workflow ranks."""
    return {
        q: sorted(((d, float(s)) for d, s in zip(ids, row, strict=True)), key=lambda x: (-x[1], x[0]))
        for q, row in zip(qids, scores, strict=True)
    }


def ours(work: Path, lang: str, view: str) -> dict[str, list[tuple[str, float]]]:
    run = read_run(work / "runs/miracl" / lang / view / "dense.parquet").to_pylist()
    out: dict[str, list[tuple[str, float]]] = {}
    for r in sorted(run, key=lambda r: (r["qid"], r["rank"])):
        out.setdefault(r["qid"], []).append((r["docid"], r["score"]))
    return out


def same(got: dict, want: dict, tol: float) -> None:
    """The same ranking; with ``tol`` (float sums in another order), the same passages each within ``tol``
    of its score, ours ranked by ours (two passages closer than ``tol`` may swap)."""
    assert set(got) == set(want)
    for q in want:
        if tol == 0:
            assert got[q] == want[q], q
            continue
        mine = dict(got[q])
        assert set(mine) == {d for d, _ in want[q]}, q
        np.testing.assert_allclose([mine[d] for d, _ in want[q]], [s for _, s in want[q]], atol=tol, rtol=0)
        assert got[q] == sorted(got[q], key=lambda x: (-x[1], x[0])), q


def test_only_the_model_itself_is_encoded(views_run: Path) -> None:
    assert sorted(p.name for p in (views_run / "resources/miracl/encoded").iterdir()) == ["me5-small"]
    table = read_results_table(views_run / "results/miracl_ndcg.tsv")
    assert list(table) == METHODS


def test_truncated_view_equals_faiss_on_the_renormalised_first_dimensions(views_run: Path) -> None:
    faiss = pytest.importorskip("faiss")
    for lang in LANGS:
        ids, p = vectors(views_run, lang, "passages")
        qids, q = vectors(views_run, lang, "queries")
        assert p.shape[1] == 384
        p128, q128 = (x[:, :128] / np.linalg.norm(x[:, :128], axis=1, keepdims=True) for x in (p, q))
        index = faiss.IndexFlatIP(128)
        index.add(np.ascontiguousarray(p128, dtype=np.float32))
        scores, cols = index.search(np.ascontiguousarray(q128, dtype=np.float32), len(ids))
        full = np.empty_like(scores)
        np.put_along_axis(full, cols, scores, axis=1)
        # Faiss's and numpy's float32 sums may differ in the last bits: ranks are compared where no two
        # passages are closer than that
        same(ours(views_run, lang, "me5-small@128"), ranked(ids, qids, full), 1e-5)


def test_int8_view_equals_sentence_transformers_quantisation(views_run: Path) -> None:
    quant = pytest.importorskip("sentence_transformers.util.quantization")
    for lang in LANGS:
        ids, p = vectors(views_run, lang, "passages")
        qids, q = vectors(views_run, lang, "queries")
        # fewer passages than calibration_passages: every passage calibrates
        codes = quant.quantize_embeddings(p, "int8", calibration_embeddings=p).astype(np.int64)
        qcodes = quant.quantize_embeddings(q, "int8", calibration_embeddings=p).astype(np.int64)
        same(ours(views_run, lang, "me5-small@int8"), ranked(ids, qids, (qcodes @ codes.T).astype(np.float64)), 0)


def test_binary_view_equals_faiss_hamming_search(views_run: Path) -> None:
    faiss = pytest.importorskip("faiss")
    quant = pytest.importorskip("sentence_transformers.util.quantization")
    for lang in LANGS:
        ids, p = vectors(views_run, lang, "passages")
        qids, q = vectors(views_run, lang, "queries")
        bits, qbits = quant.quantize_embeddings(p, "ubinary"), quant.quantize_embeddings(q, "ubinary")
        index = faiss.IndexBinaryFlat(384)
        index.add(bits)
        hamming, cols = index.search(qbits, len(ids))
        full = np.empty(hamming.shape, dtype=np.float64)
        np.put_along_axis(full, cols, 384 - 2 * hamming.astype(np.float64), axis=1)
        same(ours(views_run, lang, "me5-small@bin"), ranked(ids, qids, full), 0)


def test_rescoring_ranks_the_top_hamming_hits_by_their_float_scores(views_run: Path) -> None:
    """sentence-transformers' rescoring (its semantic search with rescore): the top `rescore` passages by
    the binary scores (all blocks together, ties by docid), ranked by the float32 query . passage."""
    quant = pytest.importorskip("sentence_transformers.util.quantization")
    for lang in LANGS:
        ids, p = vectors(views_run, lang, "passages")
        qids, q = vectors(views_run, lang, "queries")
        bits = quant.quantize_embeddings(p, "ubinary")
        signs = lambda b: np.unpackbits(b, axis=1)[:, :384].astype(np.int64) * 2 - 1  # noqa: E731
        binary = ranked(ids, qids, (signs(quant.quantize_embeddings(q, "ubinary")) @ signs(bits).T).astype(np.float64))
        floats = q @ p.T
        index = {d: i for i, d in enumerate(ids)}
        want = {}
        for row, qid in enumerate(qids):
            top = [d for d, _ in binary[qid][:30]]
            want[qid] = sorted(((d, float(floats[row, index[d]])) for d in top), key=lambda x: (-x[1], x[0]))
        got = ours(views_run, lang, "me5-small@bin-rescored")
        assert set(got) == set(want)
        for qid in want:  # float32 products summed in other orders: ranks compared through the scores
            assert {d for d, _ in got[qid]} == {d for d, _ in want[qid]}, qid
            mine = dict(got[qid])
            np.testing.assert_allclose([mine[d] for d, _ in want[qid]], [s for _, s in want[qid]], atol=1e-6)
            assert [s for _, s in got[qid]] == sorted((s for _, s in got[qid]), reverse=True)


def test_a_views_setting_reruns_its_search_only(views_run: Path) -> None:
    other = write_config(views_run, config(**{"me5-small@128": {"view_of": "me5-small", "dimensions": 64}}), "c64.yaml")
    jobs = planned_jobs(snakemake(views_run, other, "results/miracl_ndcg.tsv", args=("-n",)))
    assert jobs == {"dense_block_search": 3 * len(LANGS), "dense_merge": len(LANGS), "evaluate": 1, "tables": 1}


def test_a_new_task_instruction_re_encodes_the_queries_only(views_run: Path) -> None:
    other = write_config(views_run, config({"query_instruction": "Find the passage"}), "task.yaml")
    jobs = planned_jobs(snakemake(views_run, other, "results/miracl_ndcg.tsv", args=("-n",)))
    assert not any(job.startswith("encode_corpus") for job in jobs) and "int8_ranges" not in jobs
    assert sum(n for job, n in jobs.items() if job.startswith("encode_queries")) == len(LANGS)
    assert jobs["dense_block_search"] == 3 * len(LANGS) * len(METHODS)  # every view searches the new queries
