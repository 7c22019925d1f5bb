"""Whether a run's data is the data the published numbers were computed on.

A run is comparable with a published number only on the same data: the full corpus of the
partition and its full topics and qrels. A sample, a corpus with a missing shard or a truncated
download, a missing query or a changed judgement all give numbers that cannot be put beside the
published ones (a partial corpus is the most common reproduction mistake, FlagEmbedding issue 1259).

The reference sizes ship as data (``data/reference/corpora.tsv``, ``data/reference/topics.tsv``;
``data/reference/SOURCES.md`` names the source of every number): the passages of each corpus and,
per dataset version, split and partition, the queries, the judgements (qrels lines), the relevant
judgements (relevance above 0), the judged passages (distinct passages of the qrels) and two fingerprints
computed from the preprocessed Parquet files (:func:`qids_fingerprint`, :func:`qrels_fingerprint`).
A reference value of ``-`` is unknown and not checked: a source that publishes relevant judgements and
judged passages but not the qrels lines (MTEB's descriptive statistics) still has a truncated or
changed qrels download caught.

:func:`compare` decides, on counts and fingerprints alone; :func:`comparability_stage` measures a
run's files and writes ``results/{dataset}_comparability.tsv`` (:data:`COLUMNS`), which the
published-numbers stage reads (:func:`comparable_partitions`) and the end of a run summarises
(:func:`run_notice`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from miracl_eval import schemas
from miracl_eval.atomic import write_text_atomic
from miracl_eval.errors import InputError
from miracl_eval.evaluation.published import data_dir
from miracl_eval.inputs.datasets import MIRACL_HN_REVISION
from miracl_eval.tsv import data_rows, format_tsv, read_table
from miracl_eval.types import PathLike

REFERENCE_DIR = "data/reference"
CORPORA_FILE = "corpora.tsv"
TOPICS_FILE = "topics.tsv"
CORPORA_COLUMNS: tuple[str, ...] = ("dataset", "corpus", "passages", "source")
TOPICS_COLUMNS: tuple[str, ...] = (
    "dataset", "version", "split", "partition", "queries", "judgements", "relevant", "judged_passages",
    "qids_sha256", "qrels_sha256", "source",
)  # fmt: skip
COLUMNS: tuple[str, ...] = (
    "partition", "corpus", "version", "passages", "full_passages", "queries", "full_queries",
    "judgements", "full_judgements", "relevant", "full_relevant", "judged_passages", "full_judged_passages",
    "qids_fingerprint", "qrels_fingerprint", "comparable", "reason",
)  # fmt: skip
UNKNOWN = "-"
#: the reason of a comparable partition
FULL_DATA = "the full corpus, topics and qrels"


# --------------------------------------------------------------------------- fingerprints


def _sha256_lines(lines: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for line in sorted(lines):
        digest.update(line.encode("utf-8") + b"\n")
    return digest.hexdigest()


def qids_fingerprint(queries: PathLike) -> str:
    """sha256 of the query ids of a ``queries.parquet``, one per line (``qid\\n``), sorted by code point."""
    return _sha256_lines(schemas.read_table(queries, schemas.QUERIES).column("qid").to_pylist())


@dataclass(frozen=True)
class QrelsSizes:
    """What a ``qrels.parquet`` holds: its judgements, the relevant ones (relevance above 0), the
    distinct passages judged, and :func:`qrels_fingerprint`."""

    judgements: int
    relevant: int
    judged_passages: int
    sha256: str


def qrels_sizes(qrels: PathLike) -> QrelsSizes:
    """:class:`QrelsSizes` of a ``qrels.parquet``, read once."""
    table = schemas.read_table(qrels, schemas.QRELS)
    qids, docids, relevance = (table.column(name).to_pylist() for name in ("qid", "docid", "relevance"))
    return QrelsSizes(
        judgements=len(qids),
        relevant=sum(1 for r in relevance if r > 0),
        judged_passages=len(set(docids)),
        sha256=_sha256_lines(f"{q}\t{d}\t{r}" for q, d, r in zip(qids, docids, relevance, strict=True)),
    )


def qrels_fingerprint(qrels: PathLike) -> str:
    """sha256 of the judgements of a ``qrels.parquet``, one per line (``qid\\tdocid\\trelevance\\n``),
    sorted by code point."""
    return qrels_sizes(qrels).sha256


# --------------------------------------------------------------------------- reference sizes


@dataclass(frozen=True)
class Reference:
    """The full data of one partition, as published (None: not known, not checked)."""

    partition: str
    corpus: str
    version: str
    passages: int | None
    queries: int
    judgements: int | None
    qids_sha256: str | None
    qrels_sha256: str | None
    relevant: int | None
    judged_passages: int | None


@dataclass(frozen=True)
class Observed:
    """What a run has for one partition."""

    partition: str
    corpus: str
    version: str | None  #: the dataset version of the topics and qrels; None when unknown (local files)
    passages: int
    queries: int
    judgements: int
    qids_sha256: str
    qrels_sha256: str
    relevant: int
    judged_passages: int


@dataclass(frozen=True)
class Check:
    """The outcome for one partition: a row of :data:`COLUMNS`."""

    observed: Observed
    reference: Reference | None
    comparable: bool
    reason: str

    def row(self) -> dict[str, object]:
        obs, ref = self.observed, self.reference

        def known(value: object) -> object:
            return UNKNOWN if value is None else value

        def fingerprint(ours: str, theirs: str | None) -> str:
            return UNKNOWN if theirs is None else "match" if ours == theirs else "differs"

        return {
            "partition": obs.partition,
            "corpus": obs.corpus,
            "version": obs.version or "unknown",
            "passages": obs.passages,
            "full_passages": known(ref.passages if ref else None),
            "queries": obs.queries,
            "full_queries": known(ref.queries if ref else None),
            "judgements": obs.judgements,
            "full_judgements": known(ref.judgements if ref else None),
            "relevant": obs.relevant,
            "full_relevant": known(ref.relevant if ref else None),
            "judged_passages": obs.judged_passages,
            "full_judged_passages": known(ref.judged_passages if ref else None),
            "qids_fingerprint": fingerprint(obs.qids_sha256, ref.qids_sha256 if ref else None),
            "qrels_fingerprint": fingerprint(obs.qrels_sha256, ref.qrels_sha256 if ref else None),
            "comparable": "yes" if self.comparable else "no",
            "reason": self.reason,
        }


def _read_reference(name: str, columns: Sequence[str]) -> list[tuple[int, dict[str, str]]]:
    text = data_dir(REFERENCE_DIR).joinpath(name).read_text(encoding="utf-8")
    return data_rows(text, f"miracl_eval/{REFERENCE_DIR}/{name}", columns)


def _count(text: str, where: str, line: int) -> int | None:
    if text == UNKNOWN:
        return None
    if not text.isdigit():
        raise InputError(where, f"count {text!r} is not a non-negative integer", line)
    return int(text)


def _required(count: int | None, where: str, line: int) -> int:
    if count is None:
        raise InputError(where, "the number of queries must be known", line)
    return count


def reference_passages(dataset: str) -> dict[str, int]:
    """The shipped passages of each of ``dataset``'s corpora whose size is known (``corpora.tsv``)."""
    out = {}
    for line, rec in _read_reference(CORPORA_FILE, CORPORA_COLUMNS):
        count = _count(rec["passages"], CORPORA_FILE, line) if rec["dataset"] == dataset else None
        if count is not None:
            out[rec["corpus"]] = count
    return out


