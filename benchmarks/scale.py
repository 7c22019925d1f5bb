"""Scale: every stage at 100k to 1M passages against its engine called directly (prints figures; not a test).

1. Generates, per size N, a synthetic MIRACL-format collection: N passages of Zipf-distributed words
   (a vocabulary of 1M made-up words, exponent 1.07; about 120 words a passage, gamma-distributed
   lengths like MIRACL's), a short title each, 1,000 queries (words of one relevant passage and a
   random one) with qrels (the relevant passage and two judged non-relevant ones); and, for the same
   ids, what an encoder would store: dense vectors (1024 dimensions, float32, in shards of 100k, the
   workflow's layout) and lexical weights (each passage's distinct words, weights in (0, 0.3), mean
   0.1), so that no encoder runs. The smallest size also gets 2x the queries, to measure what a
   query costs us.
2. Runs every stage on the same input with the same settings and threads, once as our workflow step
   (the library function the rule's script calls) and once as the engine called directly, each in a
   fresh process, alternating which goes first from round to round (at least ``--rounds``; more, up to
   5, while a side's rounds stay within ``--budget`` seconds, so fast stages get several); records
   the wall time of the work (not of imports, nor of the JVM's start) and the peak RSS of the process
   tree (sampled every 50 ms; "anon" leaves out file-backed pages, such as mapped index files):
     preprocess     ours only (raw JSONL -> corpus.parquet)
     bm25_index     build_bm25_index           vs  python -m pyserini.index.lucene (same JSONL, -language en)
     bm25_search    bm25_search                vs  pyserini LuceneSearcher.batch_search (k1 0.9, b 0.4), TREC out
     impact_index   build_sparse_index         vs  python -m pyserini.index.lucene -impact -pretokenized
     impact_search  sparse_search              vs  pyserini LuceneImpactSearcher (pre-encoded queries, min_idf -1)
     dense_flat     build_dense_index flat     vs  faiss.IndexFlatIP.add per shard, write_index
     search_flat    dense_search top-1000      vs  faiss index.search, TREC out
     dense_ivfpq    build_dense_index ivfpq    vs  faiss.IndexIVFPQ (256 lists, 64 x 8 bits) train (same sample size) + add
     search_ivfpq   dense_search (nprobe 64)   vs  faiss index.search
     union_scores   union_components_stage     vs  numpy/scipy over every vector and weight held in memory
     rerank_scores  score_candidates (top 200) vs  the same numpy/scipy reference
     fuse           ours only (fuse_stage of the union's components)
     evaluate       evaluate_stage             vs  pytrec_eval.RelevanceEvaluator on the TREC run
   and checks that both sides agree (the hits of the runs; the scores; nDCG@10).
3. Prints per size the ratio ours / direct of the best round of each (goal <= 1.10 for the
   engine-backed stages), throughput and peak RSS; then the slope of time and of peak RSS against N on
   a log-log scale (least squares over the sizes), beside the slope of the data the stage reads or
   builds; what a query costs (from the smallest size's two query counts); each stage's time and peak
   memory extrapolated from the largest size to MIRACL English (32.9M passages, 799 queries) and
   MessIRve full (14,047,759 passages, 156,528 queries), with the settings of ``scale.yaml``
   (query_chunk, java_heap), by the slopes or by a fixed plus a per-passage cost fitted to the sizes,
   whichever is larger (a slope under 1 where a fixed cost still weighs understates a linear stage
   at 33x the largest size; memory by the fit only where its slope is 0.3 or more, an index held
   whole, not a streamed stage's flat peak nor a JVM's, whose heap is the plan's), and whether every stage but a flat Faiss index stays under 32 GB.

    python benchmarks/scale.py                                    # 100k, 300k, 1M
    python benchmarks/scale.py --sizes 20000 50000 --budget 0     # a quick look
    python benchmarks/scale.py --stages union_scores --workdir /tmp/scale   # a stage, what it reads first

Times are of this machine with ``--threads`` threads (default 2); the extrapolation scales them, it
does not predict another machine's.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from miracl_eval.jobs.progress import duration  # noqa: E402 - the library beside this script
from miracl_eval.lucene.offline import import_pyserini  # noqa: E402

SIZES = (100_000, 300_000, 1_000_000)
QUERIES = 1_000
QUERY_SCALE = 2  # the smallest size also runs our query stages with this many times the queries
DIM = 1024
VOCAB = 1_000_000
ZIPF = 1.07
MEAN_WORDS = 120
SHARD = 100_000  # passages per vector shard: the workflow's default encoder.shard_size
HITS = 1_000
DEPTH = 200  # rerank_depth
HEAP = "2g"
IVF_LISTS, PQ_M, NPROBE = 256, 64, 64
WEIGHTS = {"dense": 1.0, "sparse": 0.3}
GOAL = 1.10
#: a log-log memory slope from which a stage's memory is taken to grow with N (else it is a flat peak)
GROWING = 0.3
#: stages whose memory is mostly an Anserini JVM's, bounded by its heap (``HEAP`` here, ``java_heap`` in the plan)
JAVA_INDEXING = ("bm25_index", "impact_index")
LIMIT_MB = 32_000
TARGETS = {"MIRACL English": (32_893_221, 799), "MessIRve full": (14_047_759, 156_528)}
SEED = 0
FORMAT = 2  # of the generated files; a work folder with another one is generated again
MAX_ROUNDS = 5

# ----------------------------------------------------------------------------------------- generation


def _word(rank: int, syllables: list[str]) -> str:
    x, out = rank + len(syllables) + 1, []  # bijective base-75, at least two syllables
    while x > 0:
        x -= 1
        out.append(syllables[x % len(syllables)])
        x //= len(syllables)
    return "".join(reversed(out))


@functools.cache
def vocabulary():
    import pyarrow as pa

    syllables = [c + v for c in "bdfghklmnprstvz" for v in "aeiou"]
    return pa.array([_word(r, syllables) for r in range(VOCAB)])


class Words:
    """Zipf-distributed word ids, drawn through an inverse-CDF table (2**24 entries)."""

    def __init__(self, rng) -> None:
        import numpy as np

        cdf = np.cumsum(np.arange(1, VOCAB + 1, dtype=np.float64) ** -ZIPF)
        cdf /= cdf[-1]
        self.table = np.searchsorted(cdf, (np.arange(1 << 24) + 0.5) / (1 << 24)).astype(np.int32)
        self.rng = rng

    def draw(self, n: int):
        return self.table[self.rng.integers(0, 1 << 24, n)]


def _jsonl(path: Path, *parts) -> None:
    """Append JSONL lines made by joining string arrays and literals (our strings need no escaping)."""
    import numpy as np
    import pyarrow.compute as pc

    lines = pc.binary_join_element_wise(*parts, "\n", "")
    _, offsets, data = lines.buffers()
    ends = np.frombuffer(offsets, np.int32)[lines.offset : lines.offset + len(lines) + 1]
    with open(path, "ab") as fh:  # the data buffer of a string array is its strings, one after another
        fh.write(memoryview(data)[ends[0] : ends[-1]])


def _normalized(rng, n: int):
    """Unit vectors of uniform components (faster to draw than Gaussian ones, and as good here)."""
    import numpy as np

    v = rng.random((n, DIM), dtype=np.float32)
    v -= 0.5
    v /= np.sqrt(np.einsum("ij,ij->i", v, v))[:, None]
    return v


def _vector_table(key: str, ids, vectors):
    import pyarrow as pa

    from miracl_eval.schemas import dense_schema

    schema = dense_schema(DIM, "float32", key=key)
    column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel(), pa.float32()), DIM)
    return pa.table({key: ids, "vector": column}, schema=schema)


def _sparse_table(schema, key: str, ids, offsets, tokens, weights):
    import pyarrow as pa

    return pa.table(
        {
            key: ids,
            "token_ids": pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(tokens, pa.int32())),
            "weights": pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(weights, pa.float32())),
        },
        schema=schema,
    )


def _distinct_rows(offsets, ids):
    """Per row of a CSR list of word ids, its distinct ids (sorted): ``(offsets, ids)``."""
    import numpy as np

    rows = np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))
    key = np.sort(rows * VOCAB + ids)
    key = key[np.r_[True, key[1:] != key[:-1]]]
    r = key // VOCAB
    return np.r_[0, np.cumsum(np.bincount(r, minlength=len(offsets) - 1))], (key % VOCAB).astype(np.int32)


def _impact_json(vocab_ids, offsets, impacts):
    """``{"17": 30, ...}`` per row (a JsonVectorCollection vector) as a string array."""
    import pyarrow as pa
    import pyarrow.compute as pc

    entries = pc.binary_join_element_wise(
        '"', pc.cast(pa.array(vocab_ids), pa.string()), '": ', pc.cast(pa.array(impacts), pa.string()), ""
    )
    lists = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), entries)
    return pc.binary_join_element_wise("{", pc.binary_join(lists, ", "), "}", "")


def generate(folder: Path, n: int, query_counts: list[int], files: int) -> None:
    """The collection of ``n`` passages and, per query count, its queries (see the module's docstring)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from miracl_eval import schemas
    from miracl_eval.inputs.preprocess import build_topics
    from miracl_eval.lucene.sparse import quantize_array

    manifest = {"format": FORMAT, "n": n, "queries": query_counts, "files": files, "seed": SEED}
    if (folder / "manifest.json").is_file() and json.loads((folder / "manifest.json").read_text()) == manifest:
        return
    shutil.rmtree(folder, ignore_errors=True)
    for sub in ("raw", "collection", "vectors", "dense", "sparse"):
        (folder / sub).mkdir(parents=True)
    start = time.perf_counter()
    rng = np.random.default_rng(SEED)
    words, vocab = Words(rng), vocabulary()
    n_queries = max(query_counts)
    relevant = np.sort(rng.choice(n, n_queries, replace=False))
    rel_words: dict[int, np.ndarray] = {}
    rel_vectors = np.empty((n_queries, DIM), np.float32)
    corpus = schemas.StreamWriter(folder / "corpus.parquet", schemas.CORPUS).__enter__()
    for shard, lo in enumerate(range(0, n, SHARD)):
        m = min(SHARD, n - lo)
        docids = pa.array([f"{i // 10}#{i % 10}" for i in range(lo, lo + m)])
        lengths = np.clip(rng.gamma(4.0, MEAN_WORDS / 4.0, m).astype(np.int64), 8, 600)
        offsets = np.r_[0, np.cumsum(lengths)]
        ids = words.draw(int(offsets[-1]))
        text = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), vocab.take(ids)), " ")
        title_ids = words.draw(3 * m)
        title = pc.binary_join(
            pa.ListArray.from_arrays(pa.array(np.arange(0, 3 * m + 1, 3), pa.int32()), vocab.take(title_ids)), " "
        )
        contents = pc.binary_join_element_wise(title, text, " ")
        corpus.write(pa.table({"docid": docids, "title": title, "text": text, "contents": contents}))
        _jsonl(
            folder / "raw" / "corpus.jsonl", '{"docid": "', docids, '", "title": "', title, '", "text": "', text, '"}'
        )
        cuts = np.linspace(0, m, files + 1).astype(int)  # each shard's rows spread over the files
        for f, (a, b) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
            part = folder / "collection" / f"part-{f:03d}.jsonl"
            _jsonl(part, '{"id": "', docids[a:b], '", "contents": "', contents[a:b], '"}')
        # what an encoder would store: a vector and the distinct words' lexical weights per passage
        vectors = _normalized(rng, m)
        pq.write_table(
            _vector_table("docid", docids, vectors), folder / "dense" / f"{shard:05d}.parquet", compression="zstd"
        )
        all_ids = np.concatenate([ids, title_ids])
        all_rows = np.r_[np.repeat(np.arange(m), lengths), np.repeat(np.arange(m), 3)]
        order = np.argsort(all_rows, kind="stable")
        s_off, s_tok = _distinct_rows(np.r_[0, np.cumsum(lengths + 3)], all_ids[order])
        weights = (0.3 * rng.beta(2.0, 4.0, len(s_tok))).astype(np.float32)  # in (0, 0.3), mean 0.1
        table = _sparse_table(schemas.SPARSE, "docid", docids, s_off, s_tok, weights)
        pq.write_table(table, folder / "sparse" / f"{shard:05d}.parquet", compression="zstd")
        impact = _impact_json(s_tok, s_off, quantize_array(weights))
        for f, (a, b) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
            part = folder / "vectors" / f"part-{f:03d}.jsonl"
            _jsonl(part, '{"id": "', docids[a:b], '", "vector": ', impact[a:b], "}")
        here = np.flatnonzero((relevant >= lo) & (relevant < lo + m))
        for j in here:
            r = relevant[j] - lo
            rel_words[int(j)] = ids[offsets[r] : offsets[r + 1]]
        rel_vectors[here] = vectors[relevant[here] - lo]
        print(f"  generated {lo + m:,} of {n:,} passages ({time.perf_counter() - start:.0f} s)", flush=True)
    corpus.__exit__(None, None, None)
    _queries(folder, n, query_counts, rng, words, vocab, relevant, rel_words, rel_vectors)
    for q in query_counts:
        build_topics(folder / f"q{q}" / "topics.tsv", folder / f"q{q}" / "qrels.tsv",
                     folder / f"q{q}" / "queries.parquet", folder / f"q{q}" / "qrels.parquet")  # fmt: skip
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _queries(folder, n, query_counts, rng, words, vocab, relevant, rel_words, rel_vectors) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from miracl_eval import schemas
    from miracl_eval.lucene.sparse import quantize_array

    n_queries = max(query_counts)
    order = rng.permutation(n_queries)  # query j asks for passage relevant[order[j]]
    texts, tokens = [], []
    for j in range(n_queries):
        passage = rel_words[int(order[j])]
        picked = passage[rng.choice(len(passage), min(len(passage), int(rng.integers(3, 9))), replace=False)]
        ids = np.r_[picked, words.draw(1)]
        texts.append(" ".join(vocab.take(pa.array(ids)).to_pylist()))
        tokens.append(np.array(sorted(set(ids.tolist())), dtype=np.int32))
    noise = rng.standard_normal((n_queries, DIM), dtype=np.float32) / np.sqrt(DIM)
    qvec = 0.15 * rel_vectors[order] + noise
    qvec /= np.linalg.norm(qvec, axis=1, keepdims=True)
    negatives = rng.integers(0, n, (n_queries, 2))
    lengths = np.array([len(t) for t in tokens])
    offsets = np.r_[0, np.cumsum(lengths)]
    flat = np.concatenate(tokens)
    weights = rng.uniform(0.05, 0.3, len(flat)).astype(np.float32)
    impacts = quantize_array(weights)
    for q in query_counts:
        out = folder / f"q{q}"
        out.mkdir()
        qids = pa.array([str(j) for j in range(q)])
        docid = lambda i: f"{i // 10}#{i % 10}"  # noqa: E731
        with open(out / "topics.tsv", "w") as fh:
            fh.writelines(f"{j}\t{texts[j]}\n" for j in range(q))
        with open(out / "qrels.tsv", "w") as fh:
            for j in range(q):
                fh.write(f"{j} Q0 {docid(relevant[order[j]])} 1\n")
                fh.writelines(f"{j} Q0 {docid(d)} 0\n" for d in sorted(set(negatives[j]) - {relevant[order[j]]}))
        pq.write_table(_vector_table("qid", qids, qvec[:q]), out / "dense.parquet")
        k = int(offsets[q])
        table = _sparse_table(schemas.QUERY_SPARSE, "qid", qids, offsets[: q + 1], flat[:k], weights[:k])
        pq.write_table(table, out / "sparse.parquet")
        import pyarrow.compute as pc

        vectors = _impact_json(flat[:k], offsets[: q + 1], impacts[:k])
        contents = pc.binary_join_element_wise("q", qids, "")
        _jsonl(out / "impact.jsonl", '{"id": "', qids, '", "contents": "', contents, '", "vector": ', vectors, "}")


