"""What a run will cost, before it starts: every job it makes, with its rule, threads, GPUs, memory, time
and disk, the GPU-hours, and for a model behind an embeddings API its tokens and dollars, without
downloading, preprocessing or encoding anything (``results/{dataset}_forecast.tsv`` and the report's
forecast page).

The jobs are Snakemake's own, so the forecast cannot drift from the workflow: the workflow is dry-run
twice in a scratch folder (:func:`forecast_jobs`), with the run's configuration and ``--cores``. The
corpus and topics preprocessing are checkpoints (the encoding blocks, exact-search blocks and query
chunks are counted from their outputs), so a plain ``snakemake -n`` lists none of the jobs behind them.
Here the first dry run (*before*) forces the downloads and lists them and the preprocessing; the second
(*after*) has stand-ins of the checkpoints' outputs, Parquet tables of all-null rows with the data's
row counts, so Snakemake expands every encoding, search, scoring, rerank and report job and evaluates
each one's request (:mod:`miracl_eval.jobs.requests`) from them, as it will in the real run once the
data is preprocessed. The sizes (:func:`data_sizes`) are the preprocessed tables' when this working
directory has them, else the local source files' records, else the dataset's reference sizes (the
published ones, ``data/reference/``). A model folder the run builds or fetches is sized from this
working directory's copy when there is one, else as the workflow sizes it before the folder exists.

An API model's tokens and dollars come from its cost plan (:func:`miracl_eval.encoders.api_plan.cost_plan`,
what the ``api_cost_plan`` job computes): over the preprocessed tables when they exist, else over the
bundled sample of each language, scaled to the sizes (an estimate, said so).
"""

from __future__ import annotations

import copy
import html
import json
import logging
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from miracl_eval import schemas
from miracl_eval.atomic import write_text_atomic
from miracl_eval.config.models import BUILT_CHECKPOINTS, HUB_MODELS_DIR, hub_folder
from miracl_eval.config.validate import fill_placeholders
from miracl_eval.encoders.checkpoints import is_hub_id
from miracl_eval.encoders.registry import FAMILIES
from miracl_eval.errors import InputError, MiraclEvalError
from miracl_eval.evaluation.comparability import PUBLISHED_RELEASE, reference_passages, references
from miracl_eval.inputs.datasets import Dataset, get_dataset
from miracl_eval.inputs.loading import iter_lines, iter_topics
from miracl_eval.inputs.preprocess import corpus_inputs
from miracl_eval.jobs.requests import MB, RAW_BYTES_PER_PASSAGE, checkpoint_mb, path_mb
from miracl_eval.report.html import html_page, html_table
from miracl_eval.tsv import format_tsv, read_table
from miracl_eval.types import PathLike

log = logging.getLogger(__name__)

COLUMNS: tuple[str, ...] = (
    "rule", "wildcards", "threads", "gpus", "mem_mb", "runtime_min", "gpu_hours", "disk_mb", "tokens", "usd",
    "benchmark",
)  # fmt: skip
#: a request the dry run could not evaluate (Snakemake's ``<TBD>``), in the table; a request the rule does not
#: make (a local rule's run time) is empty
UNKNOWN = "unknown"
#: rules forced in the first dry run: the downloads (and the release lookup) that the preprocessing reads
FORCED = ("download_corpus", "download_topics", "data_version")
#: the dry runs' time limit, seconds (the full MIRACL DAG takes about a minute)
DRY_RUN_TIMEOUT = 3600
#: aggregate rules that are no job of their own
AGGREGATES = frozenset({"all"})

_JOB = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")


# --------------------------------------------------------------------------- the jobs


