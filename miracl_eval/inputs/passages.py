"""Passages of the preprocessed corpus by docid: their rows, and their texts read from those rows only.

A stage that needs a few passages (the rerank's candidates, the shards the union's candidates live
in) reads the corpus's ``docid`` column once (tens of bytes a passage: MIRACL English's 32.9M docids
are a few hundred MB) to find each candidate's row, and then only the row groups that hold them,
never the whole corpus's texts. Encoding shards tile the corpus's rows in order, so a row is also
where a passage's stored vectors are (:mod:`miracl_eval.fusion.scores`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from miracl_eval.errors import InputError
from miracl_eval.inputs.preprocess import join_title
from miracl_eval.types import PathLike


def text_columns(title_join: str | None) -> list[str]:
    """The corpus columns a passage's encoded text comes from (see the ``title_join`` setting)."""
    return ["contents"] if title_join is None else ["title", "text"]


def passage_texts(batch: pa.RecordBatch | pa.Table, title_join: str | None) -> list[str | None]:
    """The encoded texts of corpus rows: ``contents``, or ``title``/``text`` joined by the template."""
    if title_join is None:
        return batch.column("contents").to_pylist()
    titles, texts = batch.column("title").to_pylist(), batch.column("text").to_pylist()
    return [None if x is None else join_title(t or "", x, title_join) for t, x in zip(titles, texts, strict=True)]


def _open(path: PathLike) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise InputError(path, f"cannot read Parquet file ({err})") from err


def group_starts(pfile: pq.ParquetFile) -> np.ndarray:
    """The first row of each row group of a Parquet file, and its row count at the end."""
    sizes = [pfile.metadata.row_group(i).num_rows for i in range(pfile.num_row_groups)]
    return np.r_[0, np.cumsum(sizes, dtype=np.int64)].astype(np.int64)


def read_rows(
    pfile: pq.ParquetFile, rows: np.ndarray, columns: Sequence[str], source: PathLike
) -> Iterator[tuple[np.ndarray, pa.Table]]:
    """``(positions in rows, table of those rows)`` per row group that holds any of ``rows``,
    reading only those row groups' ``columns`` (rows: row numbers of the file, any order)."""
    starts = group_starts(pfile)
    order = np.argsort(rows, kind="stable")
    ordered = rows[order]
    if len(ordered) and (ordered[0] < 0 or ordered[-1] >= starts[-1]):
        raise InputError(source, f"row {int(ordered[-1])} is past the file's {int(starts[-1])} rows")
    bounds = np.searchsorted(ordered, starts)
    for group in range(pfile.num_row_groups):
        lo, hi = bounds[group], bounds[group + 1]
        if hi == lo:
            continue
        try:
            table = pfile.read_row_group(group, columns=list(columns))
        except (pa.ArrowInvalid, OSError) as err:
            raise InputError(source, f"corrupt Parquet file ({err})") from err
        yield order[lo:hi], table.take(pa.array(ordered[lo:hi] - starts[group]))


def read_bytes(metadata: pq.FileMetaData, groups: Sequence[int], columns: Sequence[str] | None = None) -> int:
    """Stored (compressed) bytes of ``columns`` (all: None) in row groups ``groups``: what reading them reads."""
    total = 0
    for g in groups:
        rg = metadata.row_group(g)
        total += sum(
            rg.column(c).total_compressed_size
            for c in range(rg.num_columns)
            if columns is None or rg.column(c).path_in_schema in columns
        )
    return total


class CorpusRows:
    """The rows of a preprocessed corpus's passages, by docid (its ``docid`` column, read once)."""

    def __init__(self, corpus: PathLike) -> None:
        self.path = corpus
        self.file = _open(corpus)
        if "docid" not in self.file.schema_arrow.names:
            raise InputError(corpus, "no docid column")
        try:
            self.docids = self.file.read(columns=["docid"]).column("docid").combine_chunks()
        except (pa.ArrowInvalid, OSError) as err:
            raise InputError(corpus, f"corrupt Parquet file ({err})") from err
        self._last: tuple[pa.Array | pa.ChunkedArray, np.ndarray] | None = None
        #: stored bytes read so far (the docid column, then every row group of texts read)
        self.bytes_read = read_bytes(self.file.metadata, range(self.file.num_row_groups), ["docid"])

    def __len__(self) -> int:
        return len(self.docids)

    def find(self, docids: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """The row of each docid, -1 where the corpus lacks it (the last answer is kept: the union's dense
        and sparse scores look up the same candidates, and each lookup hashes the corpus's docids)."""
        if self._last is not None and type(self._last[0]) is type(docids) and self._last[0].equals(docids):
            return self._last[1]
        found = pc.index_in(docids, value_set=self.docids)
        rows = pc.fill_null(found, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        self._last = (docids, rows)
        return rows

    def rows(self, docids: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """The row of each docid; a docid the corpus lacks is an :class:`InputError` naming it."""
        found = pc.index_in(docids, value_set=self.docids)
        if found.null_count:
            missing = pc.filter(docids, pc.is_null(found))
            n = len(pc.unique(missing))
            raise InputError(self.path, f"{n} docid(s) are not in the corpus, e.g. {missing[0].as_py()!r}")
        return found.to_numpy(zero_copy_only=False).astype(np.int64)

    def texts(self, docids: pa.Array | pa.ChunkedArray, title_join: str | None) -> dict[str, str]:
        """The encoded text of each (distinct) docid, reading only the row groups that hold them."""
        unique = pc.unique(docids)
        rows = self.rows(unique)
        columns = text_columns(title_join)
        missing = [c for c in columns if c not in self.file.schema_arrow.names]
        if missing:
            raise InputError(self.path, f"missing column(s) {', '.join(missing)}")
        out: dict[str, str] = {}
        starts = group_starts(self.file)
        groups = np.unique(np.searchsorted(starts, rows, side="right") - 1)
        self.bytes_read += read_bytes(self.file.metadata, groups.tolist(), columns)
        for positions, table in read_rows(self.file, rows, columns, self.path):
            texts = passage_texts(table, title_join)
            for p, text in zip(positions.tolist(), texts, strict=True):
                if text is None:
                    raise InputError(self.path, f"passage {unique[p].as_py()!r} has no text", None)
                out[unique[p].as_py()] = text
        return out