# ----------------------------------------------------------------------------------------- stages


@dataclass(frozen=True)
class Ctx:
    """Where one measured run reads and writes."""

    data: Path  # the size's generated files
    q: int  # queries of this run (data / f"q{q}")
    out: Path  # this run's outputs (removed after the run unless kept)
    threads: int

    @property
    def queries(self) -> Path:
        return self.data / f"q{self.q}"

    @property
    def kept(self) -> Path:
        """Outputs of ours kept for later stages (indexes; runs per query count)."""
        return self.data / "kept"

    @property
    def kept_q(self) -> Path:
        return self.kept / f"q{self.q}"

    def shards(self, kind: str) -> list[Path]:
        return sorted((self.data / kind).glob("*.parquet"))


Work = Callable[[], dict]
Prepared = tuple[Work, Callable[[], dict] | None]  # the timed work, and a check after the clock stops


def _docs(index: Path) -> dict:
    from miracl_eval.lucene.offline import import_pyserini

    LuceneIndexReader = import_pyserini("pyserini.index.lucene").LuceneIndexReader

    return {"documents": int(LuceneIndexReader(str(index)).stats()["documents"])}


def _anserini_cli(c: Ctx, args: list[str]) -> Prepared:
    """``python -m pyserini.index.lucene ARGS``, in this process (the JVM started before the clock)."""
    import runpy

    from miracl_eval.lucene.jvm import ensure_jvm

    ensure_jvm(HEAP)  # the same Java 21 and -Xmx as ours
    import_pyserini("pyserini.index.lucene")  # its import and the JVM's start, before the clock

    def work() -> dict:
        sys.argv = ["pyserini.index.lucene", *args, "-threads", str(c.threads)]
        runpy.run_module("pyserini.index.lucene", run_name="__main__")
        return {}

    return work, lambda: _docs(c.out / "index")


