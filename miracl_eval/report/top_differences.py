"""Report page: the queries on which two methods differ most
(:func:`miracl_eval.evaluation.significance.top_differences`), with the query text.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import TypedDict

from miracl_eval import schemas
from miracl_eval.atomic import write_text_atomic
from miracl_eval.evaluation import metrics, significance
from miracl_eval.report.html import fmt, html_page, html_table, measure_label, signed
from miracl_eval.tsv import format_tsv
from miracl_eval.types import PathLike


class TopDifferenceRow(TypedDict):
    """One query of the top-differences table (:data:`TOP_DIFFERENCES_COLUMNS`)."""

    measure: str
    partition: str
    method_a: str
    method_b: str
    direction: str
    rank: int
    qid: str
    query: str
    value_a: float
    value_b: float
    diff: float


TOP_DIFFERENCES_COLUMNS: tuple[str, ...] = (
    "measure", "partition", "method_a", "method_b", "direction", "rank", "qid", "query", "value_a", "value_b", "diff",
)  # fmt: skip


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
) -> list[TopDifferenceRow]:
    """Per pair and partition, the ``n`` queries A wins most and the ``n`` it loses most
    (rows of :data:`TOP_DIFFERENCES_COLUMNS`; ``queries`` maps partition → qid → text)."""
    rows: list[TopDifferenceRow] = []
    for a, b in pairs:
        for part in partitions:
            texts = (queries or {}).get(part, {})
            diffs = significance.top_differences(per_query[(a, part)], per_query[(b, part)], n, measure)
            rank = {"win": 0, "loss": 0}
            for d in diffs:
                rank[d["direction"]] += 1
                rows.append(
                    {
                        "measure": measure,
                        "partition": part,
                        "method_a": a,
                        "method_b": b,
                        "direction": d["direction"],
                        "rank": rank[d["direction"]],
                        "qid": d["qid"],
                        "query": texts.get(d["qid"], ""),
                        "value_a": d["value_a"],
                        "value_b": d["value_b"],
                        "diff": d["diff"],
                    }
                )
    return rows


def top_differences_html(rows: Sequence[TopDifferenceRow], title: str, n: int) -> str:
    body: list[str] = []
    groups: dict[tuple[str, str], list[TopDifferenceRow]] = {}
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
                fmt(r["value_a"]),
                fmt(r["value_b"]),
                signed(r["diff"]),
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
