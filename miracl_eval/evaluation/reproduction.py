"""Reproduction verdicts: for every published number shown beside ours, whether we reproduced it.

In the three levels of pyserini's reproduction matrix (2CR; ``pyserini/2cr/miracl.py`` of pyserini
1.6.0: ``math.isclose`` on trec_eval's 4-decimal score, else ``abs_tol=5e-4``), each comparable cell
(:func:`miracl_eval.evaluation.published.published_rows`: the same data, the same settings) gets:

* ``OK``: ours, rounded to the published value's precision (4 decimals for pyserini's, 0.1 point for a
  paper printing 54.9), *is* the published value;
* ``OKish``: ours is within the tolerance of its measure (default 5e-4, 2CR's; settable per measure
  and per source, e.g. half a point for a source printed to one decimal; 0: no cell is OKish);
* ``FAIL``: otherwise.

``results/{dataset}_reproduction.tsv`` holds the cells; :func:`summary` the line per row and source
printed at the end of a run and on the report's result pages, counting each level.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypedDict

from miracl_eval.atomic import write_text_atomic
from miracl_eval.errors import ConfigError
from miracl_eval.evaluation import comparability, published
from miracl_eval.evaluation.metrics import MEAN
from miracl_eval.evaluation.published import SideBySideRow
from miracl_eval.tsv import format_tsv, read_tsv
from miracl_eval.types import PathLike

#: the OKish tolerance of each measure (0-1 scale) when the config gives none: 2CR's
DEFAULT_TOLERANCE: Mapping[str, float] = {"nDCG@10": 0.0005, "R@100": 0.0005}
OK, OKISH, FAIL = "OK", "OKish", "FAIL"
LEVELS = (OK, OKISH, FAIL)
COLUMNS = ("row", "source", "partition", "measure", "published", "ours", "difference", "tolerance", "verdict")
#: absolute slack for float rounding of the published decimal
EPS = 1e-12


class Verdict(TypedDict):
    """One row of :data:`COLUMNS`."""

    row: str
    source: str
    partition: str
    measure: str
    published: float
    ours: float
    difference: float
    tolerance: float
    verdict: str


def tolerance(measure: str, source: str, settings: Mapping[str, object] | None = None) -> float:
    """The tolerance of ``measure`` for ``source``: ``reproduction.sources.<source>.<measure>``, else
    ``reproduction.tolerance.<measure>``, else :data:`DEFAULT_TOLERANCE`."""
    settings = settings or {}
    per_source = settings.get("sources") or {}
    assert isinstance(per_source, Mapping)
    general = settings.get("tolerance") or {}
    assert isinstance(general, Mapping)
    for table in (per_source.get(source) or {}, general, DEFAULT_TOLERANCE):
        if measure in table:
            return float(table[measure])
    raise KeyError(f"no tolerance for measure {measure!r}")


def check_settings(settings: Mapping[str, object], known: Iterable[str] | None = None) -> None:
    """Every source id of ``reproduction.sources`` must be a shipped source's (``known``: every source id of
    :func:`miracl_eval.evaluation.published.load_published`): a mistyped one would set nothing. ConfigError
    names ``reproduction.sources.<id>`` and lists the known ids."""
    per_source = settings.get("sources") or {}
    assert isinstance(per_source, Mapping)
    if not per_source:
        return
    if known is None:
        known = (r.source_id for r in published.load_published())
    ids = sorted(set(known))
    for source in per_source:
        if source not in ids:
            raise ConfigError(
                f"reproduction.sources.{source}",
                f"no published source has this id (the source_id column of miracl_eval/data/published): "
                f"{', '.join(ids)}",
            )


def level(ours: float, printed: str, scale: int, tol: float) -> str:
    """``OK`` when ``ours`` rounded to the precision of the value as printed (``printed`` / ``scale``)
    is that value, ``OKish`` within ``tol`` of it, else ``FAIL``."""
    from decimal import ROUND_HALF_EVEN, Decimal

    published = Decimal(printed) / Decimal(scale)
    step = Decimal(1).scaleb(Decimal(printed).as_tuple().exponent) / Decimal(scale)  # type: ignore[arg-type]
    if (Decimal(repr(ours)) / step).quantize(Decimal(1), rounding=ROUND_HALF_EVEN) * step == published:
        return OK
    return OKISH if abs(ours - float(published)) <= tol + EPS else FAIL


def verdicts(rows: Iterable[SideBySideRow], settings: Mapping[str, object] | None = None) -> list[Verdict]:
    """A verdict per side-by-side cell (:func:`miracl_eval.evaluation.published.side_by_side`)."""
    out: list[Verdict] = []
    for r in rows:
        tol = tolerance(r["measure"], r["source_id"], settings)
        diff = r["ours"] - r["theirs"]
        out.append(
            {
                "row": r["method"],
                "source": r["source_id"],
                "partition": r["partition"],
                "measure": r["measure"],
                "published": r["theirs"],
                "ours": r["ours"],
                "difference": diff,
                "tolerance": tol,
                "verdict": level(r["ours"], r["published"], r["scale"], tol),
            }
        )
    return out


def _points(value: float) -> str:
    return f"{value * 100:g} point{'' if value * 100 == 1 else 's'}"


def summary(rows: Sequence[Mapping[str, object]]) -> list[str]:
    """A line per row, source and measure: how many of its partitions (a published mean said apart) are
    OK, OKish and FAIL, and the cells that are not OK."""
    groups: dict[tuple[str, str, str], list[Mapping[str, object]]] = {}
    for r in rows:
        groups.setdefault((str(r["row"]), str(r["source"]), str(r["measure"])), []).append(r)
    lines = []
    for (row, source, measure), cells in groups.items():
        parts = [c for c in cells if c["partition"] != MEAN]
        means = [c for c in cells if c["partition"] == MEAN]
        tol = float(str(cells[0]["tolerance"]))
        counts = ", ".join(f"{sum(c['verdict'] == v for c in parts)} {v}" for v in LEVELS)
        text = f"{row}: "
        if parts:
            text += f"{counts} of {len(parts)} {'language' if len(parts) == 1 else 'languages'}"
        if means:
            text += f"{'; ' if parts else ''}the mean {means[0]['verdict']}"
        text += f" against {source} ({measure}; OKish within {_points(tol)})"
        failed = [c for c in cells if c["verdict"] != OK]
        if failed:
            text += "; not OK: " + ", ".join(
                f"{c['partition']} {float(str(c['difference'])) * 100:+.2f} ({c['verdict']})" for c in failed
            )
        lines.append(text)
    return lines


def write_reproduction(rows: Sequence[Verdict], path: PathLike) -> None:
    write_text_atomic(path, format_tsv(COLUMNS, rows))


def read_reproduction(path: PathLike) -> list[dict[str, str]]:
    header, rows = read_tsv(path)
    return [dict(zip(header, r, strict=True)) for r in rows]


def reproduction_stage(
    tables: Mapping[str, PathLike],
    dataset: str,
    split: str,
    run_config: Mapping[str, object],
    comparability_tsv: PathLike,
    output: PathLike,
) -> list[str]:
    """Stage entry point: the verdicts of every comparable published number (``tables``: ir_measures
    name to our results table) to ``output``; returns the summary lines."""
    checks = comparability.read_comparability(comparability_tsv)
    cells = published.published_rows(tables, dataset, split, run_config, comparability.comparable_partitions(checks))
    settings = run_config.get("reproduction")
    rows = verdicts(cells, settings if isinstance(settings, Mapping) else None)
    write_reproduction(rows, output)
    return summary(rows)


def run_notice(path: PathLike, data_files: Iterable[PathLike], dataset: str) -> list[str]:
    """:func:`summary` of the reproduction table at ``path`` when it is newer than every one of
    ``data_files`` (the tables); never raises (the end of a run must not fail on it)."""
    try:
        table = Path(path)
        if not table.is_file():
            return []
        stamp = table.stat().st_mtime
        if any(os.path.isfile(f) and os.path.getmtime(f) > stamp for f in data_files):
            return []
        rows = read_reproduction(table)
        if not rows:
            return [f"{dataset}: no published number to reproduce (no comparable data and settings)"]
        return [f"{dataset} reproduction:", *(f"  {line}" for line in summary(rows))]
    except Exception as err:  # noqa: BLE001 - a summary must never fail the run
        return [f"{dataset}: could not summarise {path} ({type(err).__name__}: {err})"]