def ours_preprocess(c: Ctx) -> Prepared:
    from miracl_eval.inputs.preprocess import build_corpus_from

    def work() -> dict:
        stats = build_corpus_from(c.data / "raw" / "corpus.jsonl", c.out / "corpus.parquet", "{title} {text}")
        return {"documents": stats.passages}

    return work, None


def ours_bm25_index(c: Ctx) -> Prepared:
    from miracl_eval.lucene.bm25 import build_bm25_index

    def work() -> dict:
        result = build_bm25_index(c.data / "corpus.parquet", c.out / "index", "en", threads=c.threads, heap=HEAP)
        return {"documents": result.documents}

    return work, None


def direct_bm25_index(c: Ctx) -> Prepared:
    return _anserini_cli(c, [
        "-collection", "JsonCollection", "-input", str(c.data / "collection"), "-index", str(c.out / "index"),
        "-generator", "DefaultLuceneDocumentGenerator", "-language", "en",
    ])  # fmt: skip


def ours_impact_index(c: Ctx) -> Prepared:
    from miracl_eval.lucene.sparse import build_sparse_index

    def work() -> dict:
        result = build_sparse_index(c.shards("sparse"), c.out / "index", threads=c.threads, heap=HEAP)
        return {"documents": result.documents}

    return work, None


def direct_impact_index(c: Ctx) -> Prepared:
    return _anserini_cli(c, [
        "-collection", "JsonVectorCollection", "-input", str(c.data / "vectors"), "-index", str(c.out / "index"),
        "-generator", "DefaultLuceneDocumentGenerator", "-impact", "-pretokenized",
    ])  # fmt: skip


def _trec_lines(out: Path, qids, hits) -> None:
    """A TREC run the plain way (pyserini's output format): one line per hit."""
    with open(out, "w") as fh:
        for qid in qids:
            fh.writelines(
                f"{qid} Q0 {docid} {rank} {score:.6f} direct\n" for rank, (docid, score) in enumerate(hits[qid], 1)
            )


def _topics(c: Ctx) -> tuple[list[str], list[str]]:
    with open(c.queries / "topics.tsv") as fh:
        qids, texts = zip(*(line.rstrip("\n").split("\t") for line in fh), strict=True)
    return list(qids), list(texts)


def _run_check(c: Ctx, reference: str) -> dict:
    """How many of the run's hits the kept reference run (ours) also has, per query (top 1000)."""
    from miracl_eval.runs import read_run

    got = c.out / "run.trec"
    if not got.exists():
        return {}
    ours = read_run(c.kept_q / reference)
    a = set(zip(ours.column("qid").to_pylist(), ours.column("docid").to_pylist(), strict=True))
    with open(got, encoding="utf-8") as fh:  # the engine's TREC run: qid Q0 docid rank score tag
        b = {(fields[0], fields[2]) for fields in map(str.split, fh) if fields}
    return {"same_hits": len(a & b) / max(1, len(a | b))}


def _jvm_for_search() -> None:
    """Start the JVM with the searches' heap and load the searchers' classes before the clock, as
    importing pyserini does for the direct side."""
    from miracl_eval.lucene.anserini import search_heap
    from miracl_eval.lucene.jvm import autoclass, ensure_jvm

    ensure_jvm(search_heap(HITS))
    autoclass("io.anserini.search.SimpleSearcher")
    autoclass("io.anserini.search.SimpleImpactSearcher")


def _ours_search(c: Ctx, index: str, queries: str, search: Callable) -> Prepared:
    _jvm_for_search()

    def work() -> dict:
        out = (c.out / "run.parquet", c.out / "run.trec")
        return {"queries": search(c.kept / index, c.queries / queries, *out, k=HITS, threads=c.threads)}

    return work, None


def ours_bm25_search(c: Ctx) -> Prepared:
    from miracl_eval.lucene.bm25 import bm25_search

    return _ours_search(c, "bm25", "queries.parquet", bm25_search)


