"""Stage costs: time and peak memory per rule, from the jobs' ``benchmark:`` files.

Each benchmark file is attributed to its rule by matching the rules' benchmark patterns (plain
Snakemake wildcard patterns, parsed here), and counted only when its wildcards are this run's.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

from miracl_eval.atomic import write_text_atomic
from miracl_eval.errors import InputError
from miracl_eval.jobs.preload import logged_peak_rss_mb
from miracl_eval.report.html import html_page, html_table, parse_number
from miracl_eval.tsv import format_tsv, read_tsv
from miracl_eval.types import PathLike

log = logging.getLogger(__name__)

STAGE_COSTS_COLUMNS: tuple[str, ...] = ("rule", "jobs", "total_s", "max_s", "max_rss_mb")
#: wildcards whose values may span path segments (row labels such as ``bge-m3/dense``)
PATH_WILDCARDS = frozenset({"system"})

_WILDCARD = re.compile(r"\{\s*(\w+)\s*(?:,([^{}]*(?:\{[^{}]*\}[^{}]*)*))?\}")


def plain_pattern(pattern: str) -> str:
    """A Snakemake file pattern without its wildcards' regex constraints: ``{part,sw|yo}`` →
    ``{part}`` (a constraint built from a set changes order from one run to the next)."""
    return _WILDCARD.sub(lambda m: "{" + m.group(1) + "}", pattern)


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """A regex for a Snakemake file pattern: each ``{name}`` (or ``{name,regex}``) matches one
    path segment (several for :data:`PATH_WILDCARDS`, or its own regex) and is captured; a
    repeated name must repeat its value."""
    out: list[str] = []
    seen: set[str] = set()
    pos = 0
    for m in _WILDCARD.finditer(pattern):
        out.append(re.escape(pattern[pos : m.start()]))
        name, constraint = m.group(1), m.group(2)
        if name in seen:
            out.append(f"(?P={name})")
        else:
            default = ".+" if name in PATH_WILDCARDS else "[^/]+"
            out.append(f"(?P<{name}>{constraint.strip() if constraint else default})")
            seen.add(name)
        pos = m.end()
    out.append(re.escape(pattern[pos:]))
    return re.compile("".join(out) + r"\Z")


def identify_benchmark(
    path: str, patterns: Mapping[str, str], compiled: Mapping[str, re.Pattern[str]] | None = None
) -> tuple[str, dict[str, str]] | None:
    """The rule (and wildcards) whose benchmark pattern matches ``path``; the most specific
    pattern (most literal characters) wins. None when no pattern matches."""
    compiled = compiled or {rule: pattern_regex(p) for rule, p in patterns.items()}
    best: tuple[int, str, dict[str, str]] | None = None
    for rule, rx in compiled.items():
        m = rx.match(path)
        if m:
            literal = len(re.sub(r"\{[^{}]*\}", "", patterns[rule]))
            if best is None or literal > best[0]:
                best = (literal, rule, m.groupdict())
    return (best[1], best[2]) if best else None


#: a peak RSS below this (MB) is no job's: Snakemake sampled only the process that starts the job
MIN_MEASURED_RSS_MB = 1.0


def read_benchmark(path: PathLike) -> list[dict[str, float | None]]:
    """The runs of one Snakemake benchmark file: ``s`` (wall seconds) and ``max_rss`` (MB);
    a value Snakemake could not measure (``-``, ``NA``) is None, and so is a peak under
    :data:`MIN_MEASURED_RSS_MB`: Snakemake samples a job's processes now and then, and a job of a
    fraction of a second can end before its first real sample (``0.02`` MB, the process that starts it)."""
    header, rows = read_tsv(path)
    if "s" not in header:
        raise InputError(path, "not a Snakemake benchmark file (no 's' column)", 1)
    i_s = header.index("s")
    i_rss = header.index("max_rss") if "max_rss" in header else None

    def rss(row: list[str]) -> float | None:
        value = parse_number(row[i_rss]) if i_rss is not None else None
        return value if value is not None and value >= MIN_MEASURED_RSS_MB else None

    return [{"s": parse_number(r[i_s]), "max_rss": rss(r)} for r in rows]


class StageCostRow(TypedDict):
    """One rule's costs (:data:`STAGE_COSTS_COLUMNS`)."""

    rule: str
    jobs: int
    total_s: float
    max_s: float | None
    max_rss_mb: float | None


