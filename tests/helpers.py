"""Test helpers shared by the tiers: paths, sample configs, Snakemake runs, stored outputs, and the
reference implementations that the library's vectorised code is checked against."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from miracl_eval import schemas
from miracl_eval.config.validate import validate
from miracl_eval.encoders.outputs import iter_sparse_batches, iter_vector_batches, vector_dim
from miracl_eval.errors import ConfigError, InputError
from miracl_eval.lucene.jvm import autoclass
from miracl_eval.lucene.release import engine_facts, installed_release
from miracl_eval.lucene.sparse import FACTOR, quantize, term
from miracl_eval.types import PathLike

REPO = Path(__file__).resolve().parents[1]


SAMPLE = REPO / "sample"


SHARED = Path(os.environ.get("MIRACL_EVAL_SHARED", REPO.parent / "shared"))


MIRACL_DEV = SHARED / "data" / "miracl-v1.0-dev"


#: every bundled sample corpus: the texts the tiny BGE-M3 checkpoint is built from
CORPORA = [*sorted((SAMPLE / "miracl").glob("*/corpus.jsonl")), SAMPLE / "messirve" / "corpus.jsonl"]


#: languages whose sample texts cover Latin, Cyrillic, Arabic, CJK, Hangul, Devanagari and Thai script
SCRIPT_LANGS = ["th", "zh", "ja", "ar", "ko", "hi", "ru", "en", "es"]


def sample_queries(langs: Sequence[str] = SCRIPT_LANGS) -> list[str]:
    """The bundled sample's queries of ``langs``."""
    out = []
    for lang in langs:
        for line in (SAMPLE / "miracl" / lang / "topics.tsv").read_text(encoding="utf-8").splitlines():
            if line.strip():
                out.append(line.split("\t", 1)[1])
    return out


def sample_passages(langs: Sequence[str] = SCRIPT_LANGS, per_lang: int = 5) -> list[str]:
    """The first ``per_lang`` passages (``"{title} {text}"``) of each of ``langs`` in the bundled sample."""
    from miracl_eval.offline.tiny import texts_from_corpora

    out = []
    for lang in langs:
        out.extend(list(texts_from_corpora([SAMPLE / "miracl" / lang / "corpus.jsonl"]))[:per_lang])
    return out


def copy_checkpoint(src: Path, dst: Path, skip: Iterable[str] = ()) -> Path:
    """A copy of a checkpoint folder without the files named in ``skip``."""
    dst.mkdir()
    for f in src.iterdir():
        if f.name not in set(skip):
            (dst / f.name).write_bytes(f.read_bytes())
    return dst


def write_vectors(path: Path, ids: list[str], vecs: np.ndarray, dtype: str = "float32", key: str = "docid") -> Path:
    """A dense vector Parquet file (``schemas.dense_schema``)."""
    schema = schemas.dense_schema(vecs.shape[1], dtype, key=key)
    values = pa.array(vecs.astype(dtype).ravel(), schema.field("vector").type.value_type)
    table = pa.table({key: ids, "vector": pa.FixedSizeListArray.from_arrays(values, vecs.shape[1])}, schema=schema)
    pq.write_table(table, path, compression="zstd")
    return path


def write_weights(path: Path, vectors: dict[str, dict[int, float]], key: str = "docid") -> Path:
    """A lexical weight Parquet file (``schemas.SPARSE``, or ``QUERY_SPARSE`` for ``key="qid"``)."""
    schema = schemas.SPARSE if key == "docid" else schemas.QUERY_SPARSE
    table = pa.table(
        {
            key: list(vectors),
            "token_ids": [list(v) for v in vectors.values()],
            "weights": [list(v.values()) for v in vectors.values()],
        },
        schema=schema,
    )
    pq.write_table(table, path)
    return path


def sample_config(languages: list[str] | None = None, file: str = "miracl.yaml", **overrides: Any) -> dict[str, Any]:
    """A bundled sample's config (``sample/{file}``) with absolute paths (usable from any working dir)."""
    cfg = yaml.safe_load((SAMPLE / file).read_text(encoding="utf-8"))
    cfg["source"] = {k: str(REPO / v) for k, v in cfg["source"].items()}
    if languages is not None:
        cfg["languages"] = languages
    cfg.update(overrides)
    return cfg