def _direct_search(c: Ctx, make_searcher: Callable, texts_of: Callable, reference: str) -> Prepared:
    """pyserini's searcher (from ``make_searcher()``, after a JVM with ours' -Xmx) over the queries,
    ``batch_search`` of ``texts_of(qids, texts)``, its hits written the plain way."""
    from miracl_eval.lucene.anserini import search_heap
    from miracl_eval.lucene.jvm import ensure_jvm

    ensure_jvm(search_heap(HITS))  # the same -Xmx as ours

    def work() -> dict:
        qids, texts = _topics(c)
        results = make_searcher().batch_search(texts_of(qids, texts), qids, k=HITS, threads=c.threads)
        _trec_lines(c.out / "run.trec", qids, {q: [(h.docid, h.score) for h in results.get(q, [])] for q in qids})
        return {"queries": len(qids)}

    return work, lambda: _run_check(c, reference)


def direct_bm25_search(c: Ctx) -> Prepared:
    def searcher():
        LuceneSearcher = import_pyserini("pyserini.search.lucene").LuceneSearcher

        s = LuceneSearcher(str(c.kept / "bm25"))
        s.set_bm25(0.9, 0.4)
        return s

    return _direct_search(c, searcher, lambda qids, texts: texts, "bm25.parquet")


def ours_impact_search(c: Ctx) -> Prepared:
    from miracl_eval.lucene.sparse import sparse_search

    return _ours_search(c, "impact", "sparse.parquet", sparse_search)


def direct_impact_search(c: Ctx) -> Prepared:
    def searcher():
        LuceneImpactSearcher = import_pyserini("pyserini.search.lucene").LuceneImpactSearcher

        # the pre-encoded queries (pyserini's cached query encoder reads the JSONL); min_idf -1 keeps every term
        return LuceneImpactSearcher(str(c.kept / "impact"), str(c.queries / "impact.jsonl"), min_idf=-1)

    return _direct_search(c, searcher, lambda qids, texts: [f"q{q}" for q in qids], "sparse.parquet")


def _ours_dense_index(c: Ctx, index_type: str) -> Prepared:
    from miracl_eval.faiss.index import build_dense_index

    def work() -> dict:
        n = build_dense_index(c.shards("dense"), c.out / "index.faiss", c.out / "docids.parquet", index_type=index_type,
                              ivf_lists=IVF_LISTS, pq_m=PQ_M, use_gpu=False, threads=c.threads)  # fmt: skip
        return {"documents": n}

    return work, None


def _shard_vectors(path: Path):
    """``(ids, vectors)`` of a vector Parquet file, read whole."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    vectors = table.column("vector").combine_chunks().flatten().to_numpy().reshape(-1, DIM)
    return table.column(0), vectors


def _direct_dense_index(c: Ctx, index_type: str) -> Prepared:
    import faiss
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    faiss.omp_set_num_threads(c.threads)

    def work() -> dict:
        shards = c.shards("dense")
        n = sum(pq.ParquetFile(p).metadata.num_rows for p in shards)
        if index_type == "flat":
            index = faiss.IndexFlatIP(DIM)
        else:
            lists = max(1, min(IVF_LISTS, n // 39))
            index = faiss.IndexIVFPQ(faiss.IndexFlatIP(DIM), DIM, lists, PQ_M, 8, faiss.METRIC_INNER_PRODUCT)
            wanted = np.sort(np.random.default_rng(1).choice(n, min(n, max(64 * lists, 10_000)), replace=False))
            sample, start = [], 0
            for path in shards:
                _, vectors = _shard_vectors(path)
                here = wanted[(wanted >= start) & (wanted < start + len(vectors))]
                sample.append(vectors[here - start])
                start += len(vectors)
            index.train(np.concatenate(sample))
        docids = []
        for path in shards:
            ids, vectors = _shard_vectors(path)
            index.add(vectors)
            docids.append(ids)
        faiss.write_index(index, str(c.out / "index.faiss"))
        pq.write_table(pa.table({"docid": pa.chunked_array(docids)}), c.out / "docids.parquet")
        return {"documents": index.ntotal}

    return work, None


def _ours_dense_search(c: Ctx, index_type: str) -> Prepared:
    from miracl_eval.faiss.search import dense_search

    def work() -> dict:
        n = dense_search(c.kept / f"{index_type}.faiss", c.kept / f"{index_type}.docids.parquet",
                         c.queries / "dense.parquet", c.out / "run.parquet", c.out / "run.trec", k=HITS,
                         use_gpu=False, nprobe=NPROBE, threads=c.threads)  # fmt: skip
        return {"queries": n}

    return work, None


def _direct_dense_search(c: Ctx, index_type: str) -> Prepared:
    import faiss
    import pyarrow.parquet as pq

    faiss.omp_set_num_threads(c.threads)

    def work() -> dict:
        index = faiss.read_index(str(c.kept / f"{index_type}.faiss"))
        if index_type == "ivfpq":
            faiss.extract_index_ivf(index).nprobe = NPROBE
        docids = pq.read_table(c.kept / f"{index_type}.docids.parquet").column("docid").to_numpy()
        qids, queries = _shard_vectors(c.queries / "dense.parquet")
        scores, labels = index.search(queries, HITS)
        qids = qids.to_pylist()
        hits = {q: list(zip(docids[labels[i]], scores[i].tolist(), strict=True)) for i, q in enumerate(qids)}
        _trec_lines(c.out / "run.trec", qids, hits)
        return {"queries": len(qids)}

    return work, lambda: _run_check(c, f"{index_type}.parquet") if index_type == "flat" else {}


def _scored(c: Ctx) -> dict:
    return {
        "query_dense": c.queries / "dense.parquet",
        "query_sparse": c.queries / "sparse.parquet",
        "passage_dense": c.shards("dense"),
        "passage_sparse": c.shards("sparse"),
        "output": c.out / "components.parquet",
    }


def ours_union_scores(c: Ctx) -> Prepared:
    from miracl_eval.fusion.components import union_components_stage

    def work() -> dict:
        pairs = union_components_stage(c.kept_q / "flat.parquet", c.kept_q / "sparse.parquet",
                                       c.queries / "queries.parquet", c.q, 0, _scored(c))  # fmt: skip
        return {"pairs": pairs}

    return work, None


def ours_rerank_scores(c: Ctx) -> Prepared:
    from miracl_eval import schemas
    from miracl_eval.fusion.candidates import dense_candidates
    from miracl_eval.fusion.components import score_candidates
    from miracl_eval.fusion.weighted import COMPONENTS
    from miracl_eval.runs import read_run

    def work() -> dict:
        s = _scored(c)
        pairs = dense_candidates(read_run(c.kept_q / "flat.parquet"), DEPTH)
        table = score_candidates(pairs, s["query_dense"], s["query_sparse"], s["passage_dense"], s["passage_sparse"])
        schemas.write_table(table, s["output"], COMPONENTS)
        return {"pairs": len(table)}

    return work, None


def _reference_scores(c: Ctx, pairs_of: Callable[[], object], kept: str) -> Prepared:
    """The plain way: every passage vector and weight in memory, then numpy/scipy over the pairs."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import scipy.sparse as sp

    def csr(paths: list[Path], key: str):
        ids, ends, tokens, weights, total = [], [np.zeros(1, np.int64)], [], [], 0
        for path in paths:
            t = pq.read_table(path)
            ids += t.column(key).to_pylist()
            tok = t.column("token_ids").combine_chunks()
            lengths = np.diff(tok.offsets.to_numpy())
            ends.append(total + np.cumsum(lengths))
            total += int(lengths.sum())
            tokens.append(tok.flatten().to_numpy())
            weights.append(t.column("weights").combine_chunks().flatten().to_numpy())
        indptr = np.concatenate(ends)
        values = np.concatenate(weights).astype(np.float64)  # float64 sums, as ours
        matrix = sp.csr_matrix((values, np.concatenate(tokens), indptr), shape=(len(ids), VOCAB))
        return {d: i for i, d in enumerate(ids)}, matrix

    def work() -> dict:
        pairs = pairs_of()
        qids, docids = pairs["qid"].tolist(), pairs["docid"].tolist()
        q_ids, q_vectors = _shard_vectors(c.queries / "dense.parquet")
        q_row = {q: i for i, q in enumerate(q_ids.to_pylist())}
        p_row, vectors = {}, []
        for path in c.shards("dense"):
            ids, v = _shard_vectors(path)
            p_row.update((d, len(p_row)) for d in ids.to_pylist())
            vectors.append(v)
        p_vectors = np.concatenate(vectors)
        qi = np.array([q_row[q] for q in qids])
        pi = np.array([p_row[d] for d in docids])
        dense = np.empty(len(pairs))
        for lo in range(0, len(pairs), 65_536):
            a, b = q_vectors[qi[lo : lo + 65_536]], p_vectors[pi[lo : lo + 65_536]]
            dense[lo : lo + 65_536] = np.einsum("ij,ij->i", a.astype(np.float64), b.astype(np.float64))
        _, q_weights = csr([c.queries / "sparse.parquet"], "qid")
        s_row, p_weights = csr(c.shards("sparse"), "docid")
        si = np.array([s_row[d] for d in docids])
        sparse = np.empty(len(pairs))
        for lo in range(0, len(pairs), 65_536):
            prod = q_weights[qi[lo : lo + 65_536]].multiply(p_weights[si[lo : lo + 65_536]])
            sparse[lo : lo + 65_536] = np.asarray(prod.sum(axis=1)).ravel()
        table = pa.table({"qid": qids, "docid": docids, "dense": dense, "sparse": sparse})
        pq.write_table(table, c.out / "components.parquet")
        return {"pairs": len(pairs)}

    def check() -> dict:
        ours = c.kept_q / f"{kept}.components.parquet"
        if not ours.exists():
            return {}
        a = pq.read_table(ours).to_pandas().set_index(["qid", "docid"]).sort_index()
        b = pq.read_table(c.out / "components.parquet").to_pandas().set_index(["qid", "docid"]).sort_index()
        if len(a) != len(b) or not a.index.equals(b.index):
            return {"same_pairs": 0.0}
        return {"max_diff": float(max((a["dense"] - b["dense"]).abs().max(), (a["sparse"] - b["sparse"]).abs().max()))}

    return work, check


