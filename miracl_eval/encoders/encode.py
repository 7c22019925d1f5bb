"""The encoding stages of every family: a block of corpus shards, or a partition's queries, to Parquet.

Rows are streamed in bounded chunks (:func:`base.chunk_rows`) through the host pipeline
(:mod:`miracl_eval.encoders.pipeline`), so memory does not grow with the shard size and the model
never waits for reading, tokenizing or writing. A shard writes one file per output kind of the
model's family, all published together or none: dense vectors in :func:`schemas.dense_schema`,
lexical weights in :data:`schemas.SPARSE` (passages) or :data:`schemas.QUERY_SPARSE` (queries).
A block job (:func:`encode_corpus_block`) loads the model once for all of its shards and skips the
ones already done (:mod:`miracl_eval.encoders.blocks`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from miracl_eval import schemas, shards
from miracl_eval.encoders import PRELOAD_MODULES, base, blocks, pipeline
from miracl_eval.encoders.base import TransformerEncoder
from miracl_eval.encoders.kinds import DENSE, SPARSE, Role
from miracl_eval.encoders.outputs import MODEL_DTYPE_KEY
from miracl_eval.encoders.pipeline import HostSettings
from miracl_eval.encoders.registry import get_family
from miracl_eval.errors import InputError
from miracl_eval.inputs.passages import passage_texts, text_columns
from miracl_eval.jobs.progress import Progress
from miracl_eval.types import PathLike

#: imported once by a preload server before it forks these stages' jobs (:mod:`miracl_eval.jobs.preload`)
PRELOAD = PRELOAD_MODULES

log = logging.getLogger(__name__)


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


def _check_outputs(spec: Mapping[str, Any], outputs: Mapping[str, Any]) -> None:
    family = get_family(spec["family"])
    if set(outputs) != set(family.outputs):
        raise ValueError(
            f"outputs must name the {family.name} family's outputs ({', '.join(family.outputs)}), "
            f"not {', '.join(outputs) or 'nothing'}"
        )


def _load_encoder(
    spec: Mapping[str, Any], outputs: Mapping[str, Any], device: str, dtype: str, settings: Mapping[str, Any] | None
) -> Any:
    """Check that ``outputs`` names exactly the family's output kinds, then load the encoder (a
    :class:`TransformerEncoder`, or an API's :class:`~miracl_eval.encoders.openai.ApiEncoder`) of ``spec``
    and the ``settings`` that change no encoding (:func:`registry.throughput_settings`)."""
    _check_outputs(spec, outputs)
    encoder: Any = get_family(spec["family"]).load({**(settings or {}), **spec}, device=device, dtype=dtype)
    if isinstance(encoder, TransformerEncoder):
        log.info("model %s on %s in %s", spec["checkpoint"], encoder.device, encoder.precision)
    else:
        encoder.ensure_dim()
    return encoder


def _precision(spec: Mapping[str, Any], device: str, dtype: str) -> str:
    """What the model will run in: the resolved torch dtype (never ``auto``), or ``api`` for an API's model."""
    if get_family(spec["family"]).remote:
        return "api"
    return base.dtype_name(base.resolve_dtype(dtype, base.resolve_device(device)))