def stage_costs(
    files: Iterable[PathLike],
    patterns: Mapping[str, str],
    allowed: Mapping[str, Sequence[str]] | None = None,
    skip_rules: Iterable[str] = (),
    root: PathLike | None = None,
    logs: Mapping[str, str] | None = None,
) -> list[StageCostRow]:
    """Time and peak memory per rule (rows of :data:`STAGE_COSTS_COLUMNS`), rules in the order
    of ``patterns`` (rule → benchmark pattern, relative to ``root``).

    A file is counted when it matches a rule's pattern, the rule is not in ``skip_rules``, and
    each wildcard named in ``allowed`` has one of the allowed values (so benchmark files left by
    runs of other partitions, methods or datasets are not counted). A job benchmarked with
    repeats counts its mean time. ``total_s`` sums the jobs' wall-clock seconds (CPU-parallel
    jobs overlap, so it can exceed the run's elapsed time); ``max_rss_mb`` is the largest peak
    resident memory of one job. ``logs`` (rule → log pattern): a job that ran in a preloaded process
    (``preload``) has that process's peak in its log, which its benchmark file lacks (it
    measures the job's own relay process); that peak is counted instead.
    """
    skip = set(skip_rules)
    compiled = {rule: pattern_regex(p) for rule, p in patterns.items()}
    acc: dict[str, dict[str, Any]] = {}
    for f in sorted(str(x) for x in files):
        rel = os.path.relpath(f, root) if root is not None else f
        rel = rel.replace(os.sep, "/")
        found = identify_benchmark(rel, patterns, compiled)
        if found is None:
            log.info("%s: no rule's benchmark pattern matches; not counted", rel)
            continue
        rule, wildcards = found
        if rule in skip:
            continue
        if allowed and any(k in allowed and v not in allowed[k] for k, v in wildcards.items()):
            log.info("%s: wildcards %s are not this run's; not counted", rel, wildcards)
            continue
        runs = read_benchmark(f)
        if not runs:
            continue
        secs = [r["s"] for r in runs if r["s"] is not None]
        rss = [r["max_rss"] for r in runs if r["max_rss"] is not None]
        if logs and rule in logs:
            forked = logged_peak_rss_mb(Path(root or ".") / logs[rule].format(**wildcards))
            rss = rss if forked is None else [forked]
        a = acc.setdefault(rule, {"jobs": 0, "total": 0.0, "max": None, "rss": None})
        a["jobs"] += 1
        if secs:
            a["total"] += sum(secs) / len(secs)
            a["max"] = max(secs) if a["max"] is None else max(a["max"], *secs)
        if rss:
            a["rss"] = max(rss) if a["rss"] is None else max(a["rss"], *rss)
    order = {rule: i for i, rule in enumerate(patterns)}
    return [
        {
            "rule": rule,
            "jobs": a["jobs"],
            "total_s": round(a["total"], 2),
            "max_s": None if a["max"] is None else round(a["max"], 2),
            "max_rss_mb": None if a["rss"] is None else round(a["rss"], 1),
        }
        for rule, a in sorted(acc.items(), key=lambda kv: order.get(kv[0], len(order)))
    ]


def api_spend(ledgers: Mapping[str, PathLike]) -> list[dict[str, Any]]:
    """Per API model (``ledgers``: model → its ledger folder), what its encoding jobs' requests spent, every
    run and every job, failed ones too (:mod:`miracl_eval.encoders.api_ledger`): ``{"model", "jobs", "runs",
    "requests", "failed", "retries", "inputs", "tokens", "charged", "unended", "usd", "unreadable"}``
    (``charged``: tokens of tries whose answer was lost; ``unended``: requests out when their job was killed,
    charged at their counted tokens)."""
    from miracl_eval.encoders.api_ledger import read_ledger

    out: list[dict[str, Any]] = []
    for model, folder in ledgers.items():
        t = read_ledger(folder)
        if t.unreadable:
            log.warning("%s: %d ledger line(s) could not be read (not counted)", folder, t.unreadable)
        out.append({"model": model, "jobs": len(t.jobs), "runs": len(t.runs), "requests": t.requests,
                    "failed": t.failed, "retries": t.retries, "inputs": t.inputs, "tokens": t.tokens,
                    "charged": t.charged, "unended": t.unended, "usd": t.usd, "unreadable": t.unreadable})  # fmt: skip
    return out


