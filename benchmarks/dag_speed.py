"""DAG speed: wall time of a no-op re-run of the full default workflow (not a test).

The full default run is MIRACL v1.0 dev, 18 languages, all six methods, encoder shard_size
100000: about 1,400 jobs, most of them one encoding job per 100k-passage corpus shard, a number
that the workflow learns from checkpoints (rules/common/inputs.smk: ``corpus_shards``, ``query_chunks``).
This script builds the *finished* state of such a run in a temporary working directory, with no
download and no real data, then times what a user waits for when nothing is left to do:

1. writes a config (dataset miracl, 18 languages, methods bm25 dense sparse multivec dense+sparse
   all, default encoder settings) whose ``source`` points at empty placeholder files in the
   directory (so no hub download rules are in the DAG), and ``model`` at a local placeholder folder;
2. writes the checkpoint outputs with MIRACL's real sizes: ``corpus.parquet`` of each language
   with the real passage count as its Parquet row count (all-null columns: the 32.9M-row English
   file takes ~0.3 MB and < 1 s), ``queries.parquet`` with the real dev topic count, and a
   one-row ``qrels.parquet``, so that the DAG has the real shard and chunk counts;
3. marks every job as finished with Snakemake's own ``--touch --forceall``. Stock ``--touch``
   (9.27) does not create an output that is missing: it logs "Output files not touched because
   they don't exist", reports the job as done, and the next dry run wants to run it again. So the
   touch runs in-process here with the touch executor patched to create each missing output,
   benchmark and log first (``_IOFile.touch_or_create``, which creates a ``directory()`` output
   as a folder), and its 0.1 s pause between jobs shortened to 10 ms (Linux timestamps are
   tick-coarse; 10 ms keeps each job's outputs strictly newer than its inputs). The touch records
   Snakemake metadata for every job, as a real run does, so the timed re-run also reads it. Then
   ``snakemake -n`` must say "Nothing to be done";
4. times, from fresh processes, each several times (min / median; wall clock, and the child's
   CPU time, which other load on the machine disturbs less):
   a. the no-op re-run ``snakemake --cores 8 -n results/miracl_ndcg.tsv`` (target < 10 s);
   b. its parts, with the Python API in one process: imports, parsing (Snakefile, config
      validation), DAG construction (``execute_workflow`` as a dry run: jobs, checkpoint
      dependency update, needrun with mtimes and metadata), and the CLI's parse-only
      ``--list-rules`` for comparison.

    python benchmarks/dag_speed.py                       # 5 repetitions, temp dir removed after
    python benchmarks/dag_speed.py --repeat 3 --workdir /tmp/dag      # keep the directory
    python benchmarks/dag_speed.py --workdir /tmp/dag --reuse --profile   # time it again, + cProfile
    python benchmarks/dag_speed.py --snakefile /tmp/variant/Snakefile  # a modified copy of the workflow

Setup takes about a minute (mostly the touch of ~1,400 jobs); each timed run 5-10 s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "Snakefile"  # --snakefile replaces it (to compare a variant of the workflow)
TARGET = "results/miracl_ndcg.tsv"
GOAL_S = 10.0

# MIRACL v1.0 passages per language: the `documents` of pyserini's prebuilt BM25 indexes
# lucene-index.miracl-v1.0-{lang}.20221004.2b2856 (pyserini/prebuilt_index_info.py, pyserini
# 0.22+), which are the corpus sizes of Zhang et al., MIRACL, TACL 2023, Table 2 (#Passages) and
# of the hub's miracl/miracl-corpus.
PASSAGES = {
    "ar": 2_061_414,
    "bn": 297_265,
    "en": 32_893_221,
    "es": 10_373_953,
    "fa": 2_207_172,
    "fi": 1_883_509,
    "fr": 14_636_953,
    "hi": 506_264,
    "id": 1_446_315,
    "ja": 6_953_614,
    "ko": 1_486_752,
    "ru": 9_543_918,
    "sw": 131_924,
    "te": 518_079,
    "th": 542_166,
    "zh": 4_934_368,
    "de": 15_866_222,
    "yo": 49_043,
}
# MIRACL v1.0 dev topics per language (topics.miracl-v1.0-{lang}-dev.tsv; paper Table 2, #Q dev).
DEV_QUERIES = {
    "ar": 2896,
    "bn": 411,
    "en": 799,
    "es": 648,
    "fa": 632,
    "fi": 1271,
    "fr": 343,
    "hi": 350,
    "id": 960,
    "ja": 860,
    "ko": 213,
    "ru": 1252,
    "sw": 482,
    "te": 828,
    "th": 733,
    "zh": 393,
    "de": 305,
    "yo": 119,
}
LANGUAGES = list(DEV_QUERIES)
METHODS = ["bm25", "dense", "sparse", "multivec", "dense+sparse", "all"]
# Checkpoints of the workflow whose outputs this script writes (one job per corpus / language).
CHECKPOINTS = {"preprocess_corpus": len(PASSAGES), "preprocess_topics": len(DEV_QUERIES)}


# ---------------------------------------------------------------------------------------------
# the finished state


def write_inputs(work: Path) -> Path:
    """The config, the placeholder sources and model, and the checkpoint outputs at real size."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml

    sys.path.insert(0, str(REPO))
    from miracl_eval.schemas import CORPUS, QRELS, QUERIES, count_rows

    config = {
        "dataset": "miracl",
        "languages": LANGUAGES,
        "methods": METHODS,
        "source": {
            "corpus": "data/{lang}/corpus.jsonl.gz",
            "topics": "data/{lang}/topics.tsv",
            "qrels": "data/{lang}/qrels.tsv",
        },
        "model": "models/bge-m3",
    }
    cfg_path = work / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")

    model = work / "models" / "bge-m3"
    model.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (model / name).touch()
    for lang in LANGUAGES:
        folder = work / "data" / lang
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("corpus.jsonl.gz", "topics.tsv", "qrels.tsv"):
            (folder / name).touch()
    time.sleep(0.05)  # the checkpoint outputs are strictly newer than their sources

    chunk = 1 << 20
    nulls = pa.RecordBatch.from_arrays([pa.nulls(chunk, f.type) for f in CORPUS], schema=CORPUS)
    for lang, n in PASSAGES.items():
        path = work / "resources" / "miracl" / "corpus" / lang / "corpus.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        with pq.ParquetWriter(path, CORPUS, compression="zstd") as writer:
            for start in range(0, n, chunk):
                writer.write_batch(nulls.slice(0, min(chunk, n - start)), row_group_size=chunk)
        assert count_rows(path) == n, path
        topics = work / "resources" / "miracl" / "topics" / lang
        topics.mkdir(parents=True, exist_ok=True)
        qids = [str(i) for i in range(DEV_QUERIES[lang])]
        pq.write_table(pa.table({"qid": qids, "query": ["q"] * len(qids)}, schema=QUERIES), topics / "queries.parquet")
        pq.write_table(
            pa.table({"qid": ["0"], "docid": ["0#0"], "relevance": [1]}, schema=QRELS), topics / "qrels.parquet"
        )
        assert count_rows(topics / "queries.parquet") == DEV_QUERIES[lang]
    return cfg_path


