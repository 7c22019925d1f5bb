"""Published numbers (shipped as data) and side-by-side comparison with our results.

The numbers live in ``miracl_eval/data/published/*.tsv``; ``SOURCES.md`` beside them names the
paper, table and revision of every one. A published number is compared with one of ours only
when the run's configuration matches the source's:

* same dataset, split and measure;
* same method: the row's method (``bm25``, a model family's method such as ``dense``,
  ``sparse``, ``multivec``, ``dense+sparse``, ``all``, ``hybrid`` or ``reranked``); published rows
  without a workflow counterpart have method ``-`` and are never matched;
* same checkpoint, for rows that name one (the M3-Embedding rows need a model whose
  ``checkpoint`` is ``BAAI/bge-m3``; a hybrid's checkpoint is its models' joined with ``+``);
* every ``key=value`` requirement of the row's ``config`` column holds in the row's facts
  (:func:`miracl_eval.config.systems.system_facts`: the flattened run configuration plus the model's
  settings as ``model.<setting>``, a hybrid's as ``hybrid.<setting>``, a reranker's as
  ``reranker.<setting>`` and a reranked row's first stage's facts as ``first_stage.<fact>``), e.g.
  ``model.weights.sparse=0.3``, ``model.pooling=mean``, ``bm25.tokenizer=lucene-analyzer`` or
  ``first_stage.model=BAAI/bge-m3`` (``null``: a setting that is none, ``model.dimensions=null``).

A row computed at a dataset revision (``hub.revision=...``, MTEB's results) is met by a run at that revision
or at one known to hold the same data (:meth:`miracl_eval.inputs.datasets.Dataset.same_revision_data`: MTEB's
MIRACL hard negatives at ``95c8db7d`` and ``d7d94fa4``); otherwise the reason names the revision to pin.

pyserini's references also require ``pyserini.release``: a run is compared with the references of the
pyserini release its Lucene jobs run (:mod:`miracl_eval.lucene.release`; the tables and the report add it
to the run's configuration), and with neither set when it runs another.

Each comparison carries a note (``notes.tsv`` beside the numbers; for a reranked row, its first stage).

Facts that are true of every run of this workflow but are not configuration keys are added
from :data:`IMPLICIT_CONFIG` (BM25 always analyses text with Lucene analyzers, as pyserini).

Published values printed ×100 are converted to the 0–1 scale with exact decimal arithmetic
(``31.9`` → ``0.319``), and the difference is ``ours − theirs``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TypedDict

from miracl_eval.atomic import write_text_atomic
from miracl_eval.config.rerankers import THEN
from miracl_eval.config.systems import METHOD_NAMES, RERANKED, system_facts
from miracl_eval.encoders.registry import SEARCHED_AS_ENCODED
from miracl_eval.errors import InputError
from miracl_eval.evaluation import metrics
from miracl_eval.inputs.datasets import DATASETS
from miracl_eval.tsv import data_rows, format_tsv

PACKAGE_DIR = "data/published"
FILES: tuple[str, ...] = (
    "bge_m3_miracl_ndcg10.tsv",
    "pyserini_1.6.0_miracl_bm25.tsv",
    "pyserini_1.6.0_miracl_dense.tsv",
    "pyserini_1.6.0_miracl_hybrid.tsv",
    "pyserini_2.4.0_miracl_bm25.tsv",
    "pyserini_2.4.0_miracl_dense.tsv",
    "pyserini_2.4.0_miracl_hybrid.tsv",
    "mteb_miracl_e5.tsv",
    "messirve_test.tsv",
    "flagembedding_miracl_rerankers.tsv",
    "mteb_miracl_hn.tsv",
)
#: notes on published numbers (source_id, system or ``*``, note)
NOTES_FILE = "notes.tsv"
NOTE_COLUMNS: tuple[str, ...] = ("source_id", "system", "note")
COLUMNS: tuple[str, ...] = (
    "dataset", "split", "source_id", "system", "method", "model", "partition", "measure", "value", "scale", "config",
)  # fmt: skip
METHODS = frozenset({*METHOD_NAMES, "hybrid", RERANKED})
MEAN = metrics.MEAN
#: a dense model's search settings whose other values make a row another system than a source's, unless
#: the source's row says otherwise (a truncated or quantised view of a model: miracl_eval.faiss.storage)
SEARCH_AS_ENCODED: Mapping[str, object] = {f"model.{k}": v for k, v in SEARCHED_AS_ENCODED.items()}
#: configuration facts of every run of this workflow that are not configuration keys
IMPLICIT_CONFIG: Mapping[str, str] = {"bm25.tokenizer": "lucene-analyzer"}


@dataclass(frozen=True)
class Row:
    """One published number."""

    dataset: str
    split: str
    source_id: str
    system: str
    method: str  #: our method name, or ``-`` when the workflow has no counterpart
    model: str  #: ``-`` when the source names none (BM25)
    partition: str
    measure: str
    text: str  #: the value exactly as printed
    scale: int  #: 100 for numbers printed ×100, else 1
    config: tuple[tuple[str, str], ...] = field(default=())

    @property
    def exact(self) -> Decimal:
        """The value on the 0–1 scale, exactly."""
        return Decimal(self.text) / Decimal(self.scale)

    @property
    def value(self) -> float:
        """The value on the 0–1 scale (the double nearest to the exact decimal)."""
        return float(self.exact)


def _parse_config(text: str, path: str, line: int) -> tuple[tuple[str, str], ...]:
    if text in ("", "-"):
        return ()
    pairs = []
    for item in text.split(";"):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise InputError(path, f"config item {item!r} is not key=value", line)
        value = value.strip()
        if value.startswith('"'):  # a JSON string literal keeps its spaces: model.query_prefix="query: "
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise InputError(path, f"config value {value} is not a JSON string", line) from None
        pairs.append((key.strip(), value))
    return tuple(pairs)


def parse_published(text: str, path: str) -> list[Row]:
    """Parse one published-numbers TSV (see ``SOURCES.md`` for the format)."""
    rows: list[Row] = []
    for lineno, rec in data_rows(text, path, COLUMNS):
        try:
            value = Decimal(rec["value"])
        except InvalidOperation:
            raise InputError(path, f"value {rec['value']!r} is not a number", lineno) from None
        if rec["scale"] not in ("1", "100"):
            raise InputError(path, f"scale must be 1 or 100, found {rec['scale']!r}", lineno)
        scale = int(rec["scale"])
        if not value.is_finite() or not (0 <= value <= scale):
            raise InputError(path, f"value {rec['value']} is outside [0, {scale}]", lineno)
        if rec["method"] != "-" and rec["method"] not in METHODS:
            raise InputError(path, f"unknown method {rec['method']!r}", lineno)
        rows.append(
            Row(
                dataset=rec["dataset"],
                split=rec["split"],
                source_id=rec["source_id"],
                system=rec["system"],
                method=rec["method"],
                model=rec["model"],
                partition=rec["partition"],
                measure=rec["measure"],
                text=rec["value"],
                scale=scale,
                config=_parse_config(rec["config"], path, lineno),
            )
        )
    return rows


def data_dir(sub: str = PACKAGE_DIR) -> Traversable:
    """A shipped data directory, ``data/published`` by default (package data, through importlib.resources).

    ``miracl_eval`` may be a namespace package in an editable install, whose path list holds a
    non-directory entry that ``importlib.resources`` rejects; then the module's own directory is
    used (the same files).
    """
    try:
        base = resources.files("miracl_eval").joinpath(sub)
        if base.is_dir():
            return base
    except (NotADirectoryError, TypeError, ModuleNotFoundError):
        pass
    return Path(__file__).resolve().parent.parent / sub


def load_published(files: Iterable[str] | None = None) -> list[Row]:
    """All shipped published numbers (package data), in file order."""
    base = data_dir()
    rows: list[Row] = []
    for name in files if files is not None else FILES:
        res = base.joinpath(name)
        rows.extend(parse_published(res.read_text(encoding="utf-8"), f"miracl_eval/{PACKAGE_DIR}/{name}"))
    keys = [(r.dataset, r.split, r.source_id, r.system, r.partition, r.measure) for r in rows]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise InputError(f"miracl_eval/{PACKAGE_DIR}", f"duplicate published number {dup}")
    return rows


@cache
def load_notes() -> dict[tuple[str, str], str]:
    """The shipped notes on published numbers, by ``(source_id, system)`` (``system`` may be ``*``)."""
    where = f"miracl_eval/{PACKAGE_DIR}/{NOTES_FILE}"
    text = data_dir().joinpath(NOTES_FILE).read_text(encoding="utf-8")
    return {(rec["source_id"], rec["system"]): rec["note"] for _, rec in data_rows(text, where, NOTE_COLUMNS)}


def note_of(row: Row, label: str, notes: Mapping[tuple[str, str], str] | None = None) -> str:
    """What a reader must know beside ``row`` compared with our row ``label``: the source's note, and
    for a reranked row, the first stage it reranked."""
    notes = load_notes() if notes is None else notes
    parts = [n for n in (notes.get((row.source_id, row.system)), notes.get((row.source_id, "*"))) if n]
    first, then, _ = label.rpartition(THEN)
    if then:
        parts.append(f"our first stage: {first}")
    return "; ".join(parts)


# --------------------------------------------------------------------------- matching


def _same(ours: object, theirs: str) -> bool:
    if ours is None:
        return theirs == "null"  # a setting left at its default of none (``model.dimensions=null``)
    if isinstance(ours, Mapping | list | tuple):
        return False
    if isinstance(ours, bool):
        return str(ours).lower() == theirs.lower()
    try:
        return math.isclose(float(ours), float(theirs), rel_tol=0, abs_tol=1e-12)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(ours) == theirs


def row_facts(run_config: Mapping[str, object], label: str) -> dict[str, object]:
    """What a published row is compared on, for our row ``label`` under ``run_config``."""
    return {**IMPLICIT_CONFIG, **system_facts(run_config, label)}


#: the configuration key of the dataset revision a published number was computed at
REVISION_KEY = "hub.revision"


def other_revision(dataset: str, ours: object, theirs: str) -> str | None:
    """Why a run at hub revision ``ours`` does not read the data of a number computed at ``theirs``
    (and which revision to pin to meet it); None when it does."""
    record = DATASETS.get(dataset)
    if ours == theirs or (record is not None and record.same_revision_data(ours, theirs)):
        return None
    pin = record.revision_to_pin(theirs) if record is not None else theirs
    return f"computed at dataset revision {theirs}, this run reads {ours}: set hub.revision: {pin} to meet it"


def mismatch(row: Row, facts: Mapping[str, object]) -> str | None:
    """Why ``row`` is not comparable with our row of ``facts`` (:func:`row_facts`); None if it is."""
    method = facts["method"]
    if row.method == "-":
        return f"{row.system} has no counterpart in this workflow"
    if row.method != method:
        return f"method {method} is not {row.method}"
    if row.model != "-" and not _same(facts.get("model"), row.model):
        return f"model {facts.get('model')!r} is not {row.model!r}"
    for key, value in row.config:
        if key == REVISION_KEY:
            why = other_revision(row.dataset, facts.get(key), value)
            if why:
                return why
        elif not _same(facts.get(key), value):
            return f"{key} is {facts.get(key)!r}, the source has {value}"
    said = {key for key, _ in row.config}
    for key, plain in SEARCH_AS_ENCODED.items():
        if key not in said and facts.get(key, plain) != plain:
            return f"{key} is {facts.get(key)!r}: the source searched the vectors as encoded"
    return None


def _our_value(ours: Mapping[str, float], partition: str, languages: Sequence[str]) -> float | None:
    """Our value for a published partition; for a published mean, only a mean over the same
    languages (ours over all of them, or an explicit ``mean`` given without any language)."""
    if partition != MEAN:
        return float(ours[partition]) if partition in ours else None
    own_languages = [p for p in ours if p != MEAN]
    if languages and all(lang in ours for lang in languages):
        if MEAN in ours and set(own_languages) == set(languages):
            return float(ours[MEAN])
        return sum(float(ours[lang]) for lang in languages) / len(languages)
    if MEAN in ours and not own_languages:
        return float(ours[MEAN])
    return None


class SideBySideRow(TypedDict):
    """Our value beside one comparable published value (:data:`SIDE_BY_SIDE_COLUMNS`)."""

    dataset: str
    split: str
    measure: str
    method: str
    partition: str
    source_id: str
    system: str
    model: str
    ours: float
    theirs: float
    diff: float
    published: str
    scale: int
    note: str


SIDE_BY_SIDE_COLUMNS: tuple[str, ...] = (
    "dataset", "split", "measure", "method", "partition", "source_id", "system", "model",
    "ours", "theirs", "diff", "published", "scale", "note",
)  # fmt: skip


def side_by_side(
    ours: Mapping[str, Mapping[str, float]],
    dataset: str,
    split: str,
    measure: str,
    run_config: Mapping[str, object],
    published: Sequence[Row] | None = None,
    comparable: Collection[str] | None = None,
) -> list[SideBySideRow]:
    """Our values next to every comparable published value.

    ``ours`` maps a row label (``bm25``, ``bge-m3/all``, ...) → partition → value (0–1). A published ``mean`` (the source's average
    over its languages) is compared only with a mean over the same languages: ours over all of
    them (``ours[method]["mean"]`` if we have exactly those languages, else their mean), or an
    explicit ``mean`` given alone. A mean over a subset of languages is never compared.

    ``comparable``: the partitions whose data is the full data of the published numbers
    (:mod:`miracl_eval.evaluation.comparability`); a published number of another partition is left out, and a
    published mean unless all of its languages are comparable. None: every partition (unit tests of
    the configuration matching).

    Returns one dict per match with the columns :data:`SIDE_BY_SIDE_COLUMNS`: ``theirs`` is on
    the 0–1 scale, ``diff = ours − theirs``, ``published``/``scale`` are as printed, ``note`` what a
    reader must know beside it (:func:`note_of`).
    """
    rows = load_published() if published is None else list(published)
    relevant = [r for r in rows if r.dataset == dataset and r.split == split and r.measure == measure]
    # languages each source/system reports individually (for its mean)
    languages: dict[tuple[str, str], list[str]] = {}
    for r in relevant:
        if r.partition != MEAN:
            languages.setdefault((r.source_id, r.system), []).append(r.partition)
    out: list[SideBySideRow] = []
    for method, values in ours.items():
        facts = row_facts(run_config, method)
        for r in relevant:
            if mismatch(r, facts) is not None:
                continue
            langs = languages.get((r.source_id, r.system)) or dataset_partitions(dataset)
            if comparable is not None and not set(langs if r.partition == MEAN else [r.partition]) <= set(comparable):
                continue
            mine = _our_value(values, r.partition, langs)
            if mine is None:
                continue
            theirs = r.value
            out.append(
                {
                    "dataset": dataset,
                    "split": split,
                    "measure": measure,
                    "method": method,
                    "partition": r.partition,
                    "source_id": r.source_id,
                    "system": r.system,
                    "model": r.model,
                    "ours": mine,
                    "theirs": theirs,
                    "diff": mine - theirs,
                    "published": r.text,
                    "scale": r.scale,
                    "note": note_of(r, method),
                }
            )
    return out


def dataset_partitions(dataset: str) -> list[str]:
    """The partitions a published average is over, when a source prints only the average."""
    ds = DATASETS.get(dataset)
    return list(ds.partitions) if ds is not None and ds.mean_column else []


def read_results_table(path: str | os.PathLike[str]) -> dict[str, dict[str, float]]:
    """``{method: {partition: value}}`` from a results table written by
    :func:`miracl_eval.evaluation.metrics.format_table` (its ``mean`` column included)."""
    with open(path, encoding="utf-8") as fh:
        lines = [ln for ln in fh.read().splitlines() if ln.strip()]
    if not lines or lines[0].split("\t")[0] != "method":
        raise InputError(path, "not a results table (first column must be 'method')", 1)
    header = lines[0].split("\t")
    values: dict[str, dict[str, float]] = {}
    for lineno, line in enumerate(lines[1:], start=2):
        cells = line.split("\t")
        if len(cells) != len(header):
            raise InputError(path, f"{len(cells)} fields, expected {len(header)}", lineno)
        try:
            values[cells[0]] = {part: float(v) for part, v in zip(header[1:], cells[1:], strict=True)}
        except ValueError:
            raise InputError(path, "values must be numbers", lineno) from None
    return values


def format_side_by_side(rows: Sequence[SideBySideRow]) -> str:
    return format_tsv(SIDE_BY_SIDE_COLUMNS, rows)


def write_side_by_side(rows: Sequence[SideBySideRow], path: str | os.PathLike[str]) -> None:
    """Write :func:`side_by_side` rows as TSV, atomically (floats round-trip exactly)."""
    write_text_atomic(path, format_side_by_side(rows))


def published_rows(
    tables: Mapping[str, str | os.PathLike[str]],
    dataset: str,
    split: str,
    run_config: Mapping[str, object],
    comparable: Collection[str],
) -> list[SideBySideRow]:
    """:func:`side_by_side` rows of every measure; ``tables`` maps an ir_measures name (``nDCG@10``,
    ``R@100``) to our results table; only the ``comparable`` partitions
    (:mod:`miracl_eval.evaluation.comparability`) are compared."""
    rows: list[SideBySideRow] = []
    shipped = load_published()
    for measure, path in tables.items():
        rows += side_by_side(read_results_table(path), dataset, split, measure, run_config, shipped, comparable)
    return rows
