"""The report's HTML: one stylesheet, pages, tables and number formats shared by every page."""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence

#: how a measure is named for readers (ir_measures' ``R@100`` is ``Recall@100`` in the paper)
MEASURE_LABELS: Mapping[str, str] = {"nDCG@10": "nDCG@10", "R@100": "Recall@100"}


def measure_label(name: str) -> str:
    return MEASURE_LABELS.get(name, name)


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


def fmt(value: float, digits: int = 4) -> str:
    return f"{value:.{digits}f}"


def signed(value: float, digits: int = 4) -> str:
    return f"{value:+.{digits}f}"


def parse_number(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None
