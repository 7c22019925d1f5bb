"""The encoding stages of every family: a corpus shard, or a partition's queries, to Parquet.

Rows are streamed in bounded chunks (:func:`base.chunk_rows`), so memory does not grow with the
shard size. A stage writes one file per output kind of the model's family, all published
together or none: dense vectors in :func:`schemas.dense_schema`, lexical weights in
:data:`schemas.SPARSE` (passages) or :data:`schemas.QUERY_SPARSE` (queries).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from miracl_eval import schemas
from miracl_eval.encoders import PRELOAD_MODULES, base
from miracl_eval.encoders.base import DENSE, SPARSE, Encoder, Role
from miracl_eval.encoders.registry import get_family
from miracl_eval.errors import InputError
from miracl_eval.inputs.preprocess import join_title
from miracl_eval.types import PathLike

#: imported once by a preload server before it forks these stages' jobs (:mod:`miracl_eval.jobs.preload`)
PRELOAD = PRELOAD_MODULES


def text_columns(title_join: str | None) -> list[str]:
    """The corpus columns a passage's encoded text comes from (see the ``title_join`` setting)."""
    return ["contents"] if title_join is None else ["title", "text"]


def passage_texts(batch: pa.RecordBatch | pa.Table, title_join: str | None) -> list[str | None]:
    """The encoded texts of corpus rows: ``contents``, or ``title``/``text`` joined by the template."""
    if title_join is None:
        return batch.column("contents").to_pylist()
    titles, texts = batch.column("title").to_pylist(), batch.column("text").to_pylist()
    return [None if x is None else join_title(t or "", x, title_join) for t, x in zip(titles, texts, strict=True)]


def _iter_rows(path: PathLike, columns: Sequence[str], start: int, stop: int, chunk: int) -> Iterator[pa.RecordBatch]:
    """Stream rows ``[start, stop)`` of ``columns`` of a Parquet file, reading only the row groups needed."""
    try:
        pfile = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise InputError(path, f"cannot read Parquet file ({err})") from err
    missing = [c for c in columns if c not in pfile.schema_arrow.names]
    if missing:
        raise InputError(path, f"missing column(s) {', '.join(missing)}")
    groups: list[int] = []
    first_row = None
    row = 0
    for i in range(pfile.num_row_groups):
        n = pfile.metadata.row_group(i).num_rows
        if row + n > start and row < stop and n > 0:
            groups.append(i)
            first_row = row if first_row is None else first_row
        row += n
    if not groups:
        return
    pos = first_row or 0
    try:
        for batch in pfile.iter_batches(batch_size=chunk, row_groups=groups, columns=list(columns)):
            lo, hi = max(start, pos) - pos, min(stop, pos + batch.num_rows) - pos
            pos += batch.num_rows
            if hi > lo:
                yield batch.slice(lo, hi - lo)
            if pos >= stop:
                break
    except (pa.ArrowInvalid, OSError) as err:
        raise InputError(path, f"corrupt Parquet file ({err})") from err


def _dense_column(vectors: np.ndarray, dim: int, dense_dtype: str) -> pa.FixedSizeListArray:
    values = np.ascontiguousarray(vectors, dtype=np.float16 if dense_dtype == "float16" else np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), dim)


def _list_column(parts: Sequence[np.ndarray], dtype: Any) -> pa.ListArray:
    offsets = np.zeros(len(parts) + 1, dtype=np.int32)
    np.cumsum([len(p) for p in parts], out=offsets[1:])
    values = np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))


class _AllOrNone:
    """Stream writers that publish their files together: if any fails, none of them is left behind."""

    def __init__(self, outputs: Mapping[str, tuple[PathLike, pa.Schema]]) -> None:
        self._specs = outputs
        self._stack = ExitStack()
        self._published: list[Path] = []
        self.writers: dict[str, schemas.StreamWriter] = {}

    def __enter__(self) -> _AllOrNone:
        with ExitStack() as guard:
            guard.push(self._stack)
            for kind, (path, schema) in self._specs.items():
                writer = schemas.StreamWriter(path, schema)
                # pushed before the writer: it runs after the writer's exit, and records a published file
                self._stack.push(self._published_hook(writer.path))
                self.writers[kind] = self._stack.enter_context(writer)
            guard.pop_all()
        return self

    def _published_hook(self, path: Path) -> Callable[..., bool]:
        def hook(exc_type, exc, tb) -> bool:
            if exc_type is None:
                self._published.append(path)
            return False

        return hook

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            return bool(self._stack.__exit__(exc_type, exc, tb))
        except BaseException:
            for path in self._published:  # a later writer failed to close: withdraw the earlier ones
                path.unlink(missing_ok=True)
            raise


def _progress(total: int, desc: str):
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit=" texts",
        file=sys.stderr,
        mininterval=1.0 if sys.stderr.isatty() else 30.0,
        dynamic_ncols=True,
    )


def _load_encoder(spec: Mapping[str, Any], outputs: Mapping[str, PathLike], device: str, dtype: str) -> Encoder:
    """Check that ``outputs`` names exactly the family's output kinds, then load the encoder."""
    family = get_family(spec["family"])
    if set(outputs) != set(family.outputs):
        raise ValueError(
            f"outputs must name the {family.name} family's outputs ({', '.join(family.outputs)}), "
            f"not {', '.join(outputs) or 'nothing'}"
        )
    return family.load(spec, device=device, dtype=dtype)