def _write_encoded(
    encoder: TransformerEncoder,
    batches: Iterator[pa.RecordBatch],
    key: str,
    texts_of: Callable[[pa.RecordBatch], list[str | None]],
    total: int,
    outputs: Mapping[str, PathLike],
    dense_dtype: str,
    role: Role,
    host: HostSettings,
    desc: str,
    source: PathLike,
    metadata: Mapping[bytes, bytes] | None = None,
) -> dict[str, Any]:
    kinds: dict[str, tuple[PathLike, pa.Schema]] = {}
    for kind in encoder.outputs:  # the family's order
        if kind == DENSE:
            assert encoder.dim is not None
            schema = schemas.dense_schema(encoder.dim, dense_dtype, key=key)
        else:
            schema = schemas.SPARSE if key == "docid" else schemas.QUERY_SPARSE
        stamp = {**(metadata or {}), MODEL_DTYPE_KEY: encoder.precision.encode()}
        kinds[kind] = (outputs[kind], schema.with_metadata(stamp))
    read = 0

    def chunks() -> Iterator[tuple[pa.Array, list[str]]]:  # runs in the pipeline's planner thread
        nonlocal read
        for batch in batches:
            ids = batch.column(key)
            texts = texts_of(batch)
            if ids.null_count or any(t is None for t in texts):
                bad = next(i for i in range(len(texts)) if texts[i] is None or not ids[i].is_valid)
                raise InputError(source, f"null {key} or text in row {read + bad + 1}")
            read += len(texts)
            yield ids, texts  # type: ignore[misc]

    rows = 0
    started = time.perf_counter()
    timings = pipeline.Timings()
    # an API's answers are kept as they come until the files are published (a re-run asks for none of them again)
    received = nullcontext() if isinstance(encoder, TransformerEncoder) else encoder.receiving(outputs[DENSE])
    with received, _AllOrNone(kinds) as out, Progress(total, desc, "texts", log) as progress:
        for ids, encoded in encoder.encode_stream(chunks(), role, encoder.outputs, host, timings, progress.update):
            for kind, writer in out.writers.items():
                if kind == DENSE:
                    assert encoder.dim is not None
                    columns = [ids, _dense_column(encoded[DENSE], encoder.dim, dense_dtype)]
                else:
                    assert kind == SPARSE
                    columns = [
                        ids,
                        _list_column([t for t, _ in encoded[SPARSE]], np.int32),
                        _list_column([w for _, w in encoded[SPARSE]], np.float32),
                    ]
                writer.write(pa.table(columns, schema=writer.schema))
            rows += len(ids)
    seconds = time.perf_counter() - started
    busy = timings.per_text_ms()
    if isinstance(encoder, TransformerEncoder):
        log.info(
            "%s: %d texts in %d batches; busy per text: tokenize %.3f ms (on %d thread(s)), plan %.3f ms, "
            "model %.3f ms, assemble and write %.3f ms",
            desc, rows, timings.batches, busy["tokenize"], host.workers, busy["plan"], busy["model"], busy["caller"],
        )  # fmt: skip
    else:
        encoder.log_usage()
    return {
        "rows": rows,
        "dim": encoder.dim,
        "seconds": round(seconds, 3),
        "passages_per_s": round(rows / seconds, 2) if seconds > 0 else float("inf"),
        "busy_ms_per_text": {k: round(v, 4) for k, v in busy.items()},
    }


def _shard_rows(corpus_parquet: PathLike, shard: int, shard_size: int) -> tuple[int, int]:
    total = schemas.num_chunks(corpus_parquet, shard_size)
    if not 0 <= shard < total:
        raise ValueError(f"shard {shard} is out of range: {corpus_parquet} has {total} shard(s) of {shard_size}")
    n_rows = schemas.count_rows(corpus_parquet)
    return shard * shard_size, min((shard + 1) * shard_size, n_rows)


def _encode_shard(
    encoder: TransformerEncoder,
    corpus_parquet: PathLike,
    shard: int,
    shard_size: int,
    outputs: Mapping[str, PathLike],
    spec: Mapping[str, Any],
    host: HostSettings,
    dense_dtype: str,
    metadata: Mapping[bytes, bytes] | None = None,
) -> dict[str, Any]:
    start, stop = _shard_rows(corpus_parquet, shard, shard_size)
    title_join = spec["title_join"]
    columns = ["docid", *text_columns(title_join)]
    batches = _iter_rows(corpus_parquet, columns, start, stop, host.window)
    stats = _write_encoded(
        encoder,
        batches,
        "docid",
        lambda batch: passage_texts(batch, title_join),
        stop - start,
        outputs,
        dense_dtype,
        "passage",
        host,
        f"encode shard {shard}",
        corpus_parquet,
        metadata,
    )
    if stats["rows"] != stop - start:  # pragma: no cover - metadata and data disagree
        raise InputError(corpus_parquet, f"expected {stop - start} rows in shard {shard}, read {stats['rows']}")
    return {"shard": shard, "start": start, "stop": stop, **stats}


