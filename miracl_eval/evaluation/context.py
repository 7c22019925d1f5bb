"""Where a run's rows stand: the published numbers of the same task beside them, as context, never as a verdict.

A published number gets a verdict (:mod:`miracl_eval.evaluation.reproduction`) only beside a row of the same
checkpoint and settings on the same data (:mod:`miracl_eval.evaluation.published`), so a new model's row has
none. The context table (``results/{dataset}_context.tsv``, :data:`COLUMNS`) lists every shipped published number
of the run's dataset, split and measures, for the run's partitions (and a source's mean when the run has all of
its languages), with its source, system, the dataset revision or release it was computed at
(:func:`dataset_revision`), whether this run reads that data (``our_data``: the comparability check's reason for
a partition that is not the full data, or the revision to pin), and which of the run's rows got a verdict on it
(``verdict_rows``; most get none). The report's result pages show it below the run's rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path

from miracl_eval.atomic import write_text_atomic
from miracl_eval.errors import InputError
from miracl_eval.evaluation import comparability, published
from miracl_eval.evaluation.metrics import MEAN
from miracl_eval.tsv import data_rows, format_tsv, read_table
from miracl_eval.types import PathLike

COLUMNS: tuple[str, ...] = (
    "measure", "partition", "source_id", "system", "model", "method", "value", "published", "scale",
    "dataset_revision", "our_data", "verdict_rows", "note",
)  # fmt: skip
#: ``our_data`` of a number computed on the data this run reads
SAME_DATA = "same data"
#: the dataset revision or release each source's numbers were computed at (``source_id``, ``system``, ``partition``;
#: ``*`` for any), for sources whose rows do not require a ``hub.revision``
REVISIONS_FILE = "revisions.tsv"
REVISION_COLUMNS: tuple[str, ...] = ("source_id", "system", "partition", "revision")


@cache
def _revisions() -> dict[tuple[str, str, str], str]:
    where = f"miracl_eval/{published.PACKAGE_DIR}/{REVISIONS_FILE}"
    text = published.data_dir().joinpath(REVISIONS_FILE).read_text(encoding="utf-8")
    return {
        (r["source_id"], r["system"], r["partition"]): r["revision"]
        for _, r in data_rows(text, where, REVISION_COLUMNS)
    }


def dataset_revision(row: published.Row) -> str:
    """The dataset revision (or release) a published number was computed at: the ``hub.revision`` it requires,
    else the shipped ``revisions.tsv``'s entry for its source (the most specific of system and partition)."""
    config = dict(row.config)
    if published.REVISION_KEY in config:
        return config[published.REVISION_KEY]
    known = _revisions()
    for key in ((row.source_id, row.system, row.partition), (row.source_id, row.system, "*"),
                (row.source_id, "*", row.partition), (row.source_id, "*", "*")):  # fmt: skip
        if key in known:
            return known[key]
    raise InputError(f"miracl_eval/{published.PACKAGE_DIR}/{REVISIONS_FILE}", f"no revision of source {row.source_id}")


def _languages(rows: Sequence[published.Row]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for r in rows:
        if r.partition != MEAN:
            out.setdefault((r.source_id, r.system), set()).add(r.partition)
    return out


def context_rows(
    ours: Mapping[str, Mapping[str, Mapping[str, float]]],
    dataset: str,
    split: str,
    partitions: Sequence[str],
    run_config: Mapping[str, object],
    checks: Sequence[Mapping[str, str]],
    shipped: Sequence[published.Row] | None = None,
) -> list[dict[str, object]]:
    """:data:`COLUMNS` rows: every published number of ``dataset``/``split`` and each measure of ``ours`` (measure
    → our results table, ``{row: {partition: value}}``) for ``partitions``. ``checks``: the comparability table's
    rows (:func:`miracl_eval.evaluation.comparability.read_comparability`)."""
    rows = published.load_published() if shipped is None else list(shipped)
    task = [r for r in rows if r.dataset == dataset and r.split == split and r.measure in ours]
    languages = _languages(task)
    reasons = {c["partition"]: c["reason"] for c in checks if c["comparable"] != "yes"}
    comparable = comparability.comparable_partitions(checks)
    verdicts: dict[tuple[str, str, str, str], list[str]] = {}
    for measure, values in ours.items():
        for m in published.side_by_side(values, dataset, split, measure, run_config, rows, comparable):
            verdicts.setdefault((str(m["source_id"]), str(m["system"]), str(m["partition"]), measure), []).append(
                str(m["method"])
            )
    hub = run_config.get("hub")
    our_revision = hub.get("revision") if isinstance(hub, Mapping) else None
    out: list[dict[str, object]] = []
    for r in task:
        covers = languages.get((r.source_id, r.system)) or set(published.dataset_partitions(dataset))
        parts = sorted(covers) if r.partition == MEAN else [r.partition]
        if not set(parts) <= set(partitions):
            continue
        revision = dataset_revision(r)
        why = [f"{p}: {reasons[p]}" for p in parts if p in reasons]
        if published.REVISION_KEY in dict(r.config):
            other = published.other_revision(dataset, our_revision, revision)
            if other:
                why.insert(0, other)
        out.append(
            {
                "measure": r.measure,
                "partition": r.partition,
                "source_id": r.source_id,
                "system": r.system,
                "model": r.model,
                "method": r.method,
                "value": r.value,
                "published": r.text,
                "scale": r.scale,
                "dataset_revision": revision,
                "our_data": "; ".join(why) if why else SAME_DATA,
                "verdict_rows": ", ".join(verdicts.get((r.source_id, r.system, r.partition, r.measure), [])) or "-",
                "note": published.note_of(r, ""),
            }
        )
    return out


def read_context(path: PathLike) -> list[dict[str, str]]:
    return read_table(path, COLUMNS, "a context table")


def context_stage(
    tables: Mapping[str, PathLike],
    dataset: str,
    split: str,
    partitions: Sequence[str],
    run_config: Mapping[str, object],
    comparability_tsv: PathLike,
    tsv_out: PathLike,
) -> dict[str, int]:
    """Stage entry point: the context table of the run's result tables (``tables``: ir_measures name → table)."""
    ours = {measure: published.read_results_table(path) for measure, path in tables.items()}
    checks = comparability.read_comparability(comparability_tsv)
    rows = context_rows(ours, dataset, split, partitions, run_config, checks)
    write_text_atomic(tsv_out, format_tsv(COLUMNS, rows))
    return {"published": len(rows), "verdicts": sum(r["verdict_rows"] != "-" for r in rows)}


def context_notice(path: PathLike, tables: Sequence[PathLike], dataset: str) -> list[str]:
    """One line for the end of a run when the context table is as new as the result tables; none otherwise.
    Never raises."""
    try:
        table = Path(path)
        if not table.is_file() or any(Path(t).is_file() and Path(t).stat().st_mtime > table.stat().st_mtime
                                      for t in tables):  # fmt: skip
            return []
        rows = read_context(table)
        systems = {(r["source_id"], r["system"]) for r in rows}
        return [
            f"{dataset}: {len(rows)} published numbers of this task ({len(systems)} systems) beside your rows, as "
            f"context, not verdicts: {table}"
        ] if rows else []  # fmt: skip
    except Exception as err:  # noqa: BLE001 - a notice must never fail the run
        return [f"{dataset}: could not read {path} ({type(err).__name__}: {err})"]