def _write_encoded(
    encoder: Encoder,
    batches: Iterator[pa.RecordBatch],
    key: str,
    texts_of: Callable[[pa.RecordBatch], list[str | None]],
    total: int,
    outputs: Mapping[str, PathLike],
    dense_dtype: str,
    role: Role,
    batch_size: int,
    desc: str,
    source: PathLike,
) -> dict[str, Any]:
    kinds: dict[str, tuple[PathLike, pa.Schema]] = {}
    for kind in encoder.outputs:  # the family's order
        if kind == DENSE:
            assert encoder.dim is not None
            kinds[kind] = (outputs[kind], schemas.dense_schema(encoder.dim, dense_dtype, key=key))
        else:
            kinds[kind] = (outputs[kind], schemas.SPARSE if key == "docid" else schemas.QUERY_SPARSE)
    rows = 0
    started = time.perf_counter()
    with _AllOrNone(kinds) as out, _progress(total, desc) as bar:
        for batch in batches:
            ids = batch.column(key)
            texts = texts_of(batch)
            if ids.null_count or any(t is None for t in texts):
                bad = next(i for i in range(len(texts)) if texts[i] is None or not ids[i].is_valid)
                raise InputError(source, f"null {key} or text in row {rows + bad + 1}")
            encoded = encoder.encode(texts, role, batch_size)  # type: ignore[arg-type]
            for kind, writer in out.writers.items():
                if kind == DENSE:
                    assert encoded.dense is not None and encoder.dim is not None
                    columns = [ids, _dense_column(encoded.dense, encoder.dim, dense_dtype)]
                else:
                    assert kind == SPARSE and encoded.sparse is not None
                    columns = [
                        ids,
                        _list_column([t for t, _ in encoded.sparse], np.int32),
                        _list_column([w for _, w in encoded.sparse], np.float32),
                    ]
                writer.write(pa.table(columns, schema=writer.schema))
            rows += len(texts)
            bar.update(len(texts))
    seconds = time.perf_counter() - started
    return {
        "rows": rows,
        "dim": encoder.dim,
        "seconds": round(seconds, 3),
        "passages_per_s": round(rows / seconds, 2) if seconds > 0 else float("inf"),
    }


def encode_corpus_shard(
    corpus_parquet: PathLike,
    shard: int,
    shard_size: int,
    outputs: Mapping[str, PathLike],
    spec: Mapping[str, Any],
    batch_size: int,
    device: str = "auto",
    dtype: str = "auto",
    dense_dtype: str = "float32",
) -> dict[str, Any]:
    """Encode rows ``[shard * shard_size, (shard + 1) * shard_size)`` of a corpus Parquet file.

    ``spec``: a resolved model spec (:meth:`registry.Family.resolve`); the passages' texts come
    from the ``contents`` column, or from ``title`` and ``text`` when the spec's ``title_join``
    is a template. ``outputs`` maps each of the family's output kinds to its Parquet file
    (dense vectors stored as ``dense_dtype``); all are published together or none.

    Returns ``{"shard", "start", "stop", "rows", "dim", "seconds", "passages_per_s"}``.
    Raises ``ValueError`` for a shard outside the corpus.
    """
    if dense_dtype not in ("float16", "float32"):
        raise ValueError(f"dense_dtype must be float16 or float32, not {dense_dtype!r}")
    total = schemas.num_chunks(corpus_parquet, shard_size)
    if not 0 <= shard < total:
        raise ValueError(f"shard {shard} is out of range: {corpus_parquet} has {total} shard(s) of {shard_size}")
    n_rows = schemas.count_rows(corpus_parquet)
    start, stop = shard * shard_size, min((shard + 1) * shard_size, n_rows)
    encoder = _load_encoder(spec, outputs, device, dtype)
    title_join = spec["title_join"]
    columns = ["docid", *text_columns(title_join)]
    batches = _iter_rows(corpus_parquet, columns, start, stop, base.chunk_rows(batch_size))
    stats = _write_encoded(
        encoder,
        batches,
        "docid",
        lambda batch: passage_texts(batch, title_join),
        stop - start,
        outputs,
        dense_dtype,
        "passage",
        batch_size,
        f"encode shard {shard}",
        corpus_parquet,
    )
    if stats["rows"] != stop - start:  # pragma: no cover - metadata and data disagree
        raise InputError(corpus_parquet, f"expected {stop - start} rows in shard {shard}, read {stats['rows']}")
    return {"shard": shard, "start": start, "stop": stop, **stats}


def encode_queries(
    queries_parquet: PathLike,
    outputs: Mapping[str, PathLike],
    spec: Mapping[str, Any],
    batch_size: int,
    device: str = "auto",
    dtype: str = "auto",
) -> dict[str, Any]:
    """Encode a queries Parquet file (``qid``, ``query``) as :func:`encode_corpus_shard` does a shard.

    Dense vectors are float32 (``schemas.dense_schema(dim, key="qid")``), lexical weights
    :data:`schemas.QUERY_SPARSE`. Returns ``{"rows", "dim", "seconds", "passages_per_s"}``.
    """
    n_rows = schemas.count_rows(queries_parquet)
    encoder = _load_encoder(spec, outputs, device, dtype)
    batches = _iter_rows(queries_parquet, ["qid", "query"], 0, n_rows, base.chunk_rows(batch_size))
    return _write_encoded(
        encoder,
        batches,
        "qid",
        lambda batch: batch.column("query").to_pylist(),
        n_rows,
        outputs,
        "float32",
        "query",
        batch_size,
        "encode queries",
        queries_parquet,
    )