@dataclass(frozen=True)
class PlannedJob:
    """One job of a dry run: its rule, wildcards (as printed), threads, resources and benchmark file."""

    rule: str
    wildcards: tuple[tuple[str, str], ...]
    threads: int
    resources: Mapping[str, str]
    benchmark: str | None = None

    @property
    def key(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        return self.rule, self.wildcards

    def number(self, resource: str) -> int | None:
        """An integer resource (``mem_mb``, ``runtime``, ``disk_mb``, ``gpu``); None when unknown (``<TBD>``)."""
        value = self.resources.get(resource)
        return int(value) if value is not None and value.isdigit() else None

    def cell(self, resource: str) -> object:
        """A resource for the table: its value, :data:`UNKNOWN` when the dry run could not evaluate it, empty
        when the rule asks for none."""
        if resource not in self.resources:
            return ""
        value = self.number(resource)
        return UNKNOWN if value is None else value

    @property
    def gpus(self) -> int:
        return self.number("gpu") or 0


def parse_dry_run(text: str) -> list[PlannedJob]:
    """The jobs of a ``snakemake -n`` output, in order (not the ``all`` target)."""
    jobs: list[dict[str, Any]] = []
    for line in text.splitlines():
        m = _JOB.match(line)
        if m:
            jobs.append({"rule": m[1], "wildcards": (), "threads": 1, "resources": {}})
        elif jobs and line.startswith("    ") and ": " in line:
            key, _, value = line.strip().partition(": ")
            if key == "threads":
                jobs[-1]["threads"] = int(value)
            elif key == "benchmark":
                jobs[-1]["benchmark"] = value
            elif key == "wildcards":
                jobs[-1]["wildcards"] = tuple(tuple(item.split("=", 1)) for item in value.split(", "))
            elif key == "resources":
                jobs[-1]["resources"] = dict(item.split("=", 1) for item in value.split(", ") if "=" in item)
    return [PlannedJob(**j) for j in jobs if j["rule"] not in AGGREGATES]


def merge(after: Sequence[PlannedJob], before: Sequence[PlannedJob]) -> list[PlannedJob]:
    """Every job of both dry runs once: the second's (whose requests are known), then the first's that
    the second does not have (the downloads and the preprocessing, done in its scratch folder)."""
    seen = {j.key for j in after}
    return [*after, *(j for j in before if j.key not in seen)]


# --------------------------------------------------------------------------- the data's sizes


@dataclass(frozen=True)
class DataSizes:
    """Passages per corpus and queries per partition, and where each count comes from."""

    passages: Mapping[str, int]
    queries: Mapping[str, int]
    origin: Mapping[str, str] = field(default_factory=dict)  #: "corpus en" / "queries en" -> where from


def _local_records(path: Path) -> int:
    """Records of a local corpus file or folder: Parquet rows, else non-blank lines (JSONL, gzipped or not)."""
    total = 0
    for f in corpus_inputs(path):
        if f.suffix == ".parquet":
            total += pq.read_metadata(f).num_rows
        else:
            total += sum(1 for _, line in iter_lines(f) if line.strip())
    return total


def data_sizes(
    dataset: Dataset,
    partitions: Sequence[str],
    split: str,
    workdir: PathLike,
    source: Mapping[str, str] | None = None,
) -> DataSizes:
    """The sizes a forecast plans with: per corpus and partition, the preprocessed table in ``workdir``
    when there is one, else the local ``source`` file (its records, counted), else the dataset's
    reference size (:mod:`miracl_eval.evaluation.comparability`: of the release its published numbers
    are of). An unknown size is an error naming the corpus or partition."""
    work = Path(workdir)
    corpus_of = {p: dataset.corpus_of(p) for p in partitions}
    refs = references(dataset.name, split, corpus_of)
    published = PUBLISHED_RELEASE.get(dataset.name)
    ref_passages = reference_passages(dataset.name)
    passages: dict[str, int] = {}
    queries: dict[str, int] = {}
    origin: dict[str, str] = {}
    for corpus in dataset.corpora(list(partitions)):
        table = work / "resources" / dataset.name / "corpus" / corpus / "corpus.parquet"
        if table.is_file():
            passages[corpus], origin[f"corpus {corpus}"] = schemas.count_rows(table), "preprocessed"
        elif source:
            local = Path(fill_placeholders(source["corpus"], corpus))
            passages[corpus], origin[f"corpus {corpus}"] = _local_records(work / local), f"local file {local}"
        elif corpus in ref_passages:
            passages[corpus], origin[f"corpus {corpus}"] = ref_passages[corpus], "reference"
        else:
            raise InputError(table, f"the size of corpus {corpus} is unknown: not preprocessed, no reference size")
    for part in partitions:
        table = work / "resources" / dataset.name / "topics" / part / "queries.parquet"
        candidates = refs.get(part, [])
        ref = next((r for r in candidates if r.version == published), candidates[0] if candidates else None)
        if table.is_file():
            queries[part], origin[f"queries {part}"] = schemas.count_rows(table), "preprocessed"
        elif source:
            local = Path(fill_placeholders(source["topics"], part))
            queries[part], origin[f"queries {part}"] = sum(1 for _ in iter_topics(work / local)), f"local file {local}"
        elif ref is not None:
            queries[part], origin[f"queries {part}"] = ref.queries, f"reference ({ref.version})"
        else:
            raise InputError(
                table, f"the number of {split} queries of {part} is unknown: not preprocessed, no reference"
            )
    return DataSizes(passages, queries, origin)


# --------------------------------------------------------------------------- the scratch folders


def _write_nulls(path: Path, schema: pa.Schema, rows: int) -> None:
    """A Parquet table of ``rows`` all-null rows: its row count is all a request reads."""
    path.parent.mkdir(parents=True, exist_ok=True)
    chunk = 1 << 20
    nulls = pa.RecordBatch.from_arrays([pa.nulls(min(chunk, max(rows, 1)), f.type) for f in schema], schema=schema)
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, chunk):
            writer.write_batch(nulls.slice(0, min(chunk, rows - start)), row_group_size=chunk)
        if rows == 0:
            writer.write_table(schema.empty_table())