def _union_pairs(c: Ctx):
    import pandas as pd
    import pyarrow.parquet as pq

    runs = [pq.read_table(c.kept_q / f"{r}.parquet", columns=["qid", "docid"]).to_pandas() for r in ("flat", "sparse")]
    return pd.concat(runs).drop_duplicates(ignore_index=True)


def _rerank_pairs(c: Ctx):
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    run = pq.read_table(c.kept_q / "flat.parquet")
    return run.filter(pc.less_equal(run.column("rank"), DEPTH)).select(["qid", "docid"]).to_pandas()


def ours_fuse(c: Ctx) -> Prepared:
    from miracl_eval.fusion.weighted import fuse_stage

    def work() -> dict:
        pairs = fuse_stage([c.kept_q / "union.components.parquet"], WEIGHTS, c.out / "run.parquet",
                           c.out / "run.trec", c.out / "components.parquet", tag="fused", depth=HITS)  # fmt: skip
        return {"pairs": pairs}

    return work, None


def ours_evaluate(c: Ctx) -> Prepared:
    from miracl_eval.evaluation.metrics import evaluate_stage

    def work() -> dict:
        out = c.out / "per_query.parquet"
        means = evaluate_stage([c.kept_q / "bm25.parquet"], [c.queries / "qrels.parquet"], [out])[str(out)]
        return {"queries": c.q, "ndcg@10": round(means["nDCG@10"], 4)}

    return work, None


def direct_evaluate(c: Ctx) -> Prepared:
    import pytrec_eval

    def work() -> dict:
        qrels: dict[str, dict[str, int]] = {}
        with open(c.queries / "qrels.tsv") as fh:
            for line in fh:
                qid, _, docid, rel = line.split()
                qrels.setdefault(qid, {})[docid] = int(rel)
        run: dict[str, dict[str, float]] = {}
        with open(c.kept_q / "bm25.trec") as fh:
            for line in fh:
                qid, _, docid, _, score, _ = line.split()
                run.setdefault(qid, {})[docid] = float(score)
        values = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"}).evaluate(run)
        with open(c.out / "per_query.tsv", "w") as fh:
            fh.writelines(f"{q}\t{m}\t{v}\n" for q, ms in values.items() for m, v in ms.items())
        ndcg = sum(v["ndcg_cut_10"] for v in values.values()) / len(qrels)
        return {"queries": len(values), "ndcg@10": round(ndcg, 4)}

    return work, None


@dataclass(frozen=True)
class Stage:
    name: str
    ours: Callable[[Ctx], Prepared]
    direct: Callable[[Ctx], Prepared] | None
    engine: str  #: what the direct side calls ("" for ours only)
    per_query: bool  #: a query stage (runs with every query count); else once per size
    unit: str  #: throughput in documents, queries or pairs per second
    keep: dict[str, str] = field(default_factory=dict)  #: ours' outputs kept: out-relative -> kept-relative
    data: Callable[[Ctx], list[Path]] = lambda c: []  #: what the stage reads or builds (its memory's yardstick)
    #: queries our stage holds at once (its chunk); None: all of them; for the extrapolation of memory
    held: int | None = None
    engine_backed: bool = True


