"""Judged passages that are not in the corpus: a truncated corpus, or qrels of another version.

No method can retrieve them, so a query whose relevant passages are all missing scores 0 with
every method. They are kept in the qrels (the numbers stay comparable with trec_eval's on the
same files), listed per partition (qid, docid, relevance) and counted in the log.
"""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.compute as pc

from miracl_eval import schemas
from miracl_eval.atomic import write_text_atomic
from miracl_eval.tsv import format_tsv
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