def _local_paths(config: Mapping[str, Any], workdir: Path) -> dict[str, Any]:
    """The configuration with the paths it gives relative to ``workdir`` made absolute (local sources, the
    hub cache, local model folders and tokenizers), so that it reads the same files from another folder;
    the folders a run builds (``resources/models/...``) stay relative."""
    out = copy.deepcopy(dict(config))

    def absolute(value: object) -> object:
        if not isinstance(value, str) or os.path.isabs(value) or value.startswith(BUILT_CHECKPOINTS):
            return value
        return str(workdir / value) if (workdir / value).exists() or not is_hub_id(value) else value

    source = out.get("source")
    if isinstance(source, dict):
        out["source"] = {k: str(workdir / v) if isinstance(v, str) and not os.path.isabs(v) else v
                         for k, v in source.items()}  # fmt: skip
    hub = out.get("hub")
    if isinstance(hub, dict) and isinstance(hub.get("cache_dir"), str) and not os.path.isabs(hub["cache_dir"]):
        hub["cache_dir"] = str(workdir / hub["cache_dir"])
    for section in ("models", "rerankers"):
        for spec in (out.get(section) or {}).values():
            if isinstance(spec, dict):
                for key in ("checkpoint", "tokenizer"):
                    if key in spec:
                        spec[key] = absolute(spec[key])
    return out


def _model_folders(config: Mapping[str, Any]) -> list[str]:
    """The folders under ``resources/models/`` that the run's models and rerankers load (built or fetched),
    from ``config`` validated (presets resolved)."""
    return sorted({f for f in map(_folder_of, _specs(config)) if f})