M3_LANGS = ["sw", "yo"]


M3_METHODS = ["bm25", "bge-m3/dense", "bge-m3/sparse", "bge-m3/multivec", "bge-m3/dense+sparse", "bge-m3/all"]


TINY_M3 = "resources/models/tiny-bge-m3"


def m3_config(languages: list[str] = M3_LANGS, m3: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    """The MIRACL sample with every method and the tiny checkpoint on the CPU (small shards and chunks).

    ``m3``: settings of the ``bge-m3`` model over the tiny checkpoint and a rerank depth of 20."""
    cfg = sample_config(languages, threads=1)
    cfg.update(
        methods=M3_METHODS,
        models={"bge-m3": {"checkpoint": TINY_M3, "rerank_depth": 20, **(m3 or {})}},
        hybrids={},
        encoder={
            "device": "cpu",
            "shard_size": 60,
            "batch_size": 8,
        },  # about 160 passages: three shards each
        query_chunk=7,  # 11-13 queries per language: two rerank chunks each
    )
    cfg.update(overrides)
    return cfg


def write_config(directory: Path, cfg: dict[str, Any], name: str = "config.yaml") -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


#: where this test process keeps the checkpoints that rules/model.smk and rules/me5_small.smk build (set per
#: session by tests/conftest.py); None: every run builds its own
CHECKPOINT_CACHE: Path | None = None
_CHECKPOINT_PATH = re.compile(r"resources/models/(tiny-[a-z0-9-]+|me5-small)\b")


def built_checkpoint(name: str) -> Path:
    """The checkpoint ``name`` (``tiny-{kind}`` or ``me5-small``) as its rule builds it, built once per process."""
    assert CHECKPOINT_CACHE is not None
    folder = CHECKPOINT_CACHE / name
    if not folder.is_dir():
        if name == "me5-small":
            from miracl_eval.offline.me5_small import convert

            convert(None, folder)
        else:  # the rule's inputs, in its order (rules/model.smk), and its seed
            from miracl_eval.inputs.datasets import MIRACL_LANGUAGES
            from miracl_eval.offline.tiny import build_tiny_checkpoint, texts_from_corpora

            corpora = [SAMPLE / "miracl" / lang / "corpus.jsonl" for lang in MIRACL_LANGUAGES]
            texts = texts_from_corpora([*corpora, SAMPLE / "messirve" / "corpus.jsonl"])
            build_tiny_checkpoint(folder, texts, kind=name.removeprefix("tiny-"), seed=0)
    return folder


def seed_checkpoints(workdir: Path, configfile: Path) -> None:
    """Put the built checkpoints that the config names into the working directory (as their rules would
    write them: a run then builds none): me5-small's 460 MB hard-linked, the tiny ones copied.
    The rules themselves run in tests/workflow/test_me5_small.py (me5-small), the m3_run fixture (tiny-bge-m3) and
    test_recipe.py (tiny-xlm-r, tiny-cross-encoder); the other kinds' builds are tests/unit/offline's, by the
    function the rule calls. Do not write into a seeded me5-small: its files are links to the cache."""
    if CHECKPOINT_CACHE is None:
        return
    for name in sorted(set(_CHECKPOINT_PATH.findall(configfile.read_text(encoding="utf-8")))):
        target = workdir / "resources" / "models" / name
        if (name.removeprefix("tiny-") in TINY_KINDS or name == "me5-small") and not target.exists():
            link = os.link if name == "me5-small" else shutil.copy2
            shutil.copytree(built_checkpoint(name), target, copy_function=link)


#: the kinds rules/model.smk builds
TINY_KINDS = ("bge-m3", "bert", "xlm-r", "decoder", "mlm", "cross-encoder", "llm")


def snakemake(
    workdir: Path,
    configfile: Path,
    *targets: str,
    args: tuple[str, ...] = (),
    check: bool = True,
    timeout: int = 1500,
    seed: bool | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the workflow with ``python -m snakemake`` from another working directory. ``seed``: with the
    checkpoints the config names already built (:func:`seed_checkpoints`); by default for a run that must
    succeed, never for a dry run, and not for a run that may fail (``check=False``: what it leaves is the test's)."""
    if (check if seed is None else seed) and "-n" not in args and "--dry-run" not in args:
        seed_checkpoints(workdir, configfile)
    cmd = [
        sys.executable, "-m", "snakemake", *targets,
        "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--configfile", str(configfile), "--cores", "2", *args,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


def planned_jobs(proc: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """The job counts of a (dry) run, from Snakemake's 'Job stats' table."""
    jobs: dict[str, int] = {}
    lines = (proc.stdout + proc.stderr).splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Job stats:"):
            for row in lines[i + 3 :]:
                parts = row.split()
                if len(parts) != 2 or parts[0] == "total":
                    break
                jobs[parts[0]] = int(parts[1])
            break
    return jobs


#: The largest float32 difference of our outputs between batch shapes (1 to 64 rows, token budgets of 64
#: to 32,768 padded tokens, 1 and 2 torch threads: the order of the matrix products' sums), measured on
#: the tests' tiny checkpoints by benchmarks/batch_shape_bounds.py (2026-12-03, torch 2.13 on this
#: project's 2-core CPU), times ten: the tolerance of every comparison with an oracle that batches its own
#: way (FlagEmbedding, sentence-transformers), or with ourselves batched otherwise. Scores: absolute and
#: relative (``assert_allclose(atol=t, rtol=t)``). A tolerance below these flakes: 1e-5 did for the
#: cross-encoder (a CI run, 1 of 387 scores off by 1.1e-5).
BATCH_TOL = {
    "bge-m3 dense": 3e-6,  # measured 3.0e-7
    "bge-m3 sparse": 3e-5,  # 2.5e-6, a lexical weight
    "bge-m3 colbert": 2e-5,  # 1.3e-6, a token vector's component
    "bge-m3 scores": 1e-5,  # pair scores: lexical 7.2e-7, multi-vector 2.4e-7
    "dense": 2e-6,  # mean-pooled XLM-R 1.1e-7, last-token decoder 1.9e-7
    # sentence-transformers chains, each pooling mode with Dense heads (2026-12-04, torch 2.14.1): 1.6e-6,
    # mean_sqrt_len_tokens not normalised; max 8.0e-7, lasttoken 9.2e-7, cls 6.7e-7, weightedmean 6.0e-7
    "dense heads": 2e-5,
    "splade": 3e-4,  # 2.1e-5, a max-pooled vocabulary logit
    "cross-encoder": 2e-4,  # 3.5e-5; 1.4e-5 relative to max(1, |score|)
    "llm": 2e-5,  # 6.0e-6; 1.8e-6 relative
}


def assert_same_weights(
    tokens: Sequence[int],
    weights: Sequence[float],
    want_tokens: Sequence[int],
    want_weights: Sequence[float],
    tol: float,
) -> None:
    """Two lexical weight lists agree to ``tol``: the weights of shared tokens, and a token in one list only
    has a weight within ``tol`` of 0 (a ReLU of a value near 0 falls either side between batch shapes)."""
    got = dict(zip((int(t) for t in tokens), (float(w) for w in weights), strict=True))
    want = dict(zip((int(t) for t in want_tokens), (float(w) for w in want_weights), strict=True))
    worst = max((abs(got.get(t, 0.0) - want.get(t, 0.0)) for t in got.keys() | want.keys()), default=0.0)
    assert worst <= tol, f"lexical weights differ by {worst:.2e} > {tol:.0e}"
    assert len(got.keys() & want.keys()) >= 0.9 * max(len(got), len(want)), "the weight lists hardly overlap"


#: one language per analysis path: English default, Lucene language analyzers (ar, zh), Anserini's
#: whitespace mapping (sw), pretokenized (yo) and Thai. `make run` covers all 18 languages.
BM25_LANGS = ["ar", "en", "sw", "th", "yo", "zh"]


# ------------------------------------------------------------------ reference implementations


#: the source id of the installed pyserini's 2CR references (``-dense``, ``-hybrid`` follow it)
PYSERINI_2CR = f"pyserini-{installed_release()}-2cr"


def run_config(raw: Mapping[str, Any], release: str | None = None) -> dict[str, Any]:
    """A validated configuration with the facts the tables and the report add to it (the pyserini
    release, by default the installed one's, as a run without conda environments)."""
    return {**validate(dict(raw)), **engine_facts(release or installed_release())}


def load_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise ConfigError("(file)", f"{path} is not valid YAML ({err})") from None
    return validate(data)


def rank_hits(hits: Mapping[str, Sequence[tuple[str, float]]], depth: int | None = None) -> pa.Table:
    """Build a run table from ``{qid: [(docid, score), ...]}``.

    Each query's hits are ordered by score (descending), ties by docid (ascending), so that
    the Parquet ranks and the order of the TREC file agree with how trec_eval reads scores.
    Queries keep the order of the mapping.
    """
    cols: dict[str, list] = {"qid": [], "docid": [], "rank": [], "score": []}
    for qid, qhits in hits.items():
        ordered = sorted(qhits, key=lambda h: (-h[1], h[0]))
        if depth is not None:
            ordered = ordered[:depth]
        for rank, (docid, score) in enumerate(ordered, start=1):
            cols["qid"].append(qid)
            cols["docid"].append(docid)
            cols["rank"].append(rank)
            cols["score"].append(float(score))
    return pa.table(cols, schema=schemas.RUN)


def sparse_dot(q: dict[int, float], p: dict[int, float]) -> float:
    """Exact float dot product of two lexical weight vectors (BGE-M3's lexical matching score)."""
    if len(p) < len(q):
        q, p = p, q
    return float(sum(float(w) * float(p[t]) for t, w in q.items() if t in p))


def query_string(weights: dict[int, float], factor: float = FACTOR, rounding: str = "ceil") -> str:
    """Pretokenized query: each term repeated its integer weight times, separated by spaces."""
    return " ".join(
        " ".join([term(t)] * q) for t, w in sorted(weights.items()) if (q := quantize(w, factor, rounding)) > 0
    )


def load_vectors(
    paths: PathLike | Sequence[PathLike], key: str | None = None, dtype: type | None = np.float32
) -> tuple[list[str], np.ndarray]:
    """All ``(ids, vectors)`` of one vector Parquet file (or shards); for queries and tests."""
    ids: list[str] = []
    mats: list[np.ndarray] = []
    dim = None
    for batch_ids, vecs in iter_vector_batches(paths, key=key, dtype=dtype):
        ids.extend(batch_ids.to_pylist())
        mats.append(vecs)
        dim = vecs.shape[1]
    if not mats:
        shards = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
        dim = vector_dim(shards[0], key)[1] if shards else 0
        return ids, np.zeros((0, dim), dtype=dtype or np.float32)
    return ids, np.concatenate(mats)


def load_sparse(paths: PathLike | Sequence[PathLike], key: str | None = None) -> dict[str, dict[int, float]]:
    """All lexical weight vectors of a (small) file as ``{id: {token_id: weight}}``."""
    out: dict[str, dict[int, float]] = {}
    for batch in iter_sparse_batches(paths, key):
        for i, ident in enumerate(batch.ids.to_pylist()):
            out[ident] = batch.row(i)
    return out


def count_documents(index: str | os.PathLike[str]) -> int:
    """Number of documents in a Lucene index."""
    paths = autoclass("java.nio.file.Paths")
    directory = autoclass("org.apache.lucene.store.FSDirectory").open(paths.get(str(index)))
    reader = autoclass("org.apache.lucene.index.DirectoryReader").open(directory)
    try:
        return int(reader.numDocs())
    finally:
        reader.close()
        directory.close()


def read_trec(path: str | os.PathLike[str]) -> pa.Table:
    """Read a 6-column TREC run file into a run table, checking each line."""
    path = Path(path)
    cols: dict[str, list] = {"qid": [], "docid": [], "rank": [], "score": []}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 6:
                raise InputError(path, f"expected 6 fields, found {len(fields)}", lineno)
            try:
                rank, score = int(fields[3]), float(fields[4])
            except ValueError:
                raise InputError(path, "rank must be an integer and score a number", lineno) from None
            cols["qid"].append(fields[0])
            cols["docid"].append(fields[2])
            cols["rank"].append(rank)
            cols["score"].append(score)
    return pa.table(cols, schema=schemas.RUN)
