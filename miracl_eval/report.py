"""What the Snakemake report shows: readable tables, bar charts, the run's settings and costs.

Every function here works on plain files and returns plain values; ``scripts/report_*.py``
call the ``*_stage`` entry points from the workflow (``rules/report.smk``), and the unit
tests call everything without Snakemake.

* **Result tables** (``results/{dataset}_{measure}.tsv``) are rendered as an HTML table (the
  best method of each column in bold) and a grouped bar chart (partitions on the x axis, one
  bar per method, the mean last).
* **Published numbers**: :func:`miracl_eval.published.side_by_side` for every measure, as TSV
  and HTML.
* **Significance**: :func:`miracl_eval.significance.significance_table` for the method pairs of
  :func:`comparison_pairs` and every measure, as TSV and as a readable matrix (pair × partition).
* **Top differences**: the queries on which two methods differ most
  (:func:`miracl_eval.significance.top_differences`), with the query text.
* **Fusion sensitivity**: :func:`miracl_eval.sensitivity.sensitivity_table` and one panel per
  partition, labelled as what it is: a view on the evaluation set, never used to pick weights.
* **Settings**: the settings a reader needs to interpret the numbers, plus the corpus sizes and
  the number of encoding shards.
* **Stage costs**: time and peak memory per rule, from the jobs' ``benchmark:`` files, each file
  attributed to its rule by matching the rules' benchmark patterns.

Charts use matplotlib's Agg backend and are written as SVG with real ``<text>`` (searchable,
selectable) and no date stamp, so that the same numbers give the same file.
"""

from __future__ import annotations

import html
import io
import logging
import math
import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import comparability, metrics, published, schemas, sensitivity, significance
from .atomic import atomic_output, write_text_atomic
from .report_plan import row_colors
from .tsv import format_tsv, read_tsv

log = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]

#: how a measure is named for readers (ir_measures' ``R@100`` is ``Recall@100`` in the paper)
MEASURE_LABELS: Mapping[str, str] = {"nDCG@10": "nDCG@10", "R@100": "Recall@100"}
MEAN = metrics.MEAN
SENSITIVITY_LABEL = (
    "sensitivity on the evaluation set; headline numbers use the fixed paper weights, never tuned on test queries"
)
TOP_DIFFERENCES_COLUMNS: tuple[str, ...] = (
    "measure", "partition", "method_a", "method_b", "direction", "rank", "qid", "query", "value_a", "value_b", "diff",
)  # fmt: skip
SETTINGS_COLUMNS: tuple[str, ...] = ("section", "setting", "value")


def measure_label(name: str) -> str:
    return MEASURE_LABELS.get(name, name)


# --------------------------------------------------------------------------- TSV and HTML


CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 1.2em; color: #1b1b1b; }
h1 { font-size: 1.3em; margin: 0 0 .4em 0; }
h2 { font-size: 1.1em; margin: 1.4em 0 .4em 0; }
h3 { font-size: 1em; margin: 1em 0 .3em 0; }
p.note { color: #444; max-width: 60em; font-size: .92em; }
table { border-collapse: collapse; font-size: .88em; margin-bottom: .8em; }
th, td { border: 1px solid #d0d0d0; padding: .25em .6em; }
th { background: #f0f2f5; text-align: left; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr:nth-child(even) td { background: #fafafa; }
td.best { font-weight: bold; }
td.mean, th.mean { border-left: 2px solid #888; }
td.sig-pos { background: #d9f2d9 !important; }
td.sig-neg { background: #f8d7d7 !important; }
tr.total td { font-weight: bold; border-top: 2px solid #888; }
td.query { max-width: 40em; }
"""


def html_page(title: str, body: str, note: str | None = None) -> str:
    """A self-contained HTML page (inline style, UTF-8): what the report shows in its frame."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    if note:
        parts.append(f'<p class="note">{html.escape(note)}</p>')
    parts += [body, "</body></html>\n"]
    return "\n".join(parts)


def html_table(
    header: Sequence[str],
    rows: Sequence[Sequence[object]],
    cell_classes: Sequence[Sequence[str]] | None = None,
    cell_titles: Sequence[Sequence[str]] | None = None,
    row_classes: Sequence[str] | None = None,
    header_classes: Sequence[str] | None = None,
    text_columns: Iterable[int] = (0,),
) -> str:
    """An HTML table; numbers are right-aligned (but in ``text_columns``), every text is escaped."""
    text_cols = set(text_columns)
    out = ["<table>", "<thead><tr>"]
    for i, h in enumerate(header):
        cls = header_classes[i] if header_classes else ""
        out.append(f'<th class="{cls}">{html.escape(str(h))}</th>' if cls else f"<th>{html.escape(str(h))}</th>")
    out.append("</tr></thead><tbody>")
    for r, row in enumerate(rows):
        rc = row_classes[r] if row_classes else ""
        out.append(f'<tr class="{rc}">' if rc else "<tr>")
        for c, value in enumerate(row):
            text = str(value)
            classes = ["num"] if c not in text_cols and parse_number(text) is not None else []
            if cell_classes and cell_classes[r][c]:
                classes.append(cell_classes[r][c])
            attrs = f' class="{" ".join(classes)}"' if classes else ""
            if cell_titles and cell_titles[r][c]:
                attrs += f' title="{html.escape(cell_titles[r][c])}"'
            out.append(f"<td{attrs}>{html.escape(text)}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _fmt(value: float, digits: int = 4) -> str:
    return f"{value:.{digits}f}"


def _signed(value: float, digits: int = 4) -> str:
    return f"{value:+.{digits}f}"


# --------------------------------------------------------------------------- result tables


def read_results(path: PathLike) -> tuple[list[str], dict[str, dict[str, float]]]:
    """Columns (partitions, then ``mean`` if present) and ``{method: {column: value}}`` of a
    results table written by :func:`miracl_eval.metrics.format_table`."""
    values = published.read_results_table(path)
    if values:  # every row has the header's columns, in its order
        return list(next(iter(values.values()))), values
    header, _ = read_tsv(path)
    return header[1:], values


def results_html(
    columns: Sequence[str], values: Mapping[str, Mapping[str, float]], title: str, note: str | None = None
) -> str:
    """A results table (as :func:`read_results` gives it) as HTML, the best value of each column in bold."""
    methods = list(values)
    best = {c: max(values[m][c] for m in methods) for c in columns} if methods else {}
    rows = [[m, *(_fmt(values[m][c]) for c in columns)] for m in methods]
    classes = [
        [
            "",
            *(
                " ".join(k for k in ("best" if values[m][c] == best[c] else "", "mean" if c == MEAN else "") if k)
                for c in columns
            ),
        ]
        for m in methods
    ]
    header_classes = ["", *("mean" if c == MEAN else "" for c in columns)]
    table = html_table(["method", *columns], rows, classes, header_classes=header_classes)
    return html_page(title, table, note)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {"svg.fonttype": "none", "svg.hashsalt": "miracl-eval", "font.family": "DejaVu Sans", "font.size": 10}
    )
    return plt


def _save(fig: Any, output: PathLike) -> None:
    """Save a figure atomically (SVG without a date, or PNG), then close it."""
    fmt = Path(output).suffix.lstrip(".").lower() or "svg"
    buf = io.BytesIO()
    metadata = {"Date": None} if fmt == "svg" else {}
    fig.savefig(buf, format=fmt, metadata=metadata, bbox_inches="tight", dpi=110)
    _pyplot().close(fig)
    with atomic_output(output) as tmp:
        tmp.write_bytes(buf.getvalue())


def bar_chart(
    values: Mapping[str, Mapping[str, float]],
    columns: Sequence[str],
    output: PathLike,
    title: str,
    ylabel: str,
    methods: Sequence[str] | None = None,
) -> None:
    """A grouped bar chart: one group per column (partition, then ``mean``), one bar per method."""
    plt = _pyplot()
    methods = list(values) if methods is None else list(methods)
    n_groups, n_methods = len(columns), max(len(methods), 1)
    # wide enough for the bars and for the legend's row of methods below them
    width = min(24.0, max(6.0, 1.3 * n_methods + 1.0, 0.55 * n_groups * (0.5 + 0.12 * n_methods) + 1.5))
    fig, ax = plt.subplots(figsize=(width, 4.2))
    bar = 0.8 / n_methods
    top = 0.0
    colors = row_colors(methods)
    for i, method in enumerate(methods):
        xs = [g + (i - (n_methods - 1) / 2) * bar for g in range(n_groups)]
        ys = [values[method][c] for c in columns]
        top = max(top, *ys) if ys else top
        ax.bar(xs, ys, bar, label=method, color=colors[method], edgecolor="white", linewidth=0.4)
    ax.set_xticks(range(n_groups), [str(c) for c in columns])
    if MEAN in columns:
        ax.axvline(columns.index(MEAN) - 0.5, color="#555", linestyle=":", linewidth=1)
    ax.set_xlim(-0.6, n_groups - 0.4)
    ax.set_ylim(0, min(1.0, max(0.05, top * 1.15)))
    ax.set_ylabel(ylabel)
    ax.set_xlabel("language" if MEAN in columns else "partition")
    ax.set_title(title)
    ax.grid(axis="y", color="#ddd", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.legend(ncol=min(n_methods, 6), loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    _save(fig, output)


def results_views_stage(
    table: PathLike, measure: str, dataset: str, split: str, html_out: PathLike, chart_out: PathLike
) -> dict[str, int]:
    """Stage entry point: a results table as HTML and as a bar chart."""
    label = measure_label(measure)
    columns, values = read_results(table)
    title = f"{label} — {dataset} {split}"
    note = (
        f"{label} per {'language' if MEAN in columns else 'partition'} (trec_eval semantics, a query without hits "
        "counts 0)"
        + (", and the unweighted mean over the languages." if MEAN in columns else ".")
        + " Bold: the best method of each column."
    )
    write_text_atomic(html_out, results_html(columns, values, title, note))
    bar_chart(values, columns, chart_out, title, label)
    return {"methods": len(values), "columns": len(columns)}


# --------------------------------------------------------------------------- published numbers


def published_rows(
    tables: Mapping[str, PathLike],
    dataset: str,
    split: str,
    run_config: Mapping[str, object],
    comparable: Collection[str],
) -> list[dict[str, object]]:
    """:func:`miracl_eval.published.side_by_side` rows of every measure; ``tables`` maps an
    ir_measures name (``nDCG@10``, ``R@100``) to our results table; only the ``comparable``
    partitions (:mod:`miracl_eval.comparability`) are compared."""
    rows: list[dict[str, object]] = []
    shipped = published.load_published()
    for measure, path in tables.items():
        ours = published.read_results_table(path)
        rows += published.side_by_side(ours, dataset, split, measure, run_config, shipped, comparable)
    return rows


def comparability_html(checks: Sequence[Mapping[str, str]]) -> str:
    """The comparability table (:data:`miracl_eval.comparability.COLUMNS`) as HTML, the reasons in words."""
    header = ["partition", "passages", "full", "queries", "full", "judgements", "full", "fingerprints", "comparable",
              "reason"]  # fmt: skip
    rows = [
        [
            c["partition"],
            c["passages"],
            c["full_passages"],
            c["queries"],
            c["full_queries"],
            c["judgements"],
            c["full_judgements"],
            f"qids {c['qids_fingerprint']}, qrels {c['qrels_fingerprint']}",
            c["comparable"],
            c["reason"],
        ]
        for c in checks
    ]
    classes = [["", *[""] * 7, "sig-pos" if c["comparable"] == "yes" else "sig-neg", ""] for c in checks]
    return html_table(header, rows, classes, text_columns=(0, 7, 8, 9))


def published_html(rows: Sequence[Mapping[str, object]], title: str, checks: Sequence[Mapping[str, str]]) -> str:
    note = (
        "Our numbers next to every published number computed on the same data (the full corpus, topics and qrels "
        "of the partition; a published mean only when all of its languages are) and whose configuration matches "
        "this run's (same dataset, split, measure, method, model and the source's stated settings, e.g. BM25 k1/b "
        "or fusion weights). 'theirs' is on the 0–1 scale; 'published' is the value as printed; diff = ours − theirs."
    )
    not_comparable = [c for c in checks if c["comparable"] != "yes"]
    data = (
        f"<h2>Same data as the published numbers? {len(checks) - len(not_comparable)} of {len(checks)} partitions</h2>"
        + (
            "<p>No published number is shown beside "
            + ", ".join(html.escape(f"{c['partition']} ({c['reason']})") for c in not_comparable)
            + ".</p>"
            if not_comparable
            else ""
        )
        + comparability_html(checks)
    )
    if not rows:
        why = (
            "none of this run's partitions has the full data the published numbers were computed on (below)"
            if len(not_comparable) == len(checks)
            else "none matches this run's configuration on its comparable partitions (for instance a different model)"
        )
        return html_page(title, f"<p>No published number is shown: {why}.</p>\n{data}", note)
    header = ["measure", "method", "partition", "system", "source", "ours", "theirs", "diff", "published"]
    out = [
        [
            measure_label(str(r["measure"])),
            r["method"],
            r["partition"],
            r["system"],
            r["source_id"],
            _fmt(float(r["ours"])),  # type: ignore[arg-type]
            _fmt(float(r["theirs"])),  # type: ignore[arg-type]
            _signed(float(r["diff"])),  # type: ignore[arg-type]
            f"{r['published']}" + (" (×100)" if r["scale"] == 100 else ""),
        ]
        for r in rows
    ]
    return html_page(title, html_table(header, out) + "\n" + data, note)


def published_stage(
    tables: Mapping[str, PathLike],
    dataset: str,
    split: str,
    run_config: Mapping[str, object],
    comparability_tsv: PathLike,
    tsv_out: PathLike,
    html_out: PathLike,
) -> dict[str, int]:
    """Stage entry point: the side-by-side table of the comparable partitions (the stage
    :func:`miracl_eval.comparability.comparability_stage`'s table) as TSV (exact) and HTML."""
    checks = comparability.read_comparability(comparability_tsv)
    rows = published_rows(tables, dataset, split, run_config, comparability.comparable_partitions(checks))
    published.write_side_by_side(rows, tsv_out)
    write_text_atomic(html_out, published_html(rows, f"Published numbers — {dataset} {split}", checks))
    return {"matched": len(rows), "comparable_partitions": len(comparability.comparable_partitions(checks))}


# --------------------------------------------------------------------------- significance


def significance_html(
    rows: Sequence[Mapping[str, object]], title: str, alpha: float = 0.05, note: str | None = None
) -> str:
    """The significance rows as one matrix per measure (pair × partition), then in full."""
    body: list[str] = []
    measures = list(dict.fromkeys(str(r["measure"]) for r in rows))
    for measure in measures:
        sub = [r for r in rows if r["measure"] == measure]
        parts = list(dict.fromkeys(str(r["partition"]) for r in sub))
        pairs = list(dict.fromkeys((str(r["method_a"]), str(r["method_b"])) for r in sub))
        by_key = {(str(r["method_a"]), str(r["method_b"]), str(r["partition"])): r for r in sub}
        table_rows, classes, titles = [], [], []
        for a, b in pairs:
            cells, cls, tit = [f"{a} − {b}"], [""], [""]
            for p in parts:
                r = by_key.get((a, b, p))
                if r is None:
                    cells.append("")
                    cls.append("")
                    tit.append("")
                    continue
                diff, pv = float(r["diff"]), float(r["p_value"])  # type: ignore[arg-type]
                stars = "**" if pv < alpha / 5 else "*" if pv < alpha else ""
                cells.append(f"{_signed(diff)}{stars}")
                sig = "sig-pos" if pv < alpha and diff > 0 else "sig-neg" if pv < alpha and diff < 0 else ""
                cls.append(" ".join(k for k in (sig, "mean" if p == MEAN else "") if k))
                tit.append(
                    f"{a} {float(r['mean_a']):.4f}, {b} {float(r['mean_b']):.4f}; "  # type: ignore[arg-type]
                    f"95% CI of the difference [{float(r['ci_low']):+.4f}, {float(r['ci_high']):+.4f}]; "  # type: ignore[arg-type]
                    f"p = {pv:.4g}; {r['n_queries']} queries"
                )
            table_rows.append(cells)
            classes.append(cls)
            titles.append(tit)
        header_classes = ["", *("mean" if p == MEAN else "" for p in parts)]
        body.append(f"<h2>{html.escape(measure_label(measure))}: difference A − B</h2>")
        body.append(html_table(["A − B", *parts], table_rows, classes, titles, header_classes=header_classes))
    body.append(
        f"<p class='note'>* p &lt; {alpha:g}, ** p &lt; {alpha / 5:g} (two-sided paired randomisation test); green: A "
        "significantly better, red: B significantly better. Hover a cell for the means, the bootstrap CI and p.</p>"
    )
    if rows:
        full = [
            [
                measure_label(str(r["measure"])),
                r["partition"],
                r["method_a"],
                r["method_b"],
                _fmt(float(r["mean_a"])),  # type: ignore[arg-type]
                _fmt(float(r["mean_b"])),  # type: ignore[arg-type]
                _signed(float(r["diff"])),  # type: ignore[arg-type]
                f"[{float(r['ci_low']):+.4f}, {float(r['ci_high']):+.4f}]",  # type: ignore[arg-type]
                f"{float(r['p_value']):.4g}",  # type: ignore[arg-type]
                r["n_queries"],
            ]
            for r in rows
        ]
        header = ["measure", "partition", "A", "B", "mean A", "mean B", "A − B", "95% CI", "p", "queries"]
        body += ["<h2>All rows</h2>", html_table(header, full)]
    else:
        body.append("<p>No method pairs to compare.</p>")
    return html_page(title, "\n".join(body), note)


def significance_stage(
    per_query_files: Sequence[PathLike],
    methods: Sequence[str],
    partitions: Sequence[str],
    pairs: Sequence[Sequence[str]],
    measures: Sequence[str],
    tsv_out: PathLike,
    html_out: PathLike,
    mean_row: bool = True,
    n_permutations: int = significance.N_PERMUTATIONS,
    n_bootstrap: int = significance.N_BOOTSTRAP,
    seed: int = significance.SEED,
    dataset: str = "",
) -> dict[str, int]:
    """Stage entry point: paired tests of ``pairs`` for every measure, per partition and (with
    ``mean_row``) over the partitions; TSV with :data:`miracl_eval.significance.COLUMNS` and HTML."""
    files = metrics.keyed_inputs(per_query_files, methods, partitions)
    pair_list = [(str(a), str(b)) for a, b in pairs]
    rows: list[dict[str, object]] = []
    for measure in measures:
        rows += significance.significance_rows(
            files,
            pair_list,
            measure,
            partitions,
            n_permutations=n_permutations,
            n_bootstrap=n_bootstrap,
            seed=seed,
            mean_row=mean_row,
        )
    write_text_atomic(tsv_out, significance.format_rows(rows))
    note = (
        f"Paired tests on the same queries: randomisation (sign-flip) test, {n_permutations} permutations; "
        f"percentile bootstrap CI, {n_bootstrap} resamples; seed {seed}."
        + (
            " The mean row is stratified by language (each language weighs 1/L, as in the mean column)."
            if mean_row
            else " No mean over partitions (they overlap)."
        )
        + " No correction for multiple comparisons."
    )
    title = f"Paired significance — {dataset}" if dataset else "Paired significance"
    write_text_atomic(html_out, significance_html(rows, title, note=note))
    return {"rows": len(rows), "pairs": len(pair_list)}


# --------------------------------------------------------------------------- top differences


def query_texts(path: PathLike) -> dict[str, str]:
    table = schemas.read_table(path, schemas.QUERIES)
    return dict(zip(table.column("qid").to_pylist(), table.column("query").to_pylist(), strict=True))


def top_differences_rows(
    per_query: Mapping[tuple[str, str], PathLike],
    pairs: Sequence[Sequence[str]],
    partitions: Sequence[str],
    n: int = 5,
    measure: str = metrics.PRIMARY.name,
    queries: Mapping[str, Mapping[str, str]] | None = None,
) -> list[dict[str, object]]:
    """Per pair and partition, the ``n`` queries A wins most and the ``n`` it loses most
    (rows of :data:`TOP_DIFFERENCES_COLUMNS`; ``queries`` maps partition → qid → text)."""
    rows: list[dict[str, object]] = []
    for a, b in pairs:
        for part in partitions:
            texts = (queries or {}).get(part, {})
            diffs = significance.top_differences(per_query[(a, part)], per_query[(b, part)], n, measure)
            rank = {"win": 0, "loss": 0}
            for d in diffs:
                rank[str(d["direction"])] += 1
                rows.append(
                    {
                        "measure": measure,
                        "partition": part,
                        "method_a": a,
                        "method_b": b,
                        "direction": d["direction"],
                        "rank": rank[str(d["direction"])],
                        "qid": d["qid"],
                        "query": texts.get(str(d["qid"]), ""),
                        "value_a": d["value_a"],
                        "value_b": d["value_b"],
                        "diff": d["diff"],
                    }
                )
    return rows


def top_differences_html(rows: Sequence[Mapping[str, object]], title: str, n: int) -> str:
    body: list[str] = []
    groups: dict[tuple[str, str], list[Mapping[str, object]]] = {}
    for r in rows:
        groups.setdefault((str(r["method_a"]), str(r["method_b"])), []).append(r)
    header = ["partition", "", "qid", "query", "A", "B", "A − B"]
    for (a, b), sub in groups.items():
        body.append(f"<h2>{html.escape(a)} (A) vs {html.escape(b)} (B)</h2>")
        table = [
            [
                r["partition"],
                f"{'win' if r['direction'] == 'win' else 'loss'} {r['rank']}",
                r["qid"],
                r["query"],
                _fmt(float(r["value_a"])),  # type: ignore[arg-type]
                _fmt(float(r["value_b"])),  # type: ignore[arg-type]
                _signed(float(r["diff"])),  # type: ignore[arg-type]
            ]
            for r in sub
        ]
        classes = [["", "", "", "query", "", "", "sig-pos" if r["direction"] == "win" else "sig-neg"] for r in sub]
        body.append(html_table(header, table, classes, text_columns=(0, 1, 2, 3)))
    if not rows:
        body.append("<p>The methods score every query the same.</p>")
    measure = measure_label(str(rows[0]["measure"])) if rows else ""
    note = (
        f"Per partition, the (up to) {n} queries on which A beats B by the most {measure} ('win') and the {n} on "
        "which it loses by the most ('loss'); queries with equal values are neither."
    )
    return html_page(title, "\n".join(body), note)


def top_differences_stage(
    per_query_files: Sequence[PathLike],
    methods: Sequence[str],
    partitions: Sequence[str],
    queries: Sequence[PathLike],
    pairs: Sequence[Sequence[str]],
    tsv_out: PathLike,
    html_out: PathLike,
    n: int = 5,
    measure: str = metrics.PRIMARY.name,
    dataset: str = "",
) -> dict[str, int]:
    """Stage entry point; ``queries`` are the partitions' query files, in partition order."""
    files = metrics.keyed_inputs(per_query_files, methods, partitions)
    texts = {p: query_texts(q) for p, q in zip(partitions, queries, strict=True)}
    rows = top_differences_rows(files, pairs, partitions, n, measure, texts)
    write_text_atomic(tsv_out, format_tsv(TOP_DIFFERENCES_COLUMNS, rows))
    title = f"Top wins and losses — {dataset}" if dataset else "Top wins and losses"
    write_text_atomic(html_out, top_differences_html(rows, title, n))
    return {"rows": len(rows)}


# --------------------------------------------------------------------------- fusion sensitivity


def sensitivity_weights(fixed: float, grid: Sequence[float] = sensitivity.DEFAULT_WEIGHTS) -> list[float]:
    """The sparse-weight grid, with the fixed (headline) weight added when it is not on it."""
    weights = [float(w) for w in grid]
    if not any(math.isclose(w, fixed, abs_tol=1e-12) for w in weights):
        weights.append(float(fixed))
    return sorted(weights)


def sensitivity_plot(
    rows: Sequence[Mapping[str, object]],
    partitions: Sequence[str],
    methods: Sequence[str],
    fixed_weight: float,
    output: PathLike,
    mean_panel: bool = True,
    title: str = "",
) -> None:
    """One panel per partition (and the mean): nDCG@10 against the sparse weight, a line per method."""
    plt = _pyplot()
    data: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in rows:
        data.setdefault((str(r["partition"]), str(r["method"])), []).append(
            (float(r["sparse_weight"]), float(r["ndcg10"]))  # type: ignore[arg-type]
        )
    panels = list(partitions)
    if mean_panel and len(partitions) > 1:
        for m in methods:
            series = [data.get((p, m), []) for p in partitions]
            if all(series):
                ws = [w for w, _ in series[0]]
                data[(MEAN, m)] = [(w, sum(s[i][1] for s in series) / len(series)) for i, w in enumerate(ws)]
        panels.append(MEAN)
    ncols = min(6, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.0 * ncols + 0.4, 2.5 * nrows + 1.3), squeeze=False)
    for k, ax in enumerate(axes.flat):
        if k >= len(panels):
            ax.set_visible(False)
            continue
        part = panels[k]
        colors = row_colors(methods)
        for m in methods:
            pts = sorted(data.get((part, m), []))
            if pts:
                ax.plot(
                    [w for w, _ in pts],
                    [v for _, v in pts],
                    marker="o",
                    markersize=3,
                    label=m,
                    color=colors[m],
                )
        ax.axvline(fixed_weight, color="#555", linestyle="--", linewidth=1)
        ax.set_title(part, fontsize=10, fontweight="bold" if part == MEAN else "normal")
        ax.set_xlim(-0.03, max(1.0, fixed_weight) + 0.03)
        ax.grid(color="#e3e3e3", linewidth=0.5)
        if k % ncols == 0:
            ax.set_ylabel("nDCG@10")
        if k >= len(panels) - ncols:
            ax.set_xlabel("sparse weight")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    handles.append(plt.Line2D([], [], color="#555", linestyle="--", linewidth=1))
    labels.append(f"fixed paper weight ({fixed_weight:g})")
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False, bbox_to_anchor=(0.5, -0.02))
    heading = title or "Fusion sensitivity: nDCG@10 as the sparse weight varies (dense = 1, multi-vector = 1)"
    fig.suptitle(f"{heading}\n{SENSITIVITY_LABEL[0].upper()}{SENSITIVITY_LABEL[1:]}", fontsize=11)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    _save(fig, output)


def sensitivity_stage(
    components: Sequence[PathLike],
    qrels: Sequence[PathLike],
    partitions: Sequence[str],
    methods: Sequence[str],
    weights: Sequence[float],
    fixed_weight: float,
    tsv_out: PathLike,
    chart_out: PathLike,
    mean_panel: bool = True,
    dataset: str = "",
) -> dict[str, int]:
    """Stage entry point. ``components`` are ordered partition-major, method-minor; ``qrels``
    follow ``partitions``."""
    files = metrics.keyed_inputs(components, methods, partitions, "component files")
    by_part = {p: {m: files[(m, p)] for m in methods} for p in partitions}
    qrels_by_part = dict(zip(partitions, qrels, strict=True))
    rows = sensitivity.sensitivity_table(by_part, qrels_by_part, weights, methods, output=tsv_out)
    title = "Fusion sensitivity: nDCG@10 as the sparse weight varies (dense = 1, multi-vector = 1)"
    if dataset:
        title = f"{dataset}: {title[0].lower()}{title[1:]}"
    sensitivity_plot(rows, partitions, methods, fixed_weight, chart_out, mean_panel, title)
    return {"rows": len(rows)}


# --------------------------------------------------------------------------- settings


def format_setting(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, Mapping):
        return "; ".join(f"{k}={format_setting(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(format_setting(v) for v in value)
    return str(value)


def settings_rows(
    settings: Mapping[str, Mapping[str, object]],
    corpora: Mapping[str, PathLike] | None = None,
    shard_size: int | None = None,
) -> list[dict[str, str]]:
    """Rows (section, setting, value) of the settings, then one row per corpus: its passages and,
    with ``shard_size``, the number of encoding shards (as the workflow computes it)."""
    rows = [
        {"section": section, "setting": key, "value": format_setting(value)}
        for section, items in settings.items()
        for key, value in items.items()
    ]
    for corpus, path in (corpora or {}).items():
        n = schemas.count_rows(path)
        value = f"{n} passages"
        if shard_size:
            shards = max(1, schemas.num_chunks(path, shard_size))  # as the workflow counts them
            value += f", {shards} encoding shard{'s' if shards != 1 else ''} of up to {shard_size}"
        rows.append({"section": "corpus", "setting": corpus, "value": value})
    return rows


def settings_html(rows: Sequence[Mapping[str, str]], title: str) -> str:
    table = html_table(
        ["section", "setting", "value"],
        [[r["section"], r["setting"], r["value"]] for r in rows],
        text_columns=(0, 1, 2),
    )
    return html_page(title, table, "The settings these numbers were computed with.")


def settings_stage(
    settings: Mapping[str, Mapping[str, object]],
    corpora: Sequence[PathLike],
    corpus_names: Sequence[str],
    shard_size: int | None,
    tsv_out: PathLike,
    html_out: PathLike,
    dataset: str = "",
    version: str | None = None,
) -> dict[str, int]:
    """Stage entry point: the settings as TSV (:data:`SETTINGS_COLUMNS`) and HTML; ``version``, the
    release of the topics and qrels the run used (:func:`miracl_eval.download.read_version`), is
    added to the ``data`` section."""
    release = version or "unknown (local files; declare it with hub.messirve_version)"
    settings = {**settings, "data": {**settings.get("data", {}), "version": release}}
    rows = settings_rows(settings, dict(zip(corpus_names, corpora, strict=True)), shard_size)
    write_text_atomic(tsv_out, format_tsv(SETTINGS_COLUMNS, rows))
    write_text_atomic(html_out, settings_html(rows, f"Run settings — {dataset}" if dataset else "Run settings"))
    return {"rows": len(rows)}


def parse_number(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None