def _stand_in_downloads(folder: Path, dataset: Dataset, sizes: DataSizes, partitions: Sequence[str]) -> None:
    """What the downloads leave (the raw corpus as large as the workflow counts ``passages`` from, empty
    topics and qrels, the release), a little older than the tables written after them (and newer than the
    workflow's scripts: an output older than its rule's script is run again)."""
    base = folder / "resources" / dataset.name
    made = []
    for corpus, n in sizes.passages.items():
        raw = base / "downloads" / "corpus" / corpus / "stand-in.jsonl"
        raw.parent.mkdir(parents=True, exist_ok=True)
        with open(raw, "wb") as fh:
            fh.truncate(n * RAW_BYTES_PER_PASSAGE)  # a sparse file: its size is all the request reads
        made.append(raw)
    for part in partitions:
        for name in ("topics.tsv", "qrels.tsv"):
            made.append(base / "downloads" / "topics" / part / name)
            made[-1].parent.mkdir(parents=True, exist_ok=True)
            made[-1].touch()
    version = base / "topics" / "version.txt"
    version.parent.mkdir(parents=True, exist_ok=True)
    version.write_text(f"{dataset.version or 'unknown'}\n", encoding="utf-8")
    made.append(version)
    past = time.time() - 2
    for path in made:
        os.utime(path, (past, past))


def _stand_in_tables(folder: Path, dataset: Dataset, sizes: DataSizes) -> None:
    """The preprocessing checkpoints' outputs with the data's row counts (qrels: one row; no request reads it)."""
    base = folder / "resources" / dataset.name
    for corpus, n in sizes.passages.items():
        _write_nulls(base / "corpus" / corpus / "corpus.parquet", schemas.CORPUS, n)
    for part, n in sizes.queries.items():
        _write_nulls(base / "topics" / part / "queries.parquet", schemas.QUERIES, n)
        _write_nulls(base / "topics" / part / "qrels.parquet", schemas.QRELS, 1)


def _stand_in_models(folder: Path, workdir: Path, config: Mapping[str, Any]) -> dict[str, str]:
    """The model folders the run builds or fetches (``config`` validated), as large as they will be as far as
    is known: this working directory's copy (linked), else a hub model as the workflow sizes it before its fetch
    (the hub cache's copy, or the default size), else (a folder the run builds) empty. A dense model whose
    pooling or normalisation comes from its checkpoint's files gets no stand-in without a copy (its settings are
    read from the folder once it is there): its jobs' requests stay unknown. Returns each folder's size and why."""
    sized: dict[str, str] = {}
    for spec in _specs(config):
        given = _folder_of(spec)
        if given is None or f"model {given}" in sized:
            continue
        there, here = workdir / given, folder / given
        here.parent.mkdir(parents=True, exist_ok=True)
        if there.is_dir():
            here.symlink_to(there.resolve(), target_is_directory=True)
            sized[f"model {given}"] = f"{path_mb(there):,.0f} MB (this working directory's copy)"
            continue
        if spec.get("family") == "dense" and (spec.get("pooling") is None or spec.get("normalize") is None):
            sized[f"model {given}"] = "not there yet, its settings in its files: its jobs' requests unknown until it is"
            continue
        if given.startswith(HUB_MODELS_DIR):
            size, why = checkpoint_mb(str(spec["checkpoint"])), "before its fetch: the hub cache's copy, or the default"
        else:
            size, why = 0.0, "built by the run: not built yet, counted empty"
        here.mkdir()
        with open(here / "stand-in.bin", "wb") as fh:
            fh.truncate(int(size * MB))  # a sparse file: its size is all a request reads
        sized[f"model {given}"] = f"{size:,.0f} MB ({why})"
    return sized