def references(dataset: str, split: str, corpus_of: Mapping[str, str]) -> dict[str, list[Reference]]:
    """The shipped reference sizes of ``dataset``/``split``: partition → one :class:`Reference` per
    dataset version. ``corpus_of`` maps each partition to its corpus key."""
    corpora: dict[str, int | None] = {}
    for line, rec in _read_reference(CORPORA_FILE, CORPORA_COLUMNS):
        if rec["dataset"] == dataset:
            corpora[rec["corpus"]] = _count(rec["passages"], CORPORA_FILE, line)
    out: dict[str, list[Reference]] = {}
    for line, rec in _read_reference(TOPICS_FILE, TOPICS_COLUMNS):
        if rec["dataset"] != dataset or rec["split"] != split or rec["partition"] not in corpus_of:
            continue
        corpus = corpus_of[rec["partition"]]
        out.setdefault(rec["partition"], []).append(
            Reference(
                partition=rec["partition"],
                corpus=corpus,
                version=rec["version"],
                passages=corpora.get(corpus),
                queries=_required(_count(rec["queries"], TOPICS_FILE, line), TOPICS_FILE, line),
                judgements=_count(rec["judgements"], TOPICS_FILE, line),
                qids_sha256=None if rec["qids_sha256"] == UNKNOWN else rec["qids_sha256"],
                qrels_sha256=None if rec["qrels_sha256"] == UNKNOWN else rec["qrels_sha256"],
                relevant=_count(rec["relevant"], TOPICS_FILE, line),
                judged_passages=_count(rec["judged_passages"], TOPICS_FILE, line),
            )
        )
    return out