def snakemake_cmd(work: Path, cfg: Path, *args: str) -> list[str]:
    return [
        sys.executable, "-m", "snakemake", *args,
        "-s", str(SNAKEFILE), "--directory", str(work), "--configfile", str(cfg),
    ]  # fmt: skip


@dataclass
class Run:
    wall: float  # seconds, wall clock
    cpu: float  # seconds, user + system of the child process (less sensitive to other load)
    out: str


def run(cmd: list[str], check: bool = True) -> Run:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out = proc.stdout + proc.stderr
    if check and proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{out[-6000:]}")
    return Run(wall, cpu, out)


def job_stats(text: str) -> dict[str, int]:
    """Jobs per rule from Snakemake's 'Job stats' table (the first one printed)."""
    jobs: dict[str, int] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Job stats:"):
            for row in lines[i + 3 :]:
                parts = row.split()
                if len(parts) != 2 or parts[0] == "total":
                    break
                jobs[parts[0]] = int(parts[1])
            break
    return jobs


def nothing_to_do(text: str) -> bool:
    return "Nothing to be done" in text


def touch_child(argv: list[str]) -> None:
    """``snakemake --touch`` whose touch executor first creates missing outputs (see the docstring)."""
    from snakemake.cli import main
    from snakemake.executors import touch as touch_executor

    executor = touch_executor.Executor
    original = executor.run_job

    def run_job(self, job):
        files = [*job.output, *job.log]
        if job.benchmark:
            files.append(job.benchmark)
        for f in files:
            if not os.path.lexists(f):
                f.touch_or_create()
        return original(self, job)

    executor.run_job = run_job
    executor.SLEEPING_TIME = 0.01
    main(argv)