def _specs(config: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The resolved specs of the models and rerankers that the rows of ``config`` (validated) use."""
    from miracl_eval.config.systems import computed_systems

    used = computed_systems(config)
    models = {s.model for s in used if s.model}
    rerankers = {s.reranker for s in used if s.reranker}
    return [*(config["models"][m] for m in models), *(config["rerankers"][r] for r in rerankers)]


def _folder_of(spec: Mapping[str, Any]) -> str | None:
    """The folder under ``resources/models/`` a local model's jobs load (built or fetched); None otherwise."""
    if FAMILIES.get(str(spec.get("family", ""))) is not None and FAMILIES[str(spec["family"])].remote:
        return None
    given = str(spec.get("checkpoint") or "")
    if given.startswith(BUILT_CHECKPOINTS):
        return given
    fetched = hub_folder(spec) if given else None  # a folder per revision, as the fetch_model rule's
    return f"{HUB_MODELS_DIR}/{fetched}" if fetched else None


def dry_run(
    snakefile: PathLike, folder: Path, configfile: Path, cores: int, args: Sequence[str] = ()
) -> list[PlannedJob]:
    """The jobs of ``snakemake -n`` (the default target) in ``folder``; a failed dry run is an error with
    Snakemake's last lines."""
    cmd = [
        sys.executable, "-m", "snakemake", "-n", "-s", str(snakefile), "--directory", str(folder),
        "--configfile", str(configfile), "--cores", str(cores), *args,
    ]  # fmt: skip
    log.info("dry run: %s", " ".join(cmd))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAKEMAKE_")}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=DRY_RUN_TIMEOUT, env=env, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise MiraclEvalError(f"the workflow's dry run failed (exit {proc.returncode}); Snakemake said:\n{tail}")
    return parse_dry_run(proc.stdout)


def forecast_jobs(
    snakefile: PathLike,
    config: Mapping[str, Any],
    validated: Mapping[str, Any],
    workdir: PathLike,
    sizes: DataSizes,
    cores: int,
    scratch: Path,
) -> tuple[list[PlannedJob], dict[str, str]]:
    """Every job of a run of ``config`` (as given; ``validated``: the same, validated) from ``workdir`` with
    ``--cores`` ``cores``: Snakemake's two dry runs in ``scratch`` (see the module's docstring); and the size
    each model folder was planned with."""
    work = Path(workdir).resolve()
    dataset = get_dataset(str(config["dataset"]))
    partitions = list(sizes.queries)
    given = _local_paths(config, work)
    hub = not given.get("source")
    configfile = scratch / "config.yaml"
    configfile.write_text(yaml.safe_dump(given, sort_keys=False, allow_unicode=True), encoding="utf-8")
    before, after = scratch / "before", scratch / "after"
    for folder in (before, after):
        folder.mkdir()
        if hub:
            _stand_in_downloads(folder, dataset, sizes, partitions)
    _stand_in_tables(after, dataset, sizes)
    models = _stand_in_models(after, work, validated)
    first = dry_run(snakefile, before, configfile, cores, ("--forcerun", *FORCED))
    # the model folders' stand-ins are there to be sized; the jobs that build or fetch them run all the same
    folders = [f for f in _model_folders(validated) if (after / f).exists()]
    second = dry_run(snakefile, after, configfile, cores, ("--forcerun", *folders) if folders else ())
    return merge(second, first), models


# --------------------------------------------------------------------------- API models


def api_costs(
    config: Mapping[str, Any],
    sizes: DataSizes,
    workdir: PathLike,
    sample_dir: PathLike,
    scratch: Path,
) -> dict[str, dict[str, Any]]:
    """Per API model of the run (``config`` validated): ``{"tokens", "usd", "max_usd", "how"}``, its cost
    plan (:func:`miracl_eval.encoders.api_plan.cost_plan`) over the preprocessed tables when this working
    directory has them all, else over the bundled sample of each corpus and partition scaled to
    ``sizes``."""
    from miracl_eval.config.systems import computed_systems
    from miracl_eval.encoders.api_plan import cost_plan
    from miracl_eval.inputs.preprocess import build_corpus, build_queries

    used = {s.model for s in computed_systems(config) if s.model}
    api = {m: spec for m, spec in config["models"].items() if m in used and FAMILIES[spec["family"]].remote}
    if not api:
        return {}
    dataset = get_dataset(str(config["dataset"]))
    work = Path(workdir)
    base = work / "resources" / dataset.name
    corpora = {c: base / "corpus" / c / "corpus.parquet" for c in sizes.passages}
    queries = {p: base / "topics" / p / "queries.parquet" for p in sizes.queries}
    exact = all(p.is_file() for p in [*corpora.values(), *queries.values()])
    if not exact:  # the bundled sample of each corpus and partition, preprocessed as the run preprocesses
        sample = Path(sample_dir)
        for corpus in corpora:
            corpora[corpus] = scratch / "sample" / f"{corpus}.corpus.parquet"
            build_corpus([_sample_file(sample, dataset, corpus, "corpus.jsonl")], corpora[corpus],
                         str(config["title_join"] or dataset.title_join), strip=dataset.strip_passages)  # fmt: skip
        for part in queries:
            queries[part] = scratch / "sample" / f"{part}.queries.parquet"
            build_queries(_sample_file(sample, dataset, part, "topics.tsv"), queries[part])
    out: dict[str, dict[str, Any]] = {}
    for model, spec in api.items():
        plan_file = scratch / f"{model}.plan.json"
        plan = cost_plan(
            {str(c): p for c, p in corpora.items()},
            {str(q): p for q, p in queries.items()},
            {**spec, "max_usd": math.inf},
            model,
            plan_file,
        )
        tokens = float(plan["tokens"])
        if not exact:
            parts = json.loads(plan_file.read_text(encoding="utf-8"))["parts"]
            tokens = sum(
                parts[name]["tokens"] / max(1, parts[name]["inputs"]) * n
                for name, n in [*((f"corpus {c}", n) for c, n in sizes.passages.items()),
                                *((f"queries {q}", n) for q, n in sizes.queries.items())]
            )  # fmt: skip
        usd = tokens * float(spec["price_per_million_tokens"]) / 1e6
        how = "counted on the preprocessed data" if exact else "the bundled sample's tokens per text x the sizes"
        out[model] = {"tokens": int(round(tokens)), "usd": round(usd, 2), "max_usd": float(spec["max_usd"]), "how": how}
    return out


def _sample_file(sample: Path, dataset: Dataset, part: str, name: str) -> Path:
    """The bundled sample's file of a corpus or partition (MessIRve's one corpus; a partition the sample
    lacks takes ``full``'s queries)."""
    if dataset.name != "messirve":
        return sample / "miracl" / part / name
    if name == "corpus.jsonl":
        return sample / "messirve" / name
    return sample / "messirve" / (part if (sample / "messirve" / part).is_dir() else "full") / name


# --------------------------------------------------------------------------- the table and the page


def rows(jobs: Sequence[PlannedJob], api: Mapping[str, Mapping[str, Any]] | None = None) -> list[dict[str, object]]:
    """One :data:`COLUMNS` row per job (an API model's tokens and dollars on its ``api_cost_plan`` job)."""
    out: list[dict[str, object]] = []
    for job in jobs:
        runtime, gpus = job.number("runtime"), job.gpus
        cost = (api or {}).get(dict(job.wildcards).get("model", "")) if job.rule == "api_cost_plan" else None
        out.append(
            {
                "rule": job.rule,
                "wildcards": " ".join(f"{k}={v}" for k, v in job.wildcards),
                "threads": job.threads,
                "gpus": gpus,
                "mem_mb": job.cell("mem_mb"),
                "runtime_min": job.cell("runtime"),
                "gpu_hours": gpus * runtime / 60 if runtime is not None else job.cell("runtime"),
                "disk_mb": job.cell("disk_mb"),
                "tokens": cost["tokens"] if cost else "",
                "usd": cost["usd"] if cost else "",
                "benchmark": job.benchmark or "",
            }
        )
    return out


def _number(cell: object) -> float:
    return float(cell) if isinstance(cell, int | float) or (isinstance(cell, str) and _is_number(cell)) else 0.0


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def by_rule(table: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
    """Per rule: its jobs, the largest job's memory, its GPU-hours, its CPU-hours (threads x run time of
    the jobs without a GPU), its disk; in the table's order of first appearance."""
    out: dict[str, dict[str, object]] = {}
    for r in table:
        s = out.setdefault(str(r["rule"]), {"rule": r["rule"], "jobs": 0, "max_mem_mb": 0.0, "max_runtime_min": 0.0,
                                             "gpu_hours": 0.0, "cpu_hours": 0.0, "disk_mb": 0.0})  # fmt: skip
        s["jobs"] = int(str(s["jobs"])) + 1
        s["max_mem_mb"] = max(_number(s["max_mem_mb"]), _number(r["mem_mb"]))
        s["max_runtime_min"] = max(_number(s["max_runtime_min"]), _number(r["runtime_min"]))
        s["gpu_hours"] = _number(s["gpu_hours"]) + _number(r["gpu_hours"])
        if not _number(r["gpus"]):
            s["cpu_hours"] = _number(s["cpu_hours"]) + _number(r["threads"]) * _number(r["runtime_min"]) / 60
        s["disk_mb"] = _number(s["disk_mb"]) + _number(r["disk_mb"])
    return list(out.values())


def totals(table: Sequence[Mapping[str, object]]) -> dict[str, float]:
    """The run's jobs, GPU jobs, GPU-hours, CPU-hours, largest memory request, disk, API tokens and
    dollars, and the requests the dry run could not evaluate."""
    per_rule = by_rule(table)
    return {
        "jobs": float(len(table)),
        "gpu_jobs": float(sum(1 for r in table if _number(r["gpus"]))),
        "gpu_hours": sum(_number(r["gpu_hours"]) for r in per_rule),
        "cpu_hours": sum(_number(r["cpu_hours"]) for r in per_rule),
        "max_mem_mb": max((_number(r["mem_mb"]) for r in table), default=0.0),
        "disk_mb": sum(_number(r["disk_mb"]) for r in per_rule),
        "tokens": sum(_number(r["tokens"]) for r in table),
        "usd": sum(_number(r["usd"]) for r in table),
        "unknown": float(sum(1 for r in table for c in ("mem_mb", "runtime_min", "disk_mb") if r[c] == UNKNOWN)),
    }


def summary_lines(
    table: Sequence[Mapping[str, object]], dataset: str, api: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """The forecast in a few lines (the job's log and the page's head)."""
    t = totals(table)
    biggest = max(table, key=lambda r: _number(r["mem_mb"]), default=None)
    lines = [
        f"{dataset}: {int(t['jobs']):,} jobs, {int(t['gpu_jobs']):,} on a GPU: {t['gpu_hours']:,.1f} GPU-hours and "
        f"{t['cpu_hours']:,.1f} CPU-hours requested (the requests' run times), the largest memory request "
        f"{t['max_mem_mb'] / 1000:,.1f} GB" + (f" ({biggest['rule']} {biggest['wildcards']})" if biggest else "")
        + f", {t['disk_mb'] / 1000:,.1f} GB of outputs on disk",
    ]  # fmt: skip
    for model, cost in api.items():
        over = " - more than its max_usd: the run would stop at its cost plan" if cost["usd"] > cost["max_usd"] else ""
        lines.append(f"  {model}: {cost['tokens']:,} tokens, ${cost['usd']:,.2f} ({cost['how']}; max_usd "
                     f"{cost['max_usd']:g}){over}")  # fmt: skip
    if t["unknown"]:
        lines.append(f"  {int(t['unknown'])} request(s) could not be evaluated before the run (unknown in the table)")
    return lines


def forecast_html(
    table: Sequence[Mapping[str, object]], title: str, sizes: DataSizes, api: Mapping[str, Mapping[str, Any]]
) -> str:
    """The forecast page: the summary, the requests per rule, the sizes it planned with, every job."""
    note = (
        "Every job a run of this configuration makes from nothing (downloads included), as Snakemake plans it: "
        "the workflow dry-run with stand-ins of the preprocessed data at these sizes, so each job's request is "
        "the one it will ask for. Run times are the requests' (the estimates times a margin of 3); GPU-hours "
        "count the jobs that ask for a GPU; disk is what each job's outputs take. Nothing was downloaded, "
        "preprocessed or encoded."
    )
    head = "".join(f"<p>{html.escape(line)}</p>" for line in summary_lines(table, title, api))
    per_rule = by_rule(table)
    rule_rows = [
        [r["rule"], r["jobs"], f"{_number(r['max_mem_mb']):,.0f}", f"{_number(r['max_runtime_min']):,.0f}",
         f"{_number(r['gpu_hours']):,.1f}", f"{_number(r['cpu_hours']):,.1f}", f"{_number(r['disk_mb']):,.0f}"]
        for r in per_rule
    ]  # fmt: skip
    rules_html = html_table(
        ["rule", "jobs", "largest memory (MB)", "longest (min)", "GPU-hours", "CPU-hours", "disk (MB)"], rule_rows
    )
    size_rows = [[what, f"{n:,}", sizes.origin.get(what, "")]
                 for what, n in [*((f"corpus {c}", n) for c, n in sizes.passages.items()),
                                 *((f"queries {q}", n) for q, n in sizes.queries.items())]]  # fmt: skip
    size_rows += [[what, "", why] for what, why in sizes.origin.items() if what.startswith("model ")]
    sizes_html = html_table(["data", "passages or queries", "from"], size_rows, text_columns=(0, 2))
    job_rows = [[r[c] for c in COLUMNS if c != "benchmark"] for r in table]
    jobs_html = html_table([c for c in COLUMNS if c != "benchmark"], job_rows, text_columns=(0, 1))
    body = (
        f"{head}<h2>Per rule</h2>{rules_html}<h2>The sizes planned with</h2>{sizes_html}"
        f"<h2>Every job ({len(table):,})</h2>{jobs_html}"
    )
    return html_page(f"What this run will cost — {title}", body, note)


def read_forecast(path: PathLike) -> list[dict[str, str]]:
    """The rows of a forecast table (:data:`COLUMNS`)."""
    return read_table(path, COLUMNS, "a forecast table")


def forecast_stage(
    snakefile: PathLike,
    config_as_given: Mapping[str, Any],
    config: Mapping[str, Any],
    workdir: PathLike,
    sample_dir: PathLike,
    cores: int,
    tsv_out: PathLike,
    html_out: PathLike,
) -> dict[str, float]:
    """Stage entry point: the forecast of a run of ``config_as_given`` (``config``: the same, validated) from
    ``workdir``, as TSV (a row per job) and HTML; its summary in the log."""
    dataset = get_dataset(str(config["dataset"]))
    sizes = data_sizes(dataset, list(config["languages"]), str(config["split"]), workdir, config.get("source"))
    with tempfile.TemporaryDirectory(prefix="miracl-eval-forecast-") as tmp:
        scratch = Path(tmp)
        jobs, models = forecast_jobs(snakefile, config_as_given, config, workdir, sizes, cores, scratch)
        api = api_costs(config, sizes, workdir, sample_dir, scratch)
    sizes = DataSizes(sizes.passages, sizes.queries, {**sizes.origin, **models})
    table = rows(jobs, api)
    write_text_atomic(tsv_out, format_tsv(COLUMNS, table))
    write_text_atomic(html_out, forecast_html(table, dataset.name, sizes, api))
    for line in summary_lines(table, dataset.name, api):
        log.info("%s", line)
    return totals(table)
