"""Report page: the result tables (``results/{dataset}_{measure}.tsv``) as HTML and bar charts.

The HTML table shows the best method of each column in bold; the grouped bar chart has the
partitions on the x axis, one bar per method, the mean last.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from miracl_eval.atomic import write_text_atomic
from miracl_eval.config.systems import IN_DOMAIN, TRAINING_MARKS, UNKNOWN_TRAINING, ZERO_SHOT
from miracl_eval.evaluation import context as published_context
from miracl_eval.evaluation import metrics, published
from miracl_eval.evaluation.reproduction import read_reproduction, summary
from miracl_eval.report.charts import bar_chart
from miracl_eval.report.html import fmt, html_page, html_table, measure_label
from miracl_eval.tsv import read_tsv
from miracl_eval.types import PathLike


def read_results(path: PathLike) -> tuple[list[str], dict[str, dict[str, float]]]:
    """Columns (partitions, then ``mean`` if present) and ``{method: {column: value}}`` of a
    results table written by :func:`miracl_eval.evaluation.metrics.format_table`."""
    values = published.read_results_table(path)
    if values:  # every row has the header's columns, in its order
        return list(next(iter(values.values()))), values
    header, _ = read_tsv(path)
    return header[1:], values


def results_html(
    columns: Sequence[str],
    values: Mapping[str, Mapping[str, float]],
    title: str,
    note: str | None = None,
    training: Mapping[str, Mapping[str, str]] | None = None,
) -> str:
    """A results table (as :func:`read_results` gives it) as HTML, the best value of each column in bold;
    rows that are not zero-shot marked (``training``: :func:`miracl_eval.config.systems.training`)."""
    methods = list(values)
    best = {c: max(values[m][c] for m in methods) for c in columns} if methods else {}
    marks = {m: TRAINING_MARKS[training[m]["training"]] for m in methods if training and m in training}
    rows = [[m + marks.get(m, ""), *(fmt(values[m][c]) for c in columns)] for m in methods]
    classes = [
        [
            "",
            *(
                " ".join(
                    k for k in ("best" if values[m][c] == best[c] else "", "mean" if c == metrics.MEAN else "") if k
                )
                for c in columns
            ),
        ]
        for m in methods
    ]
    header_classes = ["", *("mean" if c == metrics.MEAN else "" for c in columns)]
    table = html_table(["method", *columns], rows, classes, header_classes=header_classes)
    return html_page(title, table, note)


@dataclass
class _ContextLine:
    """One published system of the context table: its values by partition, revisions, data and verdict rows."""

    values: dict[str, float] = field(default_factory=dict)
    revisions: set[str] = field(default_factory=set)
    data: set[str] = field(default_factory=set)
    verdicts: set[str] = field(default_factory=set)


def context_html(rows: Sequence[Mapping[str, str]], columns: Sequence[str], measure: str, dataset: str) -> str:
    """The published rows of the same task (:mod:`miracl_eval.evaluation.context`) in the results table's columns,
    one line per source and system, marked as context: its values, the dataset revision, whether this run reads
    that data, and the rows (if any) that got a verdict on it."""
    label = measure_label(measure)
    lines: dict[tuple[str, str], _ContextLine] = {}
    for r in rows:
        if r["measure"] == measure:
            line = lines.setdefault((r["source_id"], r["system"]), _ContextLine())
            line.values[r["partition"]] = float(r["value"])
            line.revisions.add(r["dataset_revision"])
            line.data.add(r["our_data"])
            line.verdicts.update(v for v in r["verdict_rows"].split(", ") if v != "-")
    heading = f"<h2>Published {html.escape(label)} of the same task: context, not a verdict</h2>"
    if not lines:
        return heading + "<p>No published number of this task covers this run's partitions.</p>"
    body = [
        [system, source, *(fmt(v.values[c]) if c in v.values else "" for c in columns), "; ".join(sorted(v.revisions)),
         "; ".join(sorted(v.data)), ", ".join(sorted(v.verdicts)) or "-"]
        for (source, system), v in lines.items()
    ]  # fmt: skip
    header = ["published system", "source", *columns, "dataset revision", "this run's data", "verdict for"]
    last = len(header)
    table = html_table(header, body, text_columns=(0, 1, last - 3, last - 2, last - 1))
    explain = (
        "<p>Every published number of this dataset, split and measure for this run's partitions, whatever the system "
        f"(results/{html.escape(dataset)}_context.tsv): where a new row stands. Not a verdict: a verdict (the "
        "reproduction note above) needs the same checkpoint and settings on the same data; 'verdict for' names the "
        "rows that got one. 'this run's data' says whether this run reads the data the number was computed on, and "
        "if not why (a sample's sizes, another dataset revision).</p>"
    )
    return heading + explain + table


def results_views_stage(
    table: PathLike,
    measure: str,
    dataset: str,
    split: str,
    html_out: PathLike,
    chart_out: PathLike,
    training: Mapping[str, Mapping[str, str]] | None = None,
    reproduction: PathLike | None = None,
    context: PathLike | None = None,
) -> dict[str, int]:
    """Stage entry point: a results table as HTML (with the published rows of the same task below it, as
    context: ``context``, :mod:`miracl_eval.evaluation.context`) and as a bar chart."""
    label = measure_label(measure)
    columns, values = read_results(table)
    title = f"{label} — {dataset} {split}"
    note = (
        f"{label} per {'language' if metrics.MEAN in columns else 'partition'} (trec_eval semantics, a query without hits "
        "counts 0)"
        + (", and the unweighted mean over the languages." if metrics.MEAN in columns else ".")
        + " Bold: the best method of each column."
    )
    if training and any(training.get(m, {}).get("training") != ZERO_SHOT for m in values):
        note += (
            f" {TRAINING_MARKS[IN_DOMAIN]} in-domain: the model was trained on {dataset}'s training split (not "
            f"zero-shot); {TRAINING_MARKS[UNKNOWN_TRAINING]} unknown (no trained_on setting); unmarked rows are "
            f"zero-shot (results/{dataset}_training.tsv)."
        )
    if reproduction is not None:
        rows = [r for r in read_reproduction(reproduction) if r["measure"] == measure]
        lines = summary(rows) if rows else ["no published number of this measure is comparable with this run"]
        note += " Reproduction (results/" + f"{dataset}_reproduction.tsv): " + "; ".join(lines) + "."
    page = results_html(columns, values, title, note, training)
    if context is not None:
        section = context_html(published_context.read_context(context), columns, measure, dataset)
        page = page.replace("</body>", section + "\n</body>", 1)
    write_text_atomic(html_out, page)
    bar_chart(values, columns, chart_out, title, label)
    return {"methods": len(values), "columns": len(columns)}