def stage_costs_html(rows: Sequence[StageCostRow], title: str, spend: Sequence[Mapping[str, Any]] = ()) -> str:
    def num(v: float | None, digits: int) -> str:
        return "-" if v is None else f"{float(v):.{digits}f}"

    table: list[list[object]] = [
        [r["rule"], r["jobs"], num(r["total_s"], 1), num(r["max_s"], 1), num(r["max_rss_mb"], 0)] for r in rows
    ]
    classes: list[str] = [""] * len(table)
    if rows:
        rss = [v for r in rows if (v := r["max_rss_mb"]) is not None]
        maxs = [v for r in rows if (v := r["max_s"]) is not None]
        table.append(
            [
                "all rules",
                sum(r["jobs"] for r in rows),
                num(sum(r["total_s"] for r in rows), 1),
                num(max(maxs) if maxs else None, 1),
                num(max(rss) if rss else None, 0),
            ]
        )
        classes.append("total")
    note = (
        "From each job's benchmark file (stats/…): wall-clock seconds and peak resident memory (RSS). "
        "'total s' adds the jobs' times; jobs run in parallel overlap, so it can exceed the elapsed time. "
        "A job run in a preloaded process (preload) counts that process's peak, from the job's log."
    )
    header = ["rule", "jobs", "total s", "max s", "max RSS MB"]
    body = html_table(header, table, row_classes=classes)
    if spend:
        api_header = ["API model", "jobs", "runs", "requests", "not answered", "retries", "inputs", "tokens",
                      "tokens charged, answer lost", "requests cut off", "US dollars"]  # fmt: skip
        api_rows: list[list[object]] = [
            [
                r["model"],
                r["jobs"],
                r["runs"],
                r["requests"],
                r["failed"],
                r["retries"],
                r["inputs"],
                f"{r['tokens']:,}",
                f"{r['charged']:,}",
                r["unended"],
                f"{r['usd']:.4f}",
            ]  # fmt: skip
            for r in spend
        ]
        body += "<h2>Embeddings APIs: tokens and dollars</h2>" + html_table(api_header, api_rows)
        note += (
            " The API models' rows sum their ledgers (resources/{dataset}/encoded/{model}/ledger/): a line per "
            "request of every run of every encoding job, failed ones too; tokens are the API's own count, dollars "
            "tokens x the model's price_per_million_tokens; 'not answered' counts requests refused, failed or "
            "answered wrongly, 'retries' the tries sent again (429s, 5xx, timeouts). A try whose answer was lost (a "
            "timeout, a dropped connection, a body cut short, a 408, a gateway's 502/504/520/524) may have been "
            "billed: its counted tokens are charged; "
            "'requests cut off' were out when their job was killed (a time limit, a lost node), each charged at its "
            "counted tokens. So the dollars are never less than what was billed (with tokens counted by the model's "
            "tokenizer; characters / 4 without one can be less)."
        )
    return html_page(title, body, note)


def stage_costs_stage(
    stats_dir: PathLike,
    patterns: Mapping[str, str],
    tsv_out: PathLike,
    html_out: PathLike,
    allowed: Mapping[str, Sequence[str]] | None = None,
    skip_rules: Iterable[str] = (),
    root: PathLike = ".",
    dataset: str = "",
    logs: Mapping[str, str] | None = None,
    ledgers: Mapping[str, PathLike] | None = None,
) -> dict[str, int]:
    """Stage entry point: every benchmark file under ``stats_dir``, summarised per rule; and what the API
    models spent, from their ledgers (``ledgers``: model → folder)."""
    files = sorted(Path(stats_dir).rglob("*.tsv")) if Path(stats_dir).is_dir() else []
    rows = stage_costs(files, patterns, allowed, skip_rules, root, logs)
    spend = api_spend(ledgers) if ledgers else []
    write_text_atomic(tsv_out, format_tsv(STAGE_COSTS_COLUMNS, rows))
    title = f"Stage costs — {dataset}" if dataset else "Stage costs"
    write_text_atomic(html_out, stage_costs_html(rows, title, spend))
    return {"rules": len(rows), "jobs": sum(r["jobs"] for r in rows)}