# --------------------------------------------------------------------------- the check


def _sizes(ours: int, full: int | None, what: str, whole: str) -> str | None:
    if full is None or ours == full:
        return None
    if ours < full:
        return f"{ours:,} of {full:,} {what}"
    return f"{ours:,} {what}, the full {whole} has {full:,}"


def compare(observed: Observed, reference: Reference | None) -> Check:
    """Whether ``observed`` is the full data of ``reference``, and if not, why (in plain words)."""
    if reference is None:
        return Check(observed, None, False, f"no reference sizes for partition {observed.partition}")
    judgements = _sizes(observed.judgements, reference.judgements, "judgements", "qrels")
    # relevant judgements and judged passages say more only when the number of judgements does not
    # differ (or is not known: MTEB's statistics give only these two)
    parts = () if judgements else (
        _sizes(observed.relevant, reference.relevant, "relevant judgements", "qrels"),
        _sizes(observed.judged_passages, reference.judged_passages, "judged passages", "qrels"),
    )  # fmt: skip
    passages = _sizes(observed.passages, reference.passages, "passages", "corpus")
    queries = _sizes(observed.queries, reference.queries, "queries", "topics")
    reasons = [r for r in (passages, queries, judgements, *parts) if r]
    if reference.passages is None:
        reasons.append(f"the full size of corpus {observed.corpus} is unknown")
    if observed.queries == reference.queries and reference.qids_sha256 not in (None, observed.qids_sha256):
        reasons.append("the query ids differ from the full topics'")
    if observed.judgements == reference.judgements and reference.qrels_sha256 not in (None, observed.qrels_sha256):
        reasons.append("the judgements differ from the full qrels'")
    if observed.version is not None and observed.version != reference.version:
        reasons.insert(0, f"topics and qrels {observed.version}, the reference is {reference.version}")
    return Check(observed, reference, not reasons, "; ".join(reasons) or FULL_DATA)


#: the release of the topics and qrels that each dataset's shipped published numbers were computed on
#: (MessIRve's paper pins v1.0; the hub also holds v0.1 and, per the authors' repository, v1.1)
PUBLISHED_RELEASE: Mapping[str, str] = {"miracl": "v1.0", "messirve": "v1.0", "miracl-hn": MIRACL_HN_REVISION}


def check(observed: Observed, candidates: Sequence[Reference], published: str | None = None) -> Check:
    """:func:`compare` with the reference of the observed version (the published release's when the
    version is unknown). The full data of another release than ``published`` (the release of the
    published numbers) is not comparable with them."""
    if not candidates:
        return compare(observed, None)
    same = [r for r in candidates if r.version == observed.version]
    if not same:
        same = [r for r in candidates if r.version == published] or [candidates[0]]
    result = compare(observed, same[0])
    if result.comparable and published is not None and same[0].version != published:
        reason = f"the full data of {same[0].version}; the published numbers are of {published}"
        return Check(observed, same[0], False, reason)
    return result


