"""Judged passages that are not in the corpus: a truncated corpus, or qrels of another version.

No method can retrieve them, so a query whose relevant passages are all missing scores 0 with
every method. They are kept in the qrels (the numbers stay comparable with trec_eval's on the
same files), listed per partition (qid, docid, relevance) and counted in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from miracl_eval import schemas
from miracl_eval.atomic import write_text_atomic
from miracl_eval.tsv import format_tsv, read_tsv
from miracl_eval.types import PathLike

log = logging.getLogger(__name__)

COLUMNS: tuple[str, ...] = ("qid", "docid", "relevance")


def judged_not_in_corpus(qrels: PathLike, corpus: PathLike, batch_rows: int = schemas.BATCH_ROWS) -> pa.Table:
    """The judgements (qid, docid, relevance) of ``qrels.parquet`` whose passage ``corpus.parquet`` lacks
    (the corpus is streamed, ``batch_rows`` docids at a time)."""
    table = schemas.read_table(qrels, schemas.QRELS)
    found = pa.array([False] * table.num_rows)
    for batch in schemas.iter_batches(corpus, schemas.CORPUS, batch_rows, columns=["docid"]):
        found = pc.or_(found, pc.is_in(table.column("docid"), value_set=batch.column("docid")))
    return table.filter(pc.invert(found)).sort_by([("qid", "ascending"), ("docid", "ascending")])


def judged_stage(qrels: PathLike, corpus: PathLike, output: PathLike) -> dict[str, int]:
    """Stage entry point: list the judged passages missing from the corpus (TSV) and count them in the log."""
    missing = judged_not_in_corpus(qrels, corpus).to_pylist()
    write_text_atomic(output, format_tsv(COLUMNS, missing))
    judged = schemas.read_table(qrels, schemas.QRELS).to_pylist()
    gone = {(r["qid"], r["docid"]) for r in missing}
    relevant = [(r["qid"], r["docid"]) for r in judged if r["relevance"] > 0]
    lost = {q for q, _ in relevant} - {q for q, d in relevant if (q, d) not in gone}
    stats = {
        "judged": len(judged),
        "missing": len(missing),
        "relevant_missing": sum((q, d) in gone for q, d in relevant),
        "queries_without_relevant": len(lost),
    }
    if missing:
        log.warning(
            "%d of %d judged passages (%d of them relevant) are not in the corpus %s, e.g. %s; "
            "%d queries have no relevant passage left in it and score 0 with every method (all listed in %s)",
            stats["missing"], stats["judged"], stats["relevant_missing"], corpus,
            ", ".join(f"{r['qid']}/{r['docid']}" for r in missing[:5]), stats["queries_without_relevant"], output,
        )  # fmt: skip
    return stats


def judged_notice(listings: Mapping[str, tuple[PathLike, Iterable[PathLike]]]) -> list[str]:
    """One line per partition whose judged passages are not all in its corpus, for the end of a run:
    ``listings`` maps a partition to its listing (:func:`judged_stage`'s TSV) and the data it was made
    from (qrels, corpus). A listing that is missing or older than its data says nothing. Never raises:
    the end of a run must not fail on it."""
    lines: list[str] = []
    for part, (listing, data_files) in listings.items():
        try:
            newest = max((Path(f).stat().st_mtime for f in data_files if Path(f).is_file()), default=0.0)
            if not Path(listing).is_file() or Path(listing).stat().st_mtime < newest:
                continue
            rows = read_tsv(listing)[1]
        except Exception as err:  # noqa: BLE001
            lines.append(f"{part}: could not read {listing} ({type(err).__name__}: {err})")
            continue
        if rows:
            relevant = sorted({r[0] for r in rows if r[2].lstrip("-").isdigit() and int(r[2]) > 0})
            queries = ", ".join(relevant[:5]) + (", ..." if len(relevant) > 5 else "")
            lines.append(
                f"{part}: {len(rows):,} judged passage(s) not in the corpus, no method can retrieve them "
                f"({len(relevant):,} queries lose a relevant passage{': ' + queries if relevant else ''}); "
                f"listed in {listing}"
            )
    return lines