def _check_dense_dtype(dense_dtype: str) -> None:
    if dense_dtype not in ("float16", "float32"):
        raise ValueError(f"dense_dtype must be float16 or float32, not {dense_dtype!r}")


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
    token_budget: int | None = None,
    tokenizer_workers: int | None = None,
    settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Encode rows ``[shard * shard_size, (shard + 1) * shard_size)`` of a corpus Parquet file.

    ``spec``: a resolved model spec (:meth:`registry.Family.resolve`); the passages' texts come
    from the ``contents`` column, or from ``title`` and ``text`` when the spec's ``title_join``
    is a template. ``outputs`` maps each of the family's output kinds to its Parquet file
    (dense vectors stored as ``dense_dtype``); all are published together or none. Batches hold
    at most ``batch_size`` texts and ``token_budget`` padded tokens; ``tokenizer_workers``
    threads tokenize (:class:`pipeline.HostSettings` defaults for those left out).

    Returns ``{"shard", "start", "stop", "rows", "dim", "seconds", "passages_per_s"}``.
    Raises ``ValueError`` for a shard outside the corpus.
    """
    _check_dense_dtype(dense_dtype)
    _shard_rows(corpus_parquet, shard, shard_size)
    encoder = _load_encoder(spec, outputs, device, dtype, settings)
    host = base.host_settings(batch_size, token_budget, tokenizer_workers)
    return _encode_shard(encoder, corpus_parquet, shard, shard_size, outputs, spec, host, dense_dtype)


def encode_corpus_block(
    corpus_parquet: PathLike,
    block: str,
    shard_size: int,
    shard_files: Mapping[str, str],
    manifest: PathLike,
    spec: Mapping[str, Any],
    batch_size: int,
    device: str = "auto",
    dtype: str = "auto",
    dense_dtype: str = "float32",
    token_budget: int | None = None,
    tokenizer_workers: int | None = None,
    settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Encode the shards of ``block`` (``00010-00019``, :mod:`blocks`) that are not done yet, loading
    the model once (and only when some shard needs it); then write the block's ``manifest``.

    ``shard_files`` maps each of the family's output kinds to its shard file pattern, with
    ``{shard}`` for the shard's 5-digit number. Each shard is written as
    :func:`encode_corpus_shard` writes it, its files stamped with the settings' fingerprint, so a
    killed job, run again, resumes at its first unfinished shard. A shard counts as done only when
    its files are newer than the corpus and the (local) checkpoint.
    """
    _check_dense_dtype(dense_dtype)
    _check_outputs(spec, shard_files)
    block_range = shards.block_shards(block)
    last = schemas.num_chunks(corpus_parquet, shard_size) - 1
    if block_range.stop - 1 > last:
        raise ValueError(f"block {block} is out of range: {corpus_parquet} has shards 0 to {last} of {shard_size}")
    # the dtype the model will run in, not the setting: 'auto' is float32 on the CPU, bfloat16 on an H200
    used = _precision(spec, device, dtype)
    mark = blocks.fingerprint(spec, used, dense_dtype, shard_size)
    checkpoint = spec["checkpoint"]
    not_before = blocks.newest_mtime([corpus_parquet, *([checkpoint] if Path(checkpoint).exists() else [])])
    host = base.host_settings(batch_size, token_budget, tokenizer_workers)
    encoder: TransformerEncoder | None = None
    done: list[dict[str, Any]] = []
    started = time.perf_counter()
    files_of = {
        shard: {kind: pattern.format(shard=shards.shard_name(shard)) for kind, pattern in shard_files.items()}
        for shard in block_range
    }
    kept = _kept_from_earlier_release(
        spec, device, dtype, used, dense_dtype, shard_size, block, corpus_parquet, manifest, files_of, not_before
    )
    for shard in block_range:
        files = files_of[shard]
        start, stop = _shard_rows(corpus_parquet, shard, shard_size)
        if shard in kept.get("shards", ()) or blocks.shard_is_done(files.values(), mark, stop - start, not_before):
            log.info("shard %d: done before, kept", shard)
            done.append({"shard": shard, "rows": stop - start, "files": files, "encoded": False})
            continue
        if encoder is None:
            encoder = _load_encoder(spec, shard_files, device, dtype, settings)
            if encoder.precision != used:  # pragma: no cover - resolve_dtype decides both
                raise AssertionError(f"the model runs in {encoder.dtype}, the fingerprint says {used}")
        stats = _encode_shard(
            encoder,
            corpus_parquet,
            shard,
            shard_size,
            files,
            spec,
            host,
            dense_dtype,
            {blocks.FINGERPRINT_KEY: mark.encode()},
        )
        log.info(
            "shard %d: %d passages in %.1f s (%.0f/s)", shard, stats["rows"], stats["seconds"], stats["passages_per_s"]
        )
        done.append(
            {"shard": shard, "rows": stats["rows"], "files": files, "encoded": True, "seconds": stats["seconds"]}
        )
    dim = encoder.dim if encoder is not None else _stored_dim(done)
    facts = {
        "fingerprint": mark,
        "dtype": used,
        **({blocks.KEPT_KEY: kept} if kept else {}),
        "dim": dim,
        "device": str(encoder.device) if encoder is not None else None,
        "seconds": round(time.perf_counter() - started, 3),
    }
    if encoder is not None and not isinstance(encoder, TransformerEncoder):  # an API's: what it cost
        facts["api"] = encoder.usage.facts(float((settings or {}).get("price_per_million_tokens") or 0))
    blocks.write_manifest(manifest, block, done, **facts)
    encoded = sum(s["rows"] for s in done if s["encoded"])
    return {
        "block": block,
        "shards": len(done),
        "encoded_shards": sum(s["encoded"] for s in done),
        "passages_encoded": encoded,
        **facts,
    }