def measure(
    partition: str, corpus: str, version: str | None, corpus_parquet: PathLike, queries: PathLike, qrels: PathLike
) -> Observed:
    """A partition's sizes and fingerprints, from its preprocessed Parquet files (metadata and ids only)."""
    judged = qrels_sizes(qrels)
    return Observed(
        partition=partition,
        corpus=corpus,
        version=version,
        passages=schemas.count_rows(corpus_parquet),
        queries=schemas.count_rows(queries),
        judgements=judged.judgements,
        qids_sha256=qids_fingerprint(queries),
        qrels_sha256=judged.sha256,
        relevant=judged.relevant,
        judged_passages=judged.judged_passages,
    )


def comparability_stage(
    dataset: str,
    split: str,
    partitions: Sequence[str],
    corpus_of: Mapping[str, str],
    corpora: Mapping[str, PathLike],
    queries: Sequence[PathLike],
    qrels: Sequence[PathLike],
    version: str | None,
    tsv_out: PathLike,
) -> dict[str, int]:
    """Stage entry point: one :data:`COLUMNS` row per partition. ``corpora`` maps a corpus key to
    its ``corpus.parquet``; ``queries`` and ``qrels`` follow ``partitions``."""
    refs = references(dataset, split, corpus_of)
    rows = []
    for part, q, j in zip(partitions, queries, qrels, strict=True):
        corpus = corpus_of[part]
        observed = measure(part, corpus, version, corpora[corpus], q, j)
        rows.append(check(observed, refs.get(part, []), PUBLISHED_RELEASE.get(dataset)).row())
    write_text_atomic(tsv_out, format_tsv(COLUMNS, rows))
    return {"partitions": len(rows), "comparable": sum(r["comparable"] == "yes" for r in rows)}


# --------------------------------------------------------------------------- readers


def read_comparability(path: PathLike) -> list[dict[str, str]]:
    return read_table(path, COLUMNS, "a comparability table")


def comparable_partitions(rows: Iterable[Mapping[str, str]]) -> set[str]:
    """The partitions of comparability rows (:func:`read_comparability`) that are comparable with published numbers."""
    return {r["partition"] for r in rows if r["comparable"] == "yes"}


def summary(rows: Sequence[Mapping[str, str]], dataset: str) -> list[str]:
    """Plain lines for the end of a run: which partitions are not comparable, and why."""
    bad = [r for r in rows if r["comparable"] != "yes"]
    if not bad:
        return [f"{dataset}: every partition is comparable with the published numbers ({FULL_DATA})."]
    head = (
        f"{dataset}: no published number is shown beside {len(bad)} of {len(rows)} partitions "
        "(not the full data they were computed on):"
    )
    return [head, *(f"  {r['partition']}: {r['reason']}" for r in bad)]


def run_notice(path: PathLike, dataset: str, partitions: Sequence[str], data_files: Iterable[PathLike]) -> list[str]:
    """:func:`summary` of the comparability table at ``path`` when it describes this run (it has
    every partition and is not older than any of ``data_files``); no lines otherwise. Never raises:
    the end of a run must not fail on it."""
    try:
        table = Path(path)
        if not table.is_file():
            return []
        stamp = table.stat().st_mtime
        if any(Path(f).is_file() and Path(f).stat().st_mtime > stamp for f in data_files):
            return []
        rows = {r["partition"]: r for r in read_comparability(table)}
        if not all(p in rows for p in partitions):
            return []
        return summary([rows[p] for p in partitions], dataset)
    except Exception as err:  # noqa: BLE001 - a summary must never fail the run
        return [f"{dataset}: could not summarise {path} ({type(err).__name__}: {err})"]
