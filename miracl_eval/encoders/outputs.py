"""Reading what the encoders store: dense vectors and lexical weights, as Parquet.

Vectors are ``(docid, vector fixed_size_list<float32|float16>[dim])`` shards (queries:
``(qid, vector)``); lexical weights are ``(docid, token_ids list<int32>, weights list<float32>)``.
Both are read batch by batch and validated as they are read (a non-finite value, a repeated token,
a bad length is an :class:`InputError` naming the file and the record). The Faiss indexes, the
impact indexes and the component scoring of fusion all read them through this module.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from miracl_eval import schemas
from miracl_eval.errors import InputError
from miracl_eval.types import PathLike

#: the Parquet metadata key of the dtype the model ran in when it wrote a file (``bfloat16``, ``float32``):
#: the shards of one corpus must agree, or a CPU's float32 and a GPU's bfloat16 vectors would mix
MODEL_DTYPE_KEY = b"miracl_eval.model_dtype"


def model_dtype(schema: pa.Schema) -> str | None:
    """The dtype the model ran in, as the file's metadata says (None for files written without it)."""
    value = (schema.metadata or {}).get(MODEL_DTYPE_KEY)
    return value.decode() if value is not None else None


class _OneModelDtype:
    """Checks that the shards read together were encoded with the model in one dtype."""

    def __init__(self) -> None:
        self.first: tuple[PathLike, str] | None = None

    def check(self, path: PathLike, schema: pa.Schema) -> None:
        dtype = model_dtype(schema)
        if dtype is None:
            return
        if self.first is None:
            self.first = (path, dtype)
        elif dtype != self.first[1]:
            raise InputError(
                path,
                f"encoded with the model in {dtype}, but {self.first[0]} in {self.first[1]}: the shards of a corpus "
                "must come from one dtype (encoder.dtype; 'auto' is bfloat16 on a recent GPU, float16 on an older "
                "one, float32 on the CPU). Delete the encodings of one of them (or run with --forcerun on its "
                "encoding jobs) to re-encode it as the others",
            )


def _read_schema(path: PathLike) -> pa.Schema:
    try:
        return pq.read_schema(path)
    except (pa.ArrowException, OSError) as err:
        raise InputError(path, f"cannot read Parquet file ({err})") from err


def vector_dim(path: PathLike, key: str | None = None, schema: pa.Schema | None = None) -> tuple[str, int, str]:
    """``(key column, dim, dtype)`` of a vector Parquet file, from its schema (no data read; ``schema``:
    the file's, when the caller has read it)."""
    schema = _read_schema(path) if schema is None else schema
    if key is None:
        key = next((k for k in ("docid", "qid") if k in schema.names), None)
        if key is None:
            raise InputError(path, "not a vector file: no 'docid' or 'qid' column")
    for name in (key, "vector"):
        if name not in schema.names:
            raise InputError(path, f"not a vector file: missing column '{name}'")
    vtype = schema.field("vector").type
    if not pa.types.is_fixed_size_list(vtype) or vtype.value_type not in (pa.float32(), pa.float16()):
        raise InputError(path, f"column 'vector' must be fixed_size_list<float32|float16>, found {vtype}")
    return key, vtype.list_size, "float16" if vtype.value_type == pa.float16() else "float32"


def _vectors(path: PathLike, column: pa.Array | pa.ChunkedArray, dim: int, dtype: type | None) -> np.ndarray:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if column.null_count:
        raise InputError(path, f"{column.null_count} null vector(s)")
    values = column.flatten()  # respects slicing, unlike .values
    if values.null_count:
        raise InputError(path, "vector(s) with null components")
    arr = values.to_numpy(zero_copy_only=False).reshape(len(column), dim)
    if dtype is not None and arr.dtype != dtype:
        arr = arr.astype(dtype)
    # a row's float64 sum is finite exactly when all its components are (no float32 sum overflows
    # it), and costs a tenth of np.isfinite over every component
    with np.errstate(invalid="ignore", over="ignore"):
        finite = np.isfinite(arr.sum(axis=1, dtype=np.float64)).all()
    if not finite:
        raise InputError(path, "vector(s) with NaN or infinite components")
    return arr


def iter_vector_batches(
    paths: PathLike | Sequence[PathLike],
    key: str | None = None,
    batch_rows: int = schemas.BATCH_ROWS,
    dtype: type | None = np.float32,
    dim: int | None = None,
    row_groups: Sequence[int] | None = None,
) -> Iterator[tuple[pa.Array, np.ndarray]]:
    """Stream ``(ids, vectors)`` from one vector Parquet file or a list of shards, in order
    (``row_groups``: only these row groups of each file).

    ``ids`` is a pyarrow string array; ``vectors`` an ``(n, dim)`` array of ``dtype`` (``None``
    keeps the stored float16/float32). Every shard must have the same dimension (``dim`` if
    given); a bad or corrupt shard raises :class:`InputError` naming it.
    """
    shards = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    one_dtype = _OneModelDtype()
    for path in shards:
        schema = _read_schema(path)
        k, d, _ = vector_dim(path, key, schema)
        one_dtype.check(path, schema)
        if dim is None:
            dim = d
        elif d != dim:
            raise InputError(path, f"vectors have dimension {d}, expected {dim} (as the first shard)")
        for batch in schemas.iter_batches(path, batch_rows=batch_rows, columns=[k, "vector"], row_groups=row_groups):
            ids = batch.column(k)
            if ids.null_count:
                raise InputError(path, f"{ids.null_count} null id(s) in column '{k}'")
            yield ids, _vectors(path, batch.column("vector"), d, dtype)


