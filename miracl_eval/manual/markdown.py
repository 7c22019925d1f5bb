"""Markdown for the generated pages: table cells that survive any text, values as code, tables, anchors."""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

import yaml


def cell(text: object) -> str:
    """``text`` on one line for a table cell: newlines become spaces, ``|`` is escaped, ``<`` and ``>`` are
    shown as written (not taken as HTML)."""
    out = " ".join(str(text).split())
    return out.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def inline(value: Any) -> str:
    """``value`` as a YAML flow value, as one writes it in a config file: ``null``, ``true``, ``[bm25]``,
    ``{dense: 1.0}``, ``'{title} {text}'``."""
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=math.inf, sort_keys=False)
    return text.strip().removesuffix("...").strip()


def code(value: Any) -> str:
    """``value`` as inline code that fits a table cell: a string as it is unless spaces at its ends would not
    show (then quoted, as YAML writes it), anything else :func:`inline`."""
    quoted = not isinstance(value, str) or value != value.strip() or not value
    text = inline(value) if quoted else value
    text = text.replace("\n", "\\n").replace("|", "\\|")
    if "`" in text:
        return f"`` {text} ``"
    return f"`{text}`"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table; the cells are written as given (see :func:`cell` and :func:`code`)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def anchor(heading: str) -> str:
    """The anchor that Python-Markdown's toc extension gives a heading (its default slugify)."""
    value = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode("ascii")
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(r"[-\s]+", "-", value)
