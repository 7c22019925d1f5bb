"""Faiss dense retrieval: exact flat search against numpy, approximate indexes, errors, atomicity."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from miracl_eval import schemas
from miracl_eval.encoders.outputs import iter_vector_batches
from miracl_eval.errors import InputError
from miracl_eval.faiss.index import build_dense_index
from miracl_eval.faiss.search import dense_search
from miracl_eval.runs import rank_table, read_run
from tests.helpers import REPO, load_vectors, rank_hits, read_trec, write_vectors

DIM = 24


def write_shards(folder: Path, ids: list[str], vecs: np.ndarray, n_shards: int, dtype: str = "float32") -> list[Path]:
    bounds = np.linspace(0, len(ids), n_shards + 1).astype(int)
    return [
        write_vectors(folder / f"shard-{i:02d}.parquet", ids[lo:hi], vecs[lo:hi], dtype)
        for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:], strict=True))
    ]


def exact_top(queries: np.ndarray, docs: np.ndarray, ids: list[str], k: int) -> list[list[tuple[str, float]]]:
    scores = queries.astype(np.float64) @ docs.astype(np.float64).T
    out = []
    for row in scores:
        order = sorted(range(len(ids)), key=lambda j: (-row[j], ids[j]))[:k]
        out.append([(ids[j], float(row[j])) for j in order])
    return out


def run_by_query(table: pa.Table) -> dict[str, list[tuple[str, float]]]:
    out: dict[str, list[tuple[str, float]]] = {}
    for row in table.to_pylist():
        out.setdefault(row["qid"], []).append((row["docid"], row["score"]))
    return out


@pytest.fixture
def corpus(tmp_path: Path):
    rng = np.random.default_rng(7)
    docs = rng.standard_normal((600, DIM)).astype(np.float32)
    ids = [f"doc{i}#{i % 3}" for i in range(600)]
    queries = rng.standard_normal((25, DIM)).astype(np.float32)
    qids = [str(i) for i in range(24)] + [ids[5]]  # the last qid equals a docid
    return ids, docs, qids, queries


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_flat_topk_equals_numpy(tmp_path: Path, corpus, dtype: str) -> None:
    ids, docs, qids, queries = corpus
    shards = write_shards(tmp_path, ids, docs, 4, dtype)
    qpath = write_vectors(tmp_path / "q.parquet", qids, queries, dtype, key="qid")
    n = build_dense_index(shards, tmp_path / "idx.faiss", tmp_path / "docids.parquet", use_gpu=True)
    assert n == 600
    assert pq.read_table(tmp_path / "docids.parquet").column("docid").to_pylist() == ids
    k = 40
    nq = dense_search(
        tmp_path / "idx.faiss",
        tmp_path / "docids.parquet",
        qpath,
        tmp_path / "run.parquet",
        tmp_path / "run.trec",
        k=k,
        batch=7,
    )
    assert nq == len(qids)
    run = read_run(tmp_path / "run.parquet")
    assert run.column("qid").unique().to_pylist() == qids  # query order kept
    got = run_by_query(run)
    stored_docs = docs.astype(dtype).astype(np.float32)
    stored_q = queries.astype(dtype).astype(np.float32)
    want = exact_top(stored_q, stored_docs, ids, k + 1)
    # the order is compared exactly: no two of the top k + 1 scores are within float32 rounding of each
    # other (their smallest gap is 2.4e-4 for these vectors; a sum of 24 products rounds by ~1e-6)
    assert min(a[1] - b[1] for row in want for a, b in zip(row, row[1:], strict=False)) > 1e-4
    for qid, expected in zip(qids, [row[:k] for row in want], strict=True):
        assert [d for d, _ in got[qid]] == [d for d, _ in expected]
        np.testing.assert_allclose([s for _, s in got[qid]], [s for _, s in expected], rtol=1e-5, atol=1e-5)
    # The TREC file says the same as the Parquet run.
    trec = read_trec(tmp_path / "run.trec")
    assert trec.column("docid").to_pylist() == run.column("docid").to_pylist()
    assert trec.column("score").to_pylist() == run.column("score").to_pylist()
    assert {line.split()[5] for line in (tmp_path / "run.trec").read_text().splitlines()} == {"dense"}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_flat_index_filled_in_place_equals_faiss_add(tmp_path: Path, corpus, dtype: str, monkeypatch) -> None:
    # The flat index's storage is sized once and filled batch by batch (batches of 64 rows here,
    # crossing the shards' bounds): the file must be Faiss's own index of the same vectors, byte for byte.
    import faiss

    import miracl_eval.faiss.index as dense

    monkeypatch.setattr(dense, "ADD_BATCH", 64)
    ids, docs, _, _ = corpus
    shards = write_shards(tmp_path, ids, docs, 3, dtype)
    assert build_dense_index(shards, tmp_path / "idx", tmp_path / "docids.parquet") == len(ids)
    reference = faiss.IndexFlatIP(DIM)
    reference.add(docs.astype(dtype).astype(np.float32))
    ours = faiss.read_index(str(tmp_path / "idx"))
    assert ours.ntotal == len(ids)
    assert faiss.serialize_index(ours).tobytes() == faiss.serialize_index(reference).tobytes()
    assert pq.read_table(tmp_path / "docids.parquet").column("docid").to_pylist() == ids


def test_shards_holding_more_vectors_than_their_metadata_fail(tmp_path: Path, corpus, monkeypatch) -> None:
    import miracl_eval.faiss.index as dense

    ids, docs, _, _ = corpus
    shards = write_shards(tmp_path, ids, docs, 2)
    monkeypatch.setattr(dense.schemas, "count_rows", lambda path: 100)  # metadata that undercounts
    with pytest.raises(dense.MiraclEvalError, match="more than the 200 vectors"):
        build_dense_index(shards, tmp_path / "idx", tmp_path / "docids.parquet")
    assert not (tmp_path / "idx").exists() and not (tmp_path / "docids.parquet").exists()


def test_ties_by_docid_and_qid_equal_to_docid(tmp_path: Path) -> None:
    # Integer-valued vectors: dot products are exact in float32, so ties are exact ties.
    ids = ["d9", "d1", "q1", "d5", "d0"]
    docs = np.array([[1, 0], [1, 0], [1, 0], [0, 1], [2, 0]], dtype=np.float32)
    shards = write_shards(tmp_path, ids, docs, 2)
    qpath = write_vectors(tmp_path / "q.parquet", ["q1"], np.array([[3, 1]], dtype=np.float32), key="qid")
    build_dense_index(shards, tmp_path / "idx", tmp_path / "docids.parquet")
    dense_search(tmp_path / "idx", tmp_path / "docids.parquet", qpath, tmp_path / "r.parquet", tmp_path / "r.trec", k=4)
    run = read_run(tmp_path / "r.parquet").to_pylist()
    assert [(r["docid"], r["rank"], r["score"]) for r in run] == [
        ("d0", 1, 6.0),
        ("d1", 2, 3.0),
        ("d9", 3, 3.0),
        ("q1", 4, 3.0),  # the docid equal to the qid is kept
    ]
    # k beyond the corpus: Faiss's -1 labels are dropped.
    dense_search(
        tmp_path / "idx", tmp_path / "docids.parquet", qpath, tmp_path / "r2.parquet", tmp_path / "r2.trec", k=50
    )
    assert read_run(tmp_path / "r2.parquet").num_rows == 5


def test_rank_table_matches_rank_hits() -> None:
    rng = np.random.default_rng(3)
    qids = ["b", "a", "10020#0", "c"]
    qpos = rng.integers(0, 3, size=300)  # "c" has no hits
    docids = [f"d{rng.integers(0, 80)}" for _ in range(300)]
    scores = rng.integers(0, 5, size=300).astype(np.float64) / 4  # many ties
    # rank_hits wants one hit per (qid, docid); de-duplicate first.
    seen, keep = set(), []
    for i, (q, d) in enumerate(zip(qpos, docids, strict=True)):
        if (q, d) not in seen:
            seen.add((q, d))
            keep.append(i)
    qpos, docids, scores = qpos[keep], [docids[i] for i in keep], scores[keep]
    hits: dict[str, list[tuple[str, float]]] = {q: [] for q in qids[:3]}
    for q, d, s in zip(qpos, docids, scores, strict=True):
        hits[qids[q]].append((d, s))
    for depth in (None, 5):
        assert rank_table(qids, qpos, pa.array(docids), scores, depth=depth).equals(rank_hits(hits, depth=depth))


def test_qid_subset(tmp_path: Path, corpus) -> None:
    ids, docs, qids, queries = corpus
    shards = write_shards(tmp_path, ids, docs, 2)
    qpath = write_vectors(tmp_path / "q.parquet", qids, queries, key="qid")
    build_dense_index(shards, tmp_path / "idx", tmp_path / "docids.parquet")
    subset = {qids[3], qids[-1], "absent"}
    n = dense_search(
        tmp_path / "idx",
        tmp_path / "docids.parquet",
        qpath,
        tmp_path / "r.parquet",
        tmp_path / "r.trec",
        k=5,
        qid_subset=subset,
    )
    assert n == 2
    assert read_run(tmp_path / "r.parquet").column("qid").unique().to_pylist() == [qids[3], qids[-1]]


def recall(run: pa.Table, exact: list[list[tuple[str, float]]], qids: list[str], k: int) -> float:
    got = run_by_query(run)
    hits = [len({d for d, _ in got.get(q, [])[:k]} & {d for d, _ in e[:k]}) for q, e in zip(qids, exact, strict=True)]
    return sum(hits) / (k * len(qids))


@pytest.mark.parametrize(
    ("index_type", "params", "bound"),
    [("hnsw", {"hnsw_m": 16}, 0.95), ("ivfpq", {"ivf_lists": 4096, "pq_m": 12}, 0.5)],
)
def test_approximate_indexes(tmp_path: Path, index_type: str, params: dict, bound: float) -> None:
    rng = np.random.default_rng(11)
    # Clustered data, as real embeddings are, so PQ has structure to find.
    centers = rng.standard_normal((20, DIM)).astype(np.float32)
    docs = (centers[rng.integers(0, 20, 3000)] + 0.3 * rng.standard_normal((3000, DIM))).astype(np.float32)
    ids = [f"p{i}" for i in range(3000)]
    queries = (centers[rng.integers(0, 20, 30)] + 0.3 * rng.standard_normal((30, DIM))).astype(np.float32)
    qids = [f"q{i}" for i in range(30)]
    shards = write_shards(tmp_path, ids, docs, 3)
    qpath = write_vectors(tmp_path / "q.parquet", qids, queries, key="qid")
    build_dense_index(shards, tmp_path / "idx", tmp_path / "docids.parquet", index_type=index_type, **params)
    k = 10
    dense_search(tmp_path / "idx", tmp_path / "docids.parquet", qpath, tmp_path / "r.parquet", tmp_path / "r.trec", k=k)
    run = read_run(tmp_path / "r.parquet")
    assert run.column("qid").unique().to_pylist() == qids
    assert recall(run, exact_top(queries, docs, ids, k), qids, k) >= bound


def test_mmap_search_same_run(tmp_path: Path, corpus) -> None:
    ids, docs, qids, queries = corpus
    shards = write_shards(tmp_path, ids, docs, 2)
    qpath = write_vectors(tmp_path / "q.parquet", qids, queries, key="qid")
    build_dense_index(shards, tmp_path / "idx", tmp_path / "docids.parquet")
    for name, mmap in (("a", False), ("b", True)):
        dense_search(
            tmp_path / "idx",
            tmp_path / "docids.parquet",
            qpath,
            tmp_path / f"{name}.parquet",
            tmp_path / f"{name}.trec",
            k=10,
            mmap=mmap,
        )
    assert read_run(tmp_path / "a.parquet").equals(read_run(tmp_path / "b.parquet"))


def _no_outputs(folder: Path) -> None:
    left = sorted(
        p.name
        for p in folder.iterdir()
        if p.name.startswith(".") or p.name.startswith("idx") or p.name.startswith("docids")
    )
    assert left == []


@pytest.mark.parametrize("damage", ["truncate", "garble"])
def test_corrupt_shard_names_file_and_writes_nothing(tmp_path: Path, corpus, damage: str) -> None:
    ids, docs, _, _ = corpus
    shards = write_shards(tmp_path, ids, docs, 3)
    raw = shards[1].read_bytes()
    if damage == "truncate":
        shards[1].write_bytes(raw[: len(raw) // 2])
    else:  # keep the footer, destroy the compressed data
        shards[1].write_bytes(raw[:200] + bytes(4000) + raw[4200:])
    with pytest.raises(InputError) as err:
        build_dense_index(shards, tmp_path / "idx", tmp_path / "docids.parquet")
    assert str(shards[1]) in str(err.value)
    _no_outputs(tmp_path)


def test_dimension_mismatch(tmp_path: Path) -> None:
    a = write_vectors(tmp_path / "a.parquet", ["x"], np.ones((1, 4), np.float32))
    b = write_vectors(tmp_path / "b.parquet", ["y"], np.ones((1, 5), np.float32))
    with pytest.raises(InputError, match="dimension 5, expected 4"):
        build_dense_index([a, b], tmp_path / "idx", tmp_path / "docids.parquet")
    _no_outputs(tmp_path)


def test_failure_after_start_leaves_no_output(tmp_path: Path, corpus, monkeypatch) -> None:
    ids, docs, _, _ = corpus
    shards = write_shards(tmp_path, ids, docs, 2)
    import faiss

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(faiss, "write_index", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        build_dense_index(shards, tmp_path / "idx", tmp_path / "docids.parquet")
    _no_outputs(tmp_path)


def test_search_checks_inputs(tmp_path: Path, corpus) -> None:
    ids, docs, qids, queries = corpus
    shards = write_shards(tmp_path, ids, docs, 1)
    build_dense_index(shards, tmp_path / "idx", tmp_path / "docids.parquet")
    wrong_dim = write_vectors(tmp_path / "q.parquet", ["q"], np.ones((1, DIM + 1), np.float32), key="qid")
    with pytest.raises(InputError, match="dimension"):
        dense_search(
            tmp_path / "idx", tmp_path / "docids.parquet", wrong_dim, tmp_path / "r.parquet", tmp_path / "r.trec"
        )
    schemas.write_table(pa.table({"docid": ids[:10]}), tmp_path / "few.parquet", pa.schema([("docid", pa.string())]))
    good_q = write_vectors(tmp_path / "q2.parquet", qids, queries, key="qid")
    with pytest.raises(InputError, match="10 docids for an index of 600"):
        dense_search(tmp_path / "idx", tmp_path / "few.parquet", good_q, tmp_path / "r.parquet", tmp_path / "r.trec")
    assert not (tmp_path / "r.parquet").exists() and not (tmp_path / "r.trec").exists()


def test_load_and_iter_vectors(tmp_path: Path) -> None:
    vecs = np.arange(12, dtype=np.float32).reshape(4, 3)
    shards = write_shards(tmp_path, ["a", "b", "c", "d"], vecs, 2, "float16")
    ids, arr = load_vectors(shards)
    assert ids == ["a", "b", "c", "d"] and arr.dtype == np.float32
    np.testing.assert_array_equal(arr, vecs)
    batches = list(iter_vector_batches(shards, batch_rows=1, dtype=None))
    assert len(batches) == 4 and batches[0][1].dtype == np.float16


def test_ivfpq_tiny_corpus_trains(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    docs = rng.standard_normal((60, 8)).astype(np.float32)
    ids = [f"t{i}" for i in range(60)]
    shards = write_shards(tmp_path, ids, docs, 2)
    qpath = write_vectors(tmp_path / "q.parquet", ["q"], docs[:1], key="qid")
    assert build_dense_index(shards, tmp_path / "idx", tmp_path / "d.parquet", index_type="ivfpq", pq_m=4) == 60
    dense_search(tmp_path / "idx", tmp_path / "d.parquet", qpath, tmp_path / "r.parquet", tmp_path / "r.trec", k=5)
    assert read_run(tmp_path / "r.parquet").num_rows == 5


def test_bad_index_type_and_pq_m(tmp_path: Path) -> None:
    shard = write_vectors(tmp_path / "a.parquet", ["x", "y"], np.ones((2, 6), np.float32))
    with pytest.raises(ValueError, match="index_type"):
        build_dense_index([shard], tmp_path / "idx", tmp_path / "d.parquet", index_type="lsh")
    with pytest.raises(ValueError, match="pq_m=4 must divide"):
        build_dense_index([shard], tmp_path / "idx", tmp_path / "d.parquet", index_type="ivfpq", pq_m=4)
    _no_outputs(tmp_path)


def test_gpu_code_path_with_a_stand_in(tmp_path: Path, corpus, monkeypatch, caplog) -> None:
    """No GPU here: stand in for Faiss's GPU cloner to run the GPU branches' logic on the CPU."""
    import faiss

    from miracl_eval.faiss import index as dense

    ids, docs, qids, queries = corpus
    shards = write_shards(tmp_path, ids, docs, 2)
    qpath = write_vectors(tmp_path / "q.parquet", qids, queries, key="qid")
    build_dense_index(shards, tmp_path / "flat", tmp_path / "d.parquet", use_gpu=False)
    dense_search(
        tmp_path / "flat",
        tmp_path / "d.parquet",
        qpath,
        tmp_path / "cpu.parquet",
        tmp_path / "cpu.trec",
        k=10,
        use_gpu=False,
    )

    clones: list = []

    class Options:
        shard = False
        useFloat16 = False

    class ParameterSpace:
        def set_index_parameter(self, index, name, value):
            setattr(faiss.extract_index_ivf(index), name, value)

    def to_all_gpus(index, co=None):
        clones.append((type(index).__name__, co))
        return index

    monkeypatch.setattr(dense, "num_gpus", lambda: 2)
    for name in ("MIRACL_EVAL_GPU_LEASE", "SLURM_JOB_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(faiss, "GpuMultipleClonerOptions", Options, raising=False)
    monkeypatch.setattr(faiss, "GpuParameterSpace", ParameterSpace, raising=False)
    monkeypatch.setattr(faiss, "index_cpu_to_all_gpus", to_all_gpus)
    caplog.set_level("INFO", logger="miracl_eval.faiss")
    # GPU Faiss with GPUs on the machine, but a job that holds none: the CPU (another job's GPU is not its own)
    dense_search(
        tmp_path / "flat", tmp_path / "d.parquet", qpath, tmp_path / "gpu.parquet", tmp_path / "gpu.trec", k=10
    )
    assert not clones and "searching on the CPU" in caplog.text
    monkeypatch.setenv("MIRACL_EVAL_GPU_LEASE", "0")  # the job holds a GPU
    dense_search(
        tmp_path / "flat", tmp_path / "d.parquet", qpath, tmp_path / "gpu.parquet", tmp_path / "gpu.trec", k=10
    )
    assert read_run(tmp_path / "gpu.parquet").equals(read_run(tmp_path / "cpu.parquet"))
    assert clones[-1][0] == "IndexFlatIP" and clones[-1][1].shard is True
    assert "searching on 2 GPU(s)" in caplog.text
    # k above the GPU limit: CPU search.
    dense_search(
        tmp_path / "flat", tmp_path / "d.parquet", qpath, tmp_path / "big.parquet", tmp_path / "big.trec", k=3000
    )
    assert "exceeds the GPU limit" in caplog.text
    # IVF-PQ: coarse k-means through the (stand-in) GPU index; nprobe set on the clone.
    build_dense_index(shards, tmp_path / "ivf", tmp_path / "d2.parquet", index_type="ivfpq", pq_m=8)
    assert "training the coarse quantizer on 2 GPU(s)" in caplog.text
    dense_search(
        tmp_path / "ivf",
        tmp_path / "d2.parquet",
        qpath,
        tmp_path / "ivf.parquet",
        tmp_path / "ivf.trec",
        k=10,
        nprobe=3,
    )
    assert read_run(tmp_path / "ivf.parquet").num_rows == 10 * len(qids)
    assert faiss.extract_index_ivf(faiss.read_index(str(tmp_path / "ivf"))).nlist == 600 // 39


def test_faiss_loader_probe_is_not_logged() -> None:
    """Faiss logs each optimised build it cannot load ("No module named 'faiss.swigfaiss_avx2'"): not an error."""
    code = "import logging; logging.basicConfig(level=logging.INFO); from miracl_eval.faiss.index import num_gpus; num_gpus()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert "faiss.loader" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, "both"])
def test_vectors_with_nan_or_infinite_components_name_the_file(tmp_path: Path, bad: float | str) -> None:
    vecs = np.ones((4, 8), dtype=np.float32)
    if bad == "both":  # +inf and -inf in one row: its sum is NaN
        vecs[2, 1], vecs[2, 5] = np.inf, -np.inf
    else:
        vecs[2, 3] = bad
    path = write_vectors(tmp_path / "v.parquet", ["a", "b", "c", "d"], vecs)
    with pytest.raises(InputError, match=rf"{path}.*vector\(s\) with NaN or infinite components"):
        list(iter_vector_batches(path))
    finite = write_vectors(tmp_path / "ok.parquet", ["a"], np.full((1, 8), np.finfo(np.float32).max, np.float32))
    [(_, got)] = list(iter_vector_batches(finite))  # the largest finite values are finite
    assert np.isfinite(got).all()