class SparseBatch:
    """A batch of lexical weight vectors in CSR form: row ``i`` is ``tokens[indptr[i]:indptr[i+1]]``."""

    __slots__ = ("ids", "indptr", "tokens", "weights")

    def __init__(self, ids: pa.Array, indptr: np.ndarray, tokens: np.ndarray, weights: np.ndarray) -> None:
        self.ids = ids
        self.indptr = indptr
        self.tokens = tokens
        self.weights = weights

    def __len__(self) -> int:
        return len(self.ids)

    def row(self, i: int) -> dict[int, float]:
        lo, hi = self.indptr[i], self.indptr[i + 1]
        return dict(zip(self.tokens[lo:hi].tolist(), self.weights[lo:hi].tolist(), strict=True))


def _list_values(path: PathLike, col: pa.Array, name: str) -> tuple[np.ndarray, np.ndarray]:
    if col.null_count:
        raise InputError(path, f"null list(s) in column '{name}'")
    offsets = col.offsets.to_numpy()
    values = col.flatten()
    if values.null_count:
        raise InputError(path, f"null value(s) in column '{name}'")
    return offsets - offsets[0], values.to_numpy(zero_copy_only=False)


def iter_sparse_batches(
    paths: PathLike | Sequence[PathLike],
    key: str | None = None,
    batch_rows: int = schemas.BATCH_ROWS,
    row_group: int | None = None,
) -> Iterator[SparseBatch]:
    """Stream lexical weights from one Parquet file or a list of shards, validated (``row_group``:
    only this row group of each file; records are still numbered from the file's first).

    ``key`` is the id column (``docid`` or ``qid``; found from the schema when ``None``).
    Rows whose token and weight lists differ in length, repeat a token or hold a negative or
    non-finite weight raise :class:`InputError` naming the file and record.
    """
    shards = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    one_dtype = _OneModelDtype()
    for path in shards:
        schema = _read_schema(path)
        one_dtype.check(path, schema)
        names = schema.names
        k = key or next((c for c in ("docid", "qid") if c in names), None)
        if k is None or k not in names:
            raise InputError(path, f"not a lexical weights file: no '{key or 'docid/qid'}' column")
        row0 = 0
        groups = None
        if row_group is not None:
            meta = pq.read_metadata(path)
            row0 = sum(meta.row_group(g).num_rows for g in range(row_group))
            groups = [row_group]
        columns = [k, "token_ids", "weights"]
        for batch in schemas.iter_batches(path, batch_rows=batch_rows, columns=columns, row_groups=groups):
            ids = batch.column(k)
            if ids.null_count:
                raise InputError(path, f"null id(s) in column '{k}'")
            t_off, tokens = _list_values(path, batch.column("token_ids"), "token_ids")
            w_off, weights = _list_values(path, batch.column("weights"), "weights")
            bad = np.flatnonzero(np.diff(t_off) != np.diff(w_off))
            if len(bad):
                raise InputError(
                    path, f"record {row0 + bad[0] + 1} ({ids[bad[0]]}): token_ids and weights differ in length"
                )
            weights = weights.astype(np.float32, copy=False)
            _validate(path, row0, ids, t_off, tokens, weights)
            yield SparseBatch(ids, t_off, tokens.astype(np.int64, copy=False), weights)
            row0 += len(ids)


def _validate(
    path: PathLike, row0: int, ids: pa.Array, indptr: np.ndarray, tokens: np.ndarray, weights: np.ndarray
) -> None:
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    bad = ~np.isfinite(weights) | (weights < 0)
    if bad.any():
        r = int(rows[np.argmax(bad)])
        raise InputError(path, f"record {row0 + r + 1} ({ids[r]}): negative or non-finite lexical weight")
    if len(tokens) and tokens.min() < 0:
        r = int(rows[np.argmax(tokens < 0)])
        raise InputError(path, f"record {row0 + r + 1} ({ids[r]}): negative token id")
    # Rows whose tokens ascend strictly (as the encoders write them) repeat none; others are sorted.
    if len(tokens) > 1 and not (tokens[1:] > tokens[:-1])[rows[1:] == rows[:-1]].all():
        keys = np.sort((rows.astype(np.int64) << 32) | tokens.astype(np.int64))  # (row, token), one int each
        dup = np.flatnonzero(keys[1:] == keys[:-1])
        if len(dup):
            r = int(keys[dup[0]] >> 32)
            raise InputError(path, f"record {row0 + r + 1} ({ids[r]}): a token id occurs twice")