def _stages() -> list[Stage]:
    from miracl_eval.schemas import DENSE_SEARCH_BATCH, EVAL_CHUNK, QUERY_CHUNK

    flat, ivfpq = "flat", "ivfpq"
    return [
        Stage("preprocess", ours_preprocess, None, "", False, "documents", engine_backed=False,
              data=lambda c: [c.data / "raw" / "corpus.jsonl"]),
        Stage("bm25_index", ours_bm25_index, direct_bm25_index, "pyserini.index.lucene", False, "documents",
              keep={"index": "bm25"}, data=lambda c: [c.kept / "bm25"]),
        Stage("bm25_search", ours_bm25_search, direct_bm25_search, "LuceneSearcher.batch_search", True, "queries",
              keep={"run.parquet": "{q}/bm25.parquet", "run.trec": "{q}/bm25.trec"},
              data=lambda c: [c.kept / "bm25"], held=QUERY_CHUNK),
        Stage("impact_index", ours_impact_index, direct_impact_index, "pyserini.index.lucene -impact", False,
              "documents", keep={"index": "impact"}, data=lambda c: [c.kept / "impact"]),
        Stage("impact_search", ours_impact_search, direct_impact_search, "LuceneImpactSearcher", True, "queries",
              keep={"run.parquet": "{q}/sparse.parquet"}, data=lambda c: [c.kept / "impact"], held=QUERY_CHUNK),
        Stage("dense_flat", lambda c: _ours_dense_index(c, flat), lambda c: _direct_dense_index(c, flat),
              "faiss IndexFlatIP", False, "documents",
              keep={"index.faiss": "flat.faiss", "docids.parquet": "flat.docids.parquet"},
              data=lambda c: [c.kept / "flat.faiss"]),
        Stage("search_flat", lambda c: _ours_dense_search(c, flat), lambda c: _direct_dense_search(c, flat),
              "faiss search", True, "queries", keep={"run.parquet": "{q}/flat.parquet"},
              data=lambda c: [c.kept / "flat.faiss"], held=DENSE_SEARCH_BATCH),
        Stage("dense_ivfpq", lambda c: _ours_dense_index(c, ivfpq), lambda c: _direct_dense_index(c, ivfpq),
              "faiss IndexIVFPQ", False, "documents",
              keep={"index.faiss": "ivfpq.faiss", "docids.parquet": "ivfpq.docids.parquet"},
              data=lambda c: [c.kept / "ivfpq.faiss"]),
        Stage("search_ivfpq", lambda c: _ours_dense_search(c, ivfpq), lambda c: _direct_dense_search(c, ivfpq),
              "faiss search", True, "queries", data=lambda c: [c.kept / "ivfpq.faiss"], held=DENSE_SEARCH_BATCH),
        Stage("union_scores", ours_union_scores, lambda c: _reference_scores(c, lambda: _union_pairs(c), "union"),
              "numpy/scipy", True, "pairs", keep={"components.parquet": "{q}/union.components.parquet"},
              data=lambda c: [*c.shards("dense"), *c.shards("sparse")], engine_backed=False),
        Stage("rerank_scores", ours_rerank_scores, lambda c: _reference_scores(c, lambda: _rerank_pairs(c), "rerank"),
              "numpy/scipy", True, "pairs", keep={"components.parquet": "{q}/rerank.components.parquet"},
              data=lambda c: [*c.shards("dense"), *c.shards("sparse")], engine_backed=False),
        Stage("fuse", ours_fuse, None, "", True, "pairs", engine_backed=False,
              data=lambda c: [c.kept_q / "union.components.parquet"]),
        Stage("evaluate", ours_evaluate, direct_evaluate, "pytrec_eval", True, "queries",
              data=lambda c: [c.kept_q / "bm25.parquet"], held=EVAL_CHUNK),
    ]  # fmt: skip


# ----------------------------------------------------------------------------------------- measuring


@dataclass
class Measured:
    seconds: float  #: wall time of the work (imports and the JVM's start excluded)
    cpu: float  #: CPU seconds (user + system) of the work, the process's threads and its children
    rss_mb: float  #: peak RSS of the process and its children, summed
    anon_mb: float  #: the same without file-backed pages (mapped index files)
    extra: dict


def worker(stage_name: str, side: str, ctx: str, result: str) -> None:
    """Child process: prepare one side of one stage, time its work, write the result as JSON."""
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    c = Ctx(**{k: Path(v) if k in ("data", "out") else v for k, v in json.loads(ctx).items()})
    stage = next(s for s in _stages() if s.name == stage_name)
    prepare = stage.ours if side == "ours" else stage.direct
    assert prepare is not None
    work, check = prepare(c)
    cpu, start = _cpu_seconds(), time.perf_counter()
    extra = work()
    seconds, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    if check is not None:
        extra.update(check())
    Path(result).write_text(json.dumps({"seconds": seconds, "cpu": cpu, "extra": extra}))


def _cpu_seconds() -> float:
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _tree_memory(proc) -> tuple[int, int]:
    import psutil

    rss = anon = 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0, 0
    for p in procs:
        try:
            m = p.memory_info()
        except psutil.Error:
            continue
        rss += m.rss
        anon += m.rss - m.shared
    return rss, anon


def measure(stage: Stage, side: str, c: Ctx, tries: int = 3) -> Measured:
    """One run of one side of a stage in a fresh process. A run ended by a signal that the benchmark
    did not send (a busy shared machine has other users' clean-ups) is run again, up to ``tries``."""
    for attempt in range(1, tries + 1):
        try:
            return _measure(stage, side, c)
        except _Killed as err:
            print(f"  {stage.name} ({side}) was killed by signal {err}; attempt {attempt} of {tries}", flush=True)
    raise SystemExit(f"{stage.name} ({side}) was killed {tries} times")


class _Killed(Exception):
    pass


def _measure(stage: Stage, side: str, c: Ctx) -> Measured:
    import psutil

    shutil.rmtree(c.out, ignore_errors=True)
    c.out.mkdir(parents=True)
    result = c.out.parent / f"{c.out.name}.result.json"
    result.unlink(missing_ok=True)
    ctx = json.dumps({"data": str(c.data), "q": c.q, "out": str(c.out), "threads": c.threads})
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(c.threads)
    log = c.out.parent / f"{stage.name}.{side}.log"
    with open(log, "w") as fh:
        cmd = [sys.executable, str(Path(__file__).absolute()), "_work", stage.name, side, ctx, str(result)]
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
        watched = psutil.Process(proc.pid)
        peak = (0, 0)
        while proc.poll() is None:
            rss, anon = _tree_memory(watched)
            peak = (max(peak[0], rss), max(peak[1], anon))
            time.sleep(0.05)
    if proc.returncode in (-9, -15, 128 + 9, 128 + 15):  # SIGKILL, SIGTERM: not the run's own failure
        raise _Killed(abs(proc.returncode) % 128)
    if proc.returncode != 0 or not result.exists():
        raise SystemExit(
            f"{stage.name} ({side}) failed with exit {proc.returncode}; see {log}:\n{log.read_text()[-3000:]}"
        )
    out = json.loads(result.read_text())
    return Measured(out["seconds"], out["cpu"], peak[0] / 2**20, peak[1] / 2**20, out["extra"])


def _keep(stage: Stage, c: Ctx) -> None:
    for src, dst in stage.keep.items():
        target = c.kept / dst.replace("{q}", f"q{c.q}")
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_dir():
            shutil.rmtree(target)
        target.unlink(missing_ok=True)
        shutil.move(str(c.out / src), target)


def _path_mb(paths: list[Path]) -> float:
    from miracl_eval.jobs.requests import path_mb

    return sum(path_mb(p) for p in paths)


@dataclass
class Figures:
    ours: list[Measured] = field(default_factory=list)
    direct: list[Measured] = field(default_factory=list)
    data_mb: float = 0.0

    def seconds(self, side: str) -> float:
        """The best of the rounds: other load on the machine only ever slows a run down."""
        return min(m.seconds for m in getattr(self, side))

    def cpu(self, side: str) -> float:
        return min(m.cpu for m in getattr(self, side))

    def rss(self, side: str) -> float:
        return max(m.rss_mb for m in getattr(self, side))

    def anon(self, side: str) -> float:
        return max(m.anon_mb for m in getattr(self, side))


