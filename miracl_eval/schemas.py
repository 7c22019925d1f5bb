"""Parquet schemas of every stage's output, the helpers that read and write them, and the sizes that
several stages share (query chunks, search batches) and the job requests read.

Ids are strings everywhere: MIRACL query ids can be integers (``6``) or look like passage ids
(``10020#0``), and a query id can equal a passage id.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from miracl_eval.atomic import atomic_output
from miracl_eval.errors import InputError

CORPUS = pa.schema(
    [
        ("docid", pa.string()),
        ("title", pa.string()),
        ("text", pa.string()),
        ("contents", pa.string()),
    ]
)
QUERIES = pa.schema([("qid", pa.string()), ("query", pa.string())])
QRELS = pa.schema([("qid", pa.string()), ("docid", pa.string()), ("relevance", pa.int32())])
RUN = pa.schema([("qid", pa.string()), ("docid", pa.string()), ("rank", pa.int32()), ("score", pa.float64())])
#: a reranker's score of each (query, passage) pair it read (rules/rerankers.smk)
PAIR_SCORES = pa.schema([("qid", pa.string()), ("docid", pa.string()), ("score", pa.float64())])
PER_QUERY = pa.schema([("qid", pa.string()), ("measure", pa.string()), ("value", pa.float64())])
SPARSE = pa.schema(
    [
        ("docid", pa.string()),
        ("token_ids", pa.list_(pa.int32())),
        ("weights", pa.list_(pa.float32())),
    ]
)
QUERY_SPARSE = pa.schema(
    [
        ("qid", pa.string()),
        ("token_ids", pa.list_(pa.int32())),
        ("weights", pa.list_(pa.float32())),
    ]
)


def dense_schema(dim: int, dtype: str = "float32", key: str = "docid") -> pa.Schema:
    """Schema of stored dense vectors: an id and a fixed-size list of floats."""
    value = {"float16": pa.float16(), "float32": pa.float32()}[dtype]
    return pa.schema([(key, pa.string()), ("vector", pa.list_(value, dim))])


BATCH_ROWS = 65_536


def write_table(table: pa.Table, path: str | os.PathLike[str], schema: pa.Schema) -> None:
    """Write ``table`` (cast to ``schema``) atomically as Parquet."""
    table = table.select(schema.names).cast(schema)
    with atomic_output(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


class StreamWriter:
    """Write record batches of one schema to a Parquet file, atomically on close.

    Use as a context manager: the file appears under its final name only if the block succeeds.
    """

    def __init__(self, path: str | os.PathLike[str], schema: pa.Schema) -> None:
        self.path = Path(path)
        self.schema = schema
        self._ctx = atomic_output(self.path)
        self._writer: pq.ParquetWriter | None = None
        self.rows = 0

    def __enter__(self) -> StreamWriter:
        tmp = self._ctx.__enter__()
        self._writer = pq.ParquetWriter(tmp, self.schema, compression="zstd")
        return self

    def write(self, columns: dict[str, list] | pa.RecordBatch | pa.Table) -> None:
        assert self._writer is not None
        if isinstance(columns, dict):
            batch = pa.table(columns, schema=self.schema)
        else:
            batch = pa.Table.from_batches([columns]) if isinstance(columns, pa.RecordBatch) else columns
            batch = batch.select(self.schema.names).cast(self.schema)
        self.rows += batch.num_rows
        self._writer.write_table(batch)

    def __exit__(self, exc_type, exc, tb) -> bool:
        assert self._writer is not None
        self._writer.close()
        return bool(self._ctx.__exit__(exc_type, exc, tb))


def write_strings(fh: BinaryIO, strings: pa.Array) -> None:
    """Write the strings of a string array one after another (UTF-8), straight from its data buffer."""
    if strings.null_count:
        raise ValueError("cannot write null strings")
    if not len(strings):
        return
    ends = np.frombuffer(strings.buffers()[1], np.int32)[strings.offset : strings.offset + len(strings) + 1]
    fh.write(memoryview(strings.buffers()[2])[ends[0] : ends[-1]])


def _check_schema(path: str | os.PathLike[str], actual: pa.Schema, schema: pa.Schema) -> None:
    missing = [f.name for f in schema if f.name not in actual.names]
    if missing:
        raise InputError(path, f"not a valid stage output: missing column(s) {', '.join(missing)}")


def read_table(path: str | os.PathLike[str], schema: pa.Schema | None = None) -> pa.Table:
    """Read a whole Parquet file, checking its columns against ``schema``."""
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise InputError(path, f"cannot read Parquet file ({err})") from err
    if schema is not None:
        _check_schema(path, table.schema, schema)
        table = table.select(schema.names)
    return table


def iter_batches(
    path: str | os.PathLike[str],
    schema: pa.Schema | None = None,
    batch_rows: int = BATCH_ROWS,
    columns: Iterable[str] | None = None,
    row_groups: Sequence[int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stream a Parquet file (or only its ``row_groups``) in record batches of at most ``batch_rows`` rows."""
    try:
        pfile = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise InputError(path, f"cannot read Parquet file ({err})") from err
    if schema is not None:
        _check_schema(path, pfile.schema_arrow, schema)
    cols = list(columns) if columns is not None else (schema.names if schema is not None else None)
    try:
        groups = None if row_groups is None else list(row_groups)
        yield from pfile.iter_batches(batch_size=batch_rows, columns=cols, row_groups=groups)
    except (pa.ArrowInvalid, OSError) as err:
        raise InputError(path, f"corrupt Parquet file ({err})") from err


def count_rows(path: str | os.PathLike[str]) -> int:
    """Number of rows of a Parquet file, from its metadata."""
    try:
        return pq.ParquetFile(path).metadata.num_rows
    except (pa.ArrowInvalid, OSError) as err:
        raise InputError(path, f"cannot read Parquet file ({err})") from err


def num_chunks(path: str | os.PathLike[str], size: int) -> int:
    """Number of chunks of ``size`` rows of a Parquet file (0 for an empty file), from its metadata.

    Encoding shards and query chunks of the workflow are counted with it.
    """
    if size < 1:
        raise ValueError("the chunk size must be positive")
    return -(-count_rows(path) // size)


#: query vectors that a dense search scores at once
DENSE_SEARCH_BATCH = 4_096
#: queries per row group of an exact search block's candidates, and per merge step (miracl_eval.faiss.blocks)
DENSE_MERGE_CHUNK = 1_024
#: MB an exact search block's query batch of scores takes, and a rescoring round's pairs and queries
#: (miracl_eval.faiss.blocks; its memory request, miracl_eval.jobs.requests)
DENSE_BLOCK_MB = 1_024
#: bytes a rescoring round of an exact search block holds per candidate pair
RESCORE_PAIR_BYTES = 64
#: queries that a Lucene search runs (and whose hits it holds) at once
QUERY_CHUNK = 2_000
#: queries whose hits an evaluation holds at once
EVAL_CHUNK = 5_000


def ivf_list_count(configured: int, passages: int) -> int:
    """The lists of an IVF index of ``passages`` vectors: Faiss wants at least 39 training points per
    centroid, so a small corpus gets fewer than ``configured``."""
    return max(1, min(configured, passages // 39))
