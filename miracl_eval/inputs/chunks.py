"""Query chunks: the queries of one scoring job (``query_chunk`` queries each, in file order).

The jobs that score candidate pairs (BGE-M3's component scores, a reranker's scores) each take
one chunk of a partition's queries, so that 156k MessIRve queries are a set of independent jobs.
"""

from __future__ import annotations

import pyarrow as pa

from miracl_eval import schemas
from miracl_eval.types import PathLike


def query_chunk(queries: PathLike, chunk: int, index: int) -> pa.Table:
    """The queries (``qid``, ``query``) of chunk ``index``: rows ``index * chunk`` to ``(index + 1) * chunk``."""
    if chunk < 1 or index < 0:
        raise ValueError("chunk must be positive and index non-negative")
    table = schemas.read_table(queries, schemas.QUERIES)
    return table.slice(index * chunk, chunk)


def query_chunk_ids(queries: PathLike, chunk: int, index: int) -> list[str]:
    """The qids of chunk ``index``, in file order."""
    return [str(q) for q in query_chunk(queries, chunk, index).column("qid").to_pylist()]