def run_size(n: int, stages: list[Stage], args: argparse.Namespace, results: dict) -> None:
    data = args.workdir / f"n{n}"
    counts = [QUERIES, QUERIES * QUERY_SCALE] if n == min(args.sizes) else [QUERIES]
    start = time.perf_counter()
    generate(data, n, counts, args.threads)
    print(f"\n== {n:,} passages: generated in {time.perf_counter() - start:.0f} s ({_load()})", flush=True)
    saved = data / "figures.json"
    names = sorted(s.name for s in stages)
    if args.resume and saved.is_file() and json.loads(saved.read_text())["key"] == [names, args.threads]:
        for (q, name), fig in _load_figures(json.loads(saved.read_text())["figures"]).items():
            results[(n, q, name)] = fig
        print(f"  figures of an earlier run: {saved}", flush=True)
        return
    shutil.rmtree(data / "kept", ignore_errors=True)
    for q in counts:
        for stage in stages:
            if q != QUERIES and not stage.per_query:
                continue
            c = Ctx(data=data, q=q, out=data / "runs" / stage.name, threads=args.threads)
            fig = results.setdefault((n, q, stage.name), Figures())
            # the extra queries measure what a query costs us: ours only, one round
            sides = ["ours", "direct"] if stage.direct is not None and q == QUERIES else ["ours"]
            r = 0
            while r < args.rounds or (r < MAX_ROUNDS and q == QUERIES and _more(fig, sides, args.budget)):
                for side in sides if r % 2 == 0 else sides[::-1]:
                    m = measure(stage, side, c)
                    getattr(fig, side).append(m)
                    if side == "ours":
                        _keep(stage, c)
                    print(f"  {stage.name:<14} q={q:<5} round {r + 1} {side:<6} {m.seconds:8.2f} s (CPU {m.cpu:7.2f} s)  "
                          f"peak RSS {m.rss_mb:7.0f} MB (anon {m.anon_mb:6.0f})  {_extra(m.extra)}", flush=True)  # fmt: skip
                r += 1
            fig.data_mb = _path_mb(stage.data(c))
    figures = [[q, name, fig.data_mb, [m.__dict__ for m in fig.ours], [m.__dict__ for m in fig.direct]]
               for (size, q, name), fig in results.items() if size == n]  # fmt: skip
    saved.write_text(json.dumps({"key": [names, args.threads], "figures": figures}))
    if not args.keep:
        shutil.rmtree(data, ignore_errors=True)


def _load_figures(rows: list) -> dict[tuple[int, str], Figures]:
    return {
        (q, name): Figures([Measured(**m) for m in ours], [Measured(**m) for m in direct], data_mb)
        for q, name, data_mb, ours, direct in rows
    }


def _more(fig: Figures, sides: list[str], budget: float) -> bool:
    """Another round fits in the stage's budget of seconds per side (fast stages get several)."""
    return all(sum(m.seconds for m in getattr(fig, side)) + min(m.seconds for m in getattr(fig, side)) <= budget
               for side in sides)  # fmt: skip


def _extra(extra: dict) -> str:
    return ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in extra.items())


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} / {five:.1f} on {os.cpu_count()} CPUs"


