"""Report page: our numbers beside the published ones (:mod:`miracl_eval.evaluation.published`), as TSV
and HTML, with the comparability check of the data (:mod:`miracl_eval.evaluation.comparability`).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

from miracl_eval.atomic import write_text_atomic
from miracl_eval.evaluation import comparability, published
from miracl_eval.report.html import fmt, html_page, html_table, measure_label, signed
from miracl_eval.types import PathLike


def comparability_html(checks: Sequence[Mapping[str, str]]) -> str:
    """The comparability table (:data:`miracl_eval.evaluation.comparability.COLUMNS`) as HTML, the reasons in words."""
    sizes = ("passages", "queries", "judgements", "relevant", "judged_passages")
    header = ["partition"]
    for size in sizes:
        header += [size.replace("_", " "), "full"]
    header += ["fingerprints", "comparable", "reason"]
    rows = [
        [
            c["partition"],
            *(c[k] for size in sizes for k in (size, f"full_{size}")),
            f"qids {c['qids_fingerprint']}, qrels {c['qrels_fingerprint']}",
            c["comparable"],
            c["reason"],
        ]
        for c in checks
    ]
    last = len(header) - 1
    classes = [[*[""] * (last - 1), "sig-pos" if c["comparable"] == "yes" else "sig-neg", ""] for c in checks]
    return html_table(header, rows, classes, text_columns=(0, last - 2, last - 1, last))


def published_html(rows: Sequence[published.SideBySideRow], title: str, checks: Sequence[Mapping[str, str]]) -> str:
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
    header = ["measure", "method", "partition", "system", "source", "ours", "theirs", "diff", "published", "note"]
    out = [
        [
            measure_label(str(r["measure"])),
            r["method"],
            r["partition"],
            r["system"],
            r["source_id"],
            fmt(r["ours"]),
            fmt(r["theirs"]),
            signed(r["diff"]),
            f"{r['published']}" + (" (×100)" if r["scale"] == 100 else ""),
            r["note"],
        ]
        for r in rows
    ]
    return html_page(title, html_table(header, out, text_columns=(0, 1, 2, 3, 4, 9)) + "\n" + data, note)


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
    :func:`miracl_eval.evaluation.comparability.comparability_stage`'s table) as TSV (exact) and HTML."""
    checks = comparability.read_comparability(comparability_tsv)
    rows = published.published_rows(tables, dataset, split, run_config, comparability.comparable_partitions(checks))
    published.write_side_by_side(rows, tsv_out)
    write_text_atomic(html_out, published_html(rows, f"Published numbers — {dataset} {split}", checks))
    return {"matched": len(rows), "comparable_partitions": len(comparability.comparable_partitions(checks))}
