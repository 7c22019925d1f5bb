"""Report page: the settings a reader needs to interpret the numbers, with the corpus sizes and the
number of encoding shards.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from miracl_eval import schemas
from miracl_eval.atomic import write_text_atomic
from miracl_eval.encoders.checkpoints import FETCH_RECORD, fetched_commit
from miracl_eval.report.html import html_page, html_table
from miracl_eval.tsv import format_tsv
from miracl_eval.types import PathLike

SETTINGS_COLUMNS: tuple[str, ...] = ("section", "setting", "value")


def format_setting(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, Mapping):
        return "; ".join(f"{k}={format_setting(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(format_setting(v) for v in value)
    return str(value)


def settings_rows(
    settings: Mapping[str, Mapping[str, object]],
    corpora: Mapping[str, PathLike] | None = None,
    shard_size: int | None = None,
) -> list[dict[str, str]]:
    """Rows (section, setting, value) of the settings, then one row per corpus: its passages and,
    with ``shard_size``, the number of encoding shards (as the workflow computes it)."""
    rows = [
        {"section": section, "setting": key, "value": format_setting(value)}
        for section, items in settings.items()
        for key, value in items.items()
    ]
    for corpus, path in (corpora or {}).items():
        n = schemas.count_rows(path)
        value = f"{n} passages"
        if shard_size:
            shards = max(1, schemas.num_chunks(path, shard_size))  # as the workflow counts them
            value += f", {shards} encoding shard{'s' if shards != 1 else ''} of up to {shard_size}"
        rows.append({"section": "corpus", "setting": corpus, "value": value})
    return rows


def with_commits(
    settings: Mapping[str, Mapping[str, object]], fetched: Mapping[str, PathLike]
) -> dict[str, dict[str, object]]:
    """The settings with the commit each fetched hub model or reranker holds (its folder's fetch record):
    ``fetched`` maps ``models.{name}.commit`` / ``rerankers.{name}.commit`` to the folder, the row joins its
    section (``model {name}``, ``reranker {name}``)."""
    out = {section: dict(items) for section, items in settings.items()}
    for key, folder in fetched.items():
        kind, name = key.split(".")[:2]
        section = f"{kind.removesuffix('s')} {name}"
        commit = fetched_commit(folder) or f"unknown ({folder} has no {FETCH_RECORD} naming it)"
        out.setdefault(section, {})[key] = commit
    return out


def settings_html(rows: Sequence[Mapping[str, str]], title: str) -> str:
    table = html_table(
        ["section", "setting", "value"],
        [[r["section"], r["setting"], r["value"]] for r in rows],
        text_columns=(0, 1, 2),
    )
    return html_page(title, table, "The settings these numbers were computed with.")


def settings_stage(
    settings: Mapping[str, Mapping[str, object]],
    corpora: Sequence[PathLike],
    corpus_names: Sequence[str],
    shard_size: int | None,
    tsv_out: PathLike,
    html_out: PathLike,
    dataset: str = "",
    version: str | None = None,
    fetched: Mapping[str, PathLike] | None = None,
) -> dict[str, int]:
    """Stage entry point: the settings as TSV (:data:`SETTINGS_COLUMNS`) and HTML; ``version``, the
    release of the topics and qrels the run used (:func:`miracl_eval.inputs.download.read_version`), is
    added to the ``data`` section, and the commit of each fetched hub checkpoint (``fetched``,
    :func:`with_commits`) to its model's or reranker's."""
    release = version or "unknown (local files; declare it with hub.messirve_version)"
    settings = with_commits({**settings, "data": {**settings.get("data", {}), "version": release}}, fetched or {})
    rows = settings_rows(settings, dict(zip(corpus_names, corpora, strict=True)), shard_size)
    write_text_atomic(tsv_out, format_tsv(SETTINGS_COLUMNS, rows))
    write_text_atomic(html_out, settings_html(rows, f"Run settings — {dataset}" if dataset else "Run settings"))
    return {"rows": len(rows)}