def finish_all(work: Path, cfg: Path, cores: int) -> tuple[float, int]:
    """Touch every job of the full DAG; returns the wall time and the number of jobs touched."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "_touch", TARGET, "--touch", "--forceall"]
    cmd += ["-s", str(SNAKEFILE), "--directory", str(work), "--configfile", str(cfg), "--cores", str(cores)]
    cmd += ["--quiet", "rules"]
    result = run(cmd)
    steps = re.findall(r"(\d+) of (\d+) steps \(100%\) done", result.out)
    return result.wall, int(steps[-1][1]) if steps else -1


# ---------------------------------------------------------------------------------------------
# timings


def api_child(work: str, cfg: str, cores: int, snakefile: str) -> None:
    """One no-op dry run through the Python API, timed by phase; prints JSON."""
    t0 = time.perf_counter()
    from snakemake.api import SnakemakeApi
    from snakemake.settings.enums import Quietness
    from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings

    t1 = time.perf_counter()
    with SnakemakeApi(OutputSettings(dryrun=True, quiet={Quietness.ALL})) as api:
        workflow = api.workflow(
            resource_settings=ResourceSettings(cores=cores),
            config_settings=ConfigSettings(configfiles=[Path(cfg)]),
            snakefile=Path(snakefile),
            workdir=Path(work),
        )
        dag = workflow.dag(DAGSettings(targets={TARGET}))  # parses the Snakefile
        t2 = time.perf_counter()
        dag.execute_workflow(executor="local", pseudo_executor="dryrun")
        t3 = time.perf_counter()
    print(json.dumps({"import": t1 - t0, "parse": t2 - t1, "dag": t3 - t2}))


def summary(values: list[float]) -> str:
    listed = ", ".join(f"{v:.2f}" for v in values)
    return f"min {min(values):6.2f} s  median {statistics.median(values):6.2f} s  ({listed})"


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} CPUs"


def main() -> None:
    global SNAKEFILE
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each kind (default 5)")
    parser.add_argument("--cores", type=int, default=8, help="--cores of the timed run (default 8)")
    parser.add_argument("--workdir", type=Path, help="use (and keep) this directory instead of a temporary one")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument(
        "--reuse", action="store_true", help="--workdir already holds the finished state of an earlier run: only time"
    )
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of one no-op run")
    parser.add_argument("--snakefile", type=Path, help="time this Snakefile instead (e.g. a modified copy)")
    args = parser.parse_args()
    if args.snakefile:
        SNAKEFILE = args.snakefile.resolve()
    if args.reuse and args.workdir is None:
        parser.error("--reuse needs --workdir")

    work = args.workdir or Path(tempfile.mkdtemp(prefix="dag_speed_"))
    work.mkdir(parents=True, exist_ok=True)
    work = work.resolve()
    keep = args.keep or args.workdir is not None
    print(f"working directory: {work}\nSnakefile: {SNAKEFILE}", flush=True)
    try:
        if args.reuse:
            cfg, jobs = work / "config.yaml", json.loads((work / "dag_jobs.json").read_text())
        else:
            cfg, jobs = build(work, args.cores)
        bench(work, cfg, jobs, args)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def build(work: Path, cores: int) -> tuple[Path, dict[str, int]]:
    """Steps 1-3: the config, the checkpoint outputs at real size, every job marked as done."""
    start = time.perf_counter()
    cfg = write_inputs(work)
    shards = sum(-(-n // 100_000) for n in PASSAGES.values())
    print(
        f"inputs written in {time.perf_counter() - start:.1f} s: {sum(PASSAGES.values()):,} passages in "
        f"{len(PASSAGES)} corpora ({shards} shards of 100000), {sum(DEV_QUERIES.values()):,} dev queries",
        flush=True,
    )

    # The full DAG: every job but the (finished) checkpoints has to run now. (A --forceall dry
    # run would not do: it re-runs the checkpoints, so it cannot know the shard counts.)
    result = run(snakemake_cmd(work, cfg, TARGET, "-n", "--cores", str(cores), "--quiet", "rules"))
    jobs = {**CHECKPOINTS, **job_stats(result.out)}
    (work / "dag_jobs.json").write_text(json.dumps(jobs))
    print(f"dry run with every job but the checkpoints to do: {result.wall:.1f} s", flush=True)

    wall, touched = finish_all(work, cfg, cores)
    print(f"finished state: touch --forceall of {touched} jobs in {wall:.1f} s", flush=True)
    if touched != sum(jobs.values()):
        print(f"  WARNING: the touch ran {touched} jobs, the DAG has {sum(jobs.values())}")
    for _ in range(3):
        result = run(snakemake_cmd(work, cfg, TARGET, "-n", "--cores", str(cores)))
        if nothing_to_do(result.out):
            break
        print("  the dry run still has jobs to do; touching again", flush=True)
        finish_all(work, cfg, cores)
    else:
        raise SystemExit(f"the finished state is not up to date:\n{result.out[-4000:]}")
    return cfg, jobs


def bench(work: Path, cfg: Path, jobs: dict[str, int], args: argparse.Namespace) -> None:
    """Step 4: the timings."""
    total = sum(jobs.values())
    print(f"\nfull DAG of {TARGET}: {total} jobs")
    for rule, n in sorted(jobs.items(), key=lambda kv: -kv[1]):
        print(f"  {rule:<22}{n:>6}")
    records = sum(len(files) for _, _, files in os.walk(work / ".snakemake" / "metadata"))
    print(f"metadata records: {records}\n{load()}")

    noop_cmd = snakemake_cmd(work, cfg, TARGET, "-n", "--cores", str(args.cores))
    print(f"\n(a) no-op re-run: snakemake --cores {args.cores} -n {TARGET}  ({args.repeat} runs)", flush=True)
    noop = [run(noop_cmd) for _ in range(args.repeat)]
    for r in noop:
        assert nothing_to_do(r.out), r.out[-3000:]
    print(f"  {'wall':<28}{summary([r.wall for r in noop])}")
    print(f"  {'CPU (user + sys)':<28}{summary([r.cpu for r in noop])}")

    print(f"\n(b) its parts, Python API in one process ({args.repeat} runs, wall)", flush=True)
    phases: dict[str, list[float]] = {"import": [], "parse": [], "dag": [], "process": []}
    api_cmd = [sys.executable, str(Path(__file__).resolve()), "_api", str(work), str(cfg), str(args.cores)]
    api_cmd.append(str(SNAKEFILE))
    for _ in range(args.repeat):
        result = run(api_cmd)
        line = [s for s in result.out.splitlines() if s.startswith("{")][-1]
        for key, value in json.loads(line).items():
            phases[key].append(value)
        phases["process"].append(result.wall)
    labels = {
        "import": "import snakemake.api",
        "parse": "parse Snakefile + config",
        "dag": "DAG construction + needrun",
        "process": "whole process",
    }
    for key, label in labels.items():
        print(f"  {label:<28}{summary(phases[key])}")
    listing = [run(snakemake_cmd(work, cfg, "--list-rules")).wall for _ in range(args.repeat)]
    print(f"  {'CLI --list-rules (no DAG)':<28}{summary(listing)}")
    print(load())

    if args.profile:
        profile(noop_cmd, work)

    median = statistics.median(r.wall for r in noop)
    verdict = "meets" if median < GOAL_S else "MISSES"
    print(
        f"\nno-op re-run of the full DAG ({total} jobs): median {median:.2f} s wall "
        f"(min {min(r.wall for r in noop):.2f} s, CPU median {statistics.median(r.cpu for r in noop):.2f} s); "
        f"DAG construction alone median {statistics.median(phases['dag']):.2f} s; "
        f"{verdict} the target of < {GOAL_S:.0f} s"
    )


def profile(noop_cmd: list[str], work: Path) -> None:
    import pstats

    out = work / "noop.prof"
    cmd = [noop_cmd[0], "-m", "cProfile", "-o", str(out), *noop_cmd[1:]]
    result = run(cmd)
    print(f"\ncProfile of one no-op run ({result.wall:.1f} s under the profiler)")
    stats = pstats.Stats(str(out))
    stats.sort_stats("cumulative").print_stats(30)
    stats.sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_touch":
        touch_child(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "_api":
        api_child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        main()