# ----------------------------------------------------------------------------------------- figures


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(y) against log(x)."""
    lx, ly = [math.log(x) for x in xs], [math.log(max(y, 1e-9)) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    den = sum((a - mx) ** 2 for a in lx)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / den if den else 0.0


def affine(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares ``y = a + b x`` with ``a, b >= 0``: a fixed cost plus a cost per passage."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0
    if b <= 0:
        return my, 0.0
    a = my - b * mx
    if a < 0:  # through the origin
        return 0.0, sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs)
    return a, b


def _ratio(fig: Figures, stage: Stage) -> str:
    """ours / direct of the CPU time (the goal's measure), and of the wall time."""
    if not fig.direct:
        return "     -"
    cpu = fig.cpu("ours") / fig.cpu("direct")
    wall = fig.seconds("ours") / fig.seconds("direct")
    flag = "    " if not stage.engine_backed else (" ok " if cpu <= GOAL else " OVER")
    return f"{cpu:5.2f}{flag} {wall:5.2f}"


def print_size(n: int, stages: list[Stage], results: dict) -> None:
    print(
        f"\n-- {n:,} passages, {QUERIES:,} queries (time: wall, best of the rounds; ours/direct: of the CPU "
        f"time, then of the wall time; RSS: peak of the process tree, MB)"
    )
    print(f"  {'stage':<14}{'ours s':>9}{'direct s':>10}  {'ours/dir cpu  wall':<19} {'throughput (ours)':<24}"
          f"{'RSS ours':>9}{'direct':>8}{'anon ours':>10}{'direct':>8}  direct = ")  # fmt: skip
    for stage in stages:
        fig = results.get((n, QUERIES, stage.name))
        if fig is None:
            continue
        ours = fig.seconds("ours")
        amount = fig.ours[-1].extra.get(stage.unit, n if stage.unit == "documents" else QUERIES)
        direct = f"{fig.seconds('direct'):10.2f}" if fig.direct else f"{'-':>10}"
        rss_d = f"{fig.rss('direct'):8.0f}" if fig.direct else f"{'-':>8}"
        anon_d = f"{fig.anon('direct'):8.0f}" if fig.direct else f"{'-':>8}"
        print(f"  {stage.name:<14}{ours:9.2f}{direct}  {_ratio(fig, stage):<19} "
              f"{amount / ours:>10,.0f} {stage.unit + '/s':<13}{fig.rss('ours'):9.0f}{rss_d}"
              f"{fig.anon('ours'):10.0f}{anon_d}  {stage.engine or '(ours only)'}")  # fmt: skip
        checks = {k: v for m in fig.direct for k, v in m.extra.items() if k in ("same_hits", "max_diff", "ndcg@10")}
        if checks:
            print(f"  {'':<14}direct's output: {_extra(checks)}")


@dataclass
class Growth:
    t_ours: float
    t_direct: float | None
    m_ours: float
    m_direct: float | None
    data: float
    t_fit: tuple[float, float]  #: ours, fixed + per-passage seconds (:func:`affine`)
    m_fit: tuple[float, float]  #: ours, fixed + per-passage MB


def growth(stage: Stage, sizes: list[int], results: dict) -> Growth:
    figs = [results[(n, QUERIES, stage.name)] for n in sizes]
    x = [float(n) for n in sizes]
    direct = bool(figs[0].direct)
    return Growth(
        slope(x, [f.seconds("ours") for f in figs]),
        slope(x, [f.seconds("direct") for f in figs]) if direct else None,
        slope(x, [f.rss("ours") for f in figs]),
        slope(x, [f.rss("direct") for f in figs]) if direct else None,
        slope(x, [max(f.data_mb, 1e-3) for f in figs]),
        affine(x, [f.seconds("ours") for f in figs]),
        affine(x, [f.rss("ours") for f in figs]),
    )


def per_query(stage: Stage, n: int, results: dict) -> tuple[float, float]:
    """From the smallest size's two query counts: the fixed share of the time (0..1) and MB per query."""
    one, more = results[(n, QUERIES, stage.name)], results[(n, QUERIES * QUERY_SCALE, stage.name)]
    r = more.seconds("ours") / one.seconds("ours")
    fixed = min(1.0, max(0.0, (QUERY_SCALE - r) / (QUERY_SCALE - 1)))
    mb = max(0.0, (more.rss("ours") - one.rss("ours")) / (QUERIES * (QUERY_SCALE - 1)))
    return fixed, mb


def print_growth(stages: list[Stage], sizes: list[int], results: dict) -> dict[str, Growth]:
    print(f"\n-- growth from {sizes[0]:,} to {sizes[-1]:,} passages: log-log slopes (1 = linear in N)")
    print(f"  {'stage':<14}{'CPU ratio ours/direct at each size':<34}{'time ours':>10}{'direct':>8}"
          f"{'memory ours':>13}{'direct':>8}{'its data':>10}")  # fmt: skip
    out = {}
    for stage in stages:
        if any((n, QUERIES, stage.name) not in results for n in sizes):
            continue
        g = out[stage.name] = growth(stage, sizes, results)
        ratios = " ".join(_ratio(results[(n, QUERIES, stage.name)], stage)[:10].strip().ljust(10) for n in sizes)
        opt = lambda v: f"{v:8.2f}" if v is not None else f"{'-':>8}"  # noqa: E731
        faster = "  memory grows faster than its data" if g.m_ours > g.data + 0.15 and g.m_ours > 0.3 else ""
        print(f"  {stage.name:<14}{ratios:<34}{g.t_ours:10.2f}{opt(g.t_direct)}{g.m_ours:13.2f}"
              f"{opt(g.m_direct)}{g.data:10.2f}{faster}")  # fmt: skip
    n0 = sizes[0]
    queried = [s for s in stages if s.per_query and (n0, QUERIES * QUERY_SCALE, s.name) in results]
    if queried:
        print(f"\n-- per query, at {n0:,} passages: {QUERIES:,} and {QUERIES * QUERY_SCALE:,} queries")
        for stage in queried:
            fixed, mb = per_query(stage, n0, results)
            print(f"  {stage.name:<14}fixed share of the time {fixed:5.2f}, {mb * 1024:8.1f} KB per query held")
    return out


def _plan() -> dict:
    import yaml

    from miracl_eval.config.validate import validate

    plan = yaml.safe_load((REPO / "scale.yaml").read_text())
    return validate({"languages": ["en"], **plan})


def extrapolate(stages: list[Stage], sizes: list[int], results: dict, growths: dict[str, Growth], threads: int) -> None:
    from miracl_eval.jobs.requests import heap_mb

    plan = _plan()
    chunk, heap = plan["query_chunk"], heap_mb(plan["java_heap"])
    n_max, n0 = sizes[-1], sizes[0]
    print(f"\n-- extrapolated from {n_max:,} passages with the slopes above or a fixed plus a per-passage cost "
          f"fitted to the sizes, whichever is larger (times at {threads} threads, from "
          f"{QUERIES:,} measured queries); scale.yaml: query_chunk {chunk}, java_heap "
          f"{plan['java_heap']}, dense index {plan['dense_index']['type']} (and ivfpq)")  # fmt: skip
    for target, (n_t, q_t) in TARGETS.items():
        print(f"  {target}: {n_t:,} passages, {q_t:,} queries")
        print(f"    {'stage':<14}{'time':>12}{'peak memory':>14}  held queries")
        over = []
        for stage in stages:
            g = growths.get(stage.name)
            if g is None:
                continue
            fig = results[(n_max, QUERIES, stage.name)]
            grow = n_t / n_max
            # two readings of the same figures, the larger taken: the log-log slope (a power of N)
            # and a fixed cost plus a cost per passage (which a slope under 1 at 100k-1M, where the
            # fixed cost still weighs, understates at 33x the largest size)
            seconds = max(fig.seconds("ours") * grow**g.t_ours, g.t_fit[0] + g.t_fit[1] * n_t)
            mem = fig.rss("ours") * grow ** max(0.0, g.m_ours)
            # memory that visibly grows (an index held whole) by the fit too; a streamed stage's
            # flat peak by its slope, as is a JVM's, which stops at its heap (set below)
            if g.m_ours >= GROWING and stage.name not in JAVA_INDEXING:
                mem = max(mem, g.m_fit[0] + g.m_fit[1] * n_t)
            held = ""
            if stage.per_query and (n0, QUERIES * QUERY_SCALE, stage.name) in results:
                fixed, mb = per_query(stage, n0, results)
                seconds *= fixed + (1 - fixed) * q_t / QUERIES
                held_q = min(q_t, stage.held or chunk)
                mem += mb * (held_q - QUERIES)
                held = f"{held_q:,}"
            if stage.name in JAVA_INDEXING:
                mem += max(0.0, heap - heap_mb(HEAP))  # the plan's larger Java heap
            flat = stage.name in ("dense_flat", "search_flat")
            if mem > LIMIT_MB and not flat:
                over.append(stage.name)
            print(f"    {stage.name:<14}{duration(seconds):>12}{mem / 1024:11.1f} GB  {held}")
        verdict = "every stage but the flat index under 32 GB" if not over else f"OVER 32 GB: {', '.join(over)}"
        print(f"    -> {verdict}")


def main() -> None:
    global QUERIES  # every figure is of this many queries (--queries: a smoke run measures fewer)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="passages (default 100k 300k 1M)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of each side per stage, at least (default 1)")
    parser.add_argument(
        "--budget", type=float, default=20.0,
        help=f"more rounds, up to {MAX_ROUNDS}, while a side's rounds take less than this many seconds (default 20)",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=2, help="threads of every stage, both sides (default 2)")
    parser.add_argument(
        "--queries", type=int, default=QUERIES, help=f"queries measured at every size (default {QUERIES:,})"
    )
    parser.add_argument("--stages", nargs="+", help="only these stages (and what they read is built first)")
    parser.add_argument("--workdir", type=Path, help="keep the generated data here (reused when it matches)")
    parser.add_argument("--keep", action="store_true", help="keep the generated data and outputs")
    parser.add_argument(
        "--resume", action="store_true", help="take the figures of sizes that an earlier run in --workdir finished"
    )
    args = parser.parse_args()
    args.sizes = sorted(args.sizes)
    QUERIES = args.queries
    stages = _stages()
    if args.stages:
        unknown = set(args.stages) - {s.name for s in stages}
        if unknown:
            parser.error(f"unknown stage(s) {', '.join(sorted(unknown))}; known: {', '.join(s.name for s in stages)}")
        stages = _needed(stages, args.stages)
    temporary = args.workdir is None
    args.workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="scale_"))).resolve()
    args.keep = args.keep or not temporary
    start = time.perf_counter()
    print(f"scale benchmark: sizes {', '.join(f'{n:,}' for n in args.sizes)}; {QUERIES:,} queries "
          f"({QUERIES * QUERY_SCALE:,} at the smallest size); {args.threads} threads; {args.rounds} round(s); "
          f"work dir {args.workdir}; {_load()}")  # fmt: skip
    results: dict = {}
    try:
        for n in args.sizes:
            run_size(n, stages, args, results)
            print_size(n, stages, results)
    finally:
        if temporary and not args.keep:
            shutil.rmtree(args.workdir, ignore_errors=True)
    if len(args.sizes) > 1:
        growths = print_growth(stages, args.sizes, results)
        extrapolate(stages, args.sizes, results, growths, args.threads)
    print(f"\ntotal {duration(time.perf_counter() - start)}; {_load()}")


#: what each stage reads from earlier stages' kept outputs
NEEDS = {
    "bm25_search": ["bm25_index"],
    "impact_search": ["impact_index"],
    "search_flat": ["dense_flat"],
    "search_ivfpq": ["dense_ivfpq"],
    "union_scores": ["search_flat", "impact_search"],
    "rerank_scores": ["search_flat"],
    "fuse": ["union_scores"],
    "evaluate": ["bm25_search"],
}


def _needed(stages: list[Stage], names: list[str]) -> list[Stage]:
    wanted: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            todo.extend(NEEDS.get(name, []))
    return [s for s in stages if s.name in wanted]


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_work":
        worker(*sys.argv[2:6])
    else:
        main()
