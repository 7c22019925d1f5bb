"""Small tab-separated tables: the report's TSV outputs and their readers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from miracl_eval.errors import InputError
from miracl_eval.types import PathLike


def read_tsv(path: PathLike) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a tab-separated file (blank lines skipped; every row as wide as the header)."""
    lines = [ln for ln in Path(path).read_text(encoding="utf-8").splitlines() if ln.strip()]
    if not lines:
        raise InputError(path, "empty table (no header line)")
    header = lines[0].split("\t")
    rows: list[list[str]] = []
    for lineno, line in enumerate(lines[1:], start=2):
        cells = line.split("\t")
        if len(cells) != len(header):
            raise InputError(path, f"{len(cells)} fields, expected {len(header)}", lineno)
        rows.append(cells)
    return header, rows


def read_table(path: PathLike, columns: Sequence[str], what: str) -> list[dict[str, str]]:
    """The rows of one of the workflow's own tables, whose header must be ``columns`` (``what``: the kind of
    table, named in the error)."""
    header, rows = read_tsv(path)
    if tuple(header) != tuple(columns):
        raise InputError(path, f"not {what} (header must be {' '.join(columns)})", 1)
    return [dict(zip(header, r, strict=True)) for r in rows]


def data_rows(text: str, where: str, columns: Sequence[str]) -> list[tuple[int, dict[str, str]]]:
    """``(line number, {column: cell})`` of a shipped data table: ``#`` comment and blank lines skipped,
    then a header that must be ``columns``, then rows exactly as wide. ``where`` names it in errors."""
    rows: list[tuple[int, dict[str, str]]] = []
    header: list[str] | None = None
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        cells = line.split("\t")
        if header is None:
            header = cells
            if tuple(header) != tuple(columns):
                raise InputError(where, f"header must be {' '.join(columns)}, found {' '.join(header)}", lineno)
            continue
        if len(cells) != len(columns):
            raise InputError(where, f"{len(cells)} fields, expected {len(columns)}", lineno)
        rows.append((lineno, dict(zip(columns, cells, strict=True))))
    if header is None:
        raise InputError(where, "no header line")
    return rows


def format_tsv(columns: Sequence[str], rows: Iterable[Mapping[str, object]]) -> str:
    """Rows as TSV: floats with their shortest round-trip representation, None as empty."""

    def cell(v: object) -> str:
        if v is None:
            return ""
        if isinstance(v, float):
            return repr(v)
        return str(v).replace("\t", " ").replace("\n", " ")

    lines = ["\t".join(columns)]
    lines += ["\t".join(cell(r[c]) for c in columns) for r in rows]
    return "\n".join(lines) + "\n"