def _kept_from_earlier_release(
    spec: Mapping[str, Any],
    device: str,
    dtype: str,
    used: str,
    dense_dtype: str,
    shard_size: int,
    block: str,
    corpus_parquet: PathLike,
    manifest: PathLike,
    files_of: Mapping[int, Mapping[str, str]],
    not_before: float,
) -> dict[str, Any]:
    """The shards of a block stamped by a release before the resolved dtype was recorded (``encoder.dtype:
    auto`` stamped as ``auto``: :func:`blocks.earlier_fingerprint`) that stand as encoded in ``used``: those
    of a corpus whose block manifests say they were encoded on the device type this job runs on. Returns what
    the block's manifest records of them (:data:`blocks.KEPT_KEY`; empty for none). When they cannot stand,
    one warning line, before the model loads, says which shards are encoded again and why."""
    earlier = blocks.earlier_fingerprint(spec, dtype, dense_dtype, shard_size) if used != "api" else None
    if earlier is None:
        return {}
    found = []
    for shard, files in files_of.items():
        start, stop = _shard_rows(corpus_parquet, shard, shard_size)
        if blocks.shard_is_done(files.values(), earlier, stop - start, not_before):
            found.append(shard)
    if not found:
        return {}
    then = blocks.earlier_devices(Path(manifest).parent, earlier)
    now = base.resolve_device(device).type
    what = f"{len(found)} shard(s) of block {block} of {corpus_parquet} with {spec['checkpoint']}"
    if then == {now}:
        caveat = (
            " (on a GPU, auto is bfloat16 where the GPU has it natively, float16 on an older one such as a V100 "
            "or T4: if the shards were encoded on a GPU of the other kind, delete them to encode them again)"
            if now == "cuda"
            else ""
        )
        log.info(
            "%s, encoded by an earlier release with encoder.dtype auto on %s, are kept as %s, what auto gives "
            "here%s",
            what, now, used, caveat,
        )  # fmt: skip
        return {"fingerprint": earlier, "device": now, "shards": found}
    if then == {"cpu"}:
        why = f"auto gave float32 on the CPU they were encoded on, and gives {used} on {now} here"
    else:
        where = f"on {', '.join(sorted(then))}" if then else "on a device that no block manifest of the corpus records"
        why = f"they were encoded {where}, where auto may have given another dtype than the {used} it gives on {now}"
    log.warning(
        "%s, encoded by an earlier release with encoder.dtype auto (before the dtype it gave was recorded), are "
        "encoded again: %s",
        what, why,
    )  # fmt: skip
    return {}


def _stored_dim(done: Sequence[Mapping[str, Any]]) -> int | None:
    """The dense dimension of shards that were all done before (None without dense output)."""
    from miracl_eval.encoders.outputs import vector_dim

    for shard in done:
        if DENSE in shard["files"]:
            return vector_dim(shard["files"][DENSE])[1]
    return None


def encode_queries(
    queries_parquet: PathLike,
    outputs: Mapping[str, PathLike],
    spec: Mapping[str, Any],
    batch_size: int,
    device: str = "auto",
    dtype: str = "auto",
    token_budget: int | None = None,
    tokenizer_workers: int | None = None,
    settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Encode a queries Parquet file (``qid``, ``query``) as :func:`encode_corpus_shard` does a shard.

    Dense vectors are float32 (``schemas.dense_schema(dim, key="qid")``), lexical weights
    :data:`schemas.QUERY_SPARSE`. Returns ``{"rows", "dim", "seconds", "passages_per_s"}``.
    """
    n_rows = schemas.count_rows(queries_parquet)
    encoder = _load_encoder(spec, outputs, device, dtype, settings)
    host = base.host_settings(batch_size, token_budget, tokenizer_workers)
    batches = _iter_rows(queries_parquet, ["qid", "query"], 0, n_rows, host.window)
    return _write_encoded(
        encoder,
        batches,
        "qid",
        lambda batch: batch.column("query").to_pylist(),
        n_rows,
        outputs,
        "float32",
        "query",
        host,
        "encode queries",
        queries_parquet,
    )
