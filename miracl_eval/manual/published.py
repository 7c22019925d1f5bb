"""The published numbers' pages: what ships in ``data/published`` (every file's sources, systems, measures and
count of numbers, read with the workflow's own parser) beside its ``SOURCES.md``, and the reference sizes of
the full data (``data/reference``) beside theirs."""

from __future__ import annotations

from collections.abc import Sequence

from miracl_eval.evaluation.comparability import (
    CORPORA_COLUMNS,
    CORPORA_FILE,
    REFERENCE_DIR,
    TOPICS_COLUMNS,
    TOPICS_FILE,
)
from miracl_eval.evaluation.published import (
    FILES,
    NOTE_COLUMNS,
    NOTES_FILE,
    PACKAGE_DIR,
    data_dir,
    load_notes,
    load_published,
)
from miracl_eval.manual.markdown import cell, code, table
from miracl_eval.tsv import data_rows


def _without_title(markdown: str) -> str:
    """A document without its first-level title (the page has its own)."""
    lines = markdown.splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return "\n".join(lines).strip() + "\n"


def _names(values: Sequence[str], limit: int = 8) -> str:
    unique = list(dict.fromkeys(values))
    shown = ", ".join(cell(v) for v in unique[:limit])
    return shown + (f" and {len(unique) - limit} more" if len(unique) > limit else "")


def published_page() -> str:
    """``reference/published.md``."""
    rows = []
    total = 0
    for name in FILES:
        numbers = load_published([name])
        total += len(numbers)
        # a system per partition (pyserini's bm25.ar, bm25.bn, ...) is one system
        systems = [r.system.removesuffix(f".{r.partition}") + (".{lang}" if r.system.endswith(f".{r.partition}") else "")
                   for r in numbers]  # fmt: skip
        data = ", ".join(dict.fromkeys(f"{r.dataset} {r.split}" for r in numbers))
        rows.append(
            [
                code(name),
                ", ".join(code(s) for s in dict.fromkeys(r.source_id for r in numbers)),
                _names(systems, 6),
                _names([r.measure for r in numbers]),
                f"{len(numbers)} ({data}, {len({r.partition for r in numbers})} partitions)",
            ]
        )
    notes = [[code(source), cell(system), cell(note)] for (source, system), note in load_notes().items()]
    sources = data_dir().joinpath("SOURCES.md").read_text(encoding="utf-8")
    return (
        "# Published numbers\n\n"
        f"{total:,} published numbers ship with the workflow in `miracl_eval/{PACKAGE_DIR}/`, each as printed by its "
        "source. A run puts one beside its own number only where the run has the same data "
        "([comparability](../outputs/verdicts.md)) and the same settings, and gives it a verdict. The tables "
        "below are read from the files with the workflow's own parser at every build of the docs; the sources "
        "follow, as `SOURCES.md` gives them.\n\n"
        "## What ships\n\n"
        + table(("file", "source ids", "systems", "measures", "numbers"), rows)
        + f"\n## Notes shown beside them\n\n`{NOTES_FILE}`: a note a reader must see beside a published number "
        "(`*`: every system of the source).\n\n" + table(NOTE_COLUMNS, notes) + "\n" + _without_title(sources)
    )


def _reference_rows(name: str, columns: Sequence[str]) -> list[dict[str, str]]:
    text = data_dir(REFERENCE_DIR).joinpath(name).read_text(encoding="utf-8")
    return [rec for _, rec in data_rows(text, f"miracl_eval/{REFERENCE_DIR}/{name}", columns)]


def _count(text: str) -> str:
    return f"{int(text):,}" if text.isdigit() else text


def reference_sizes_page() -> str:
    """``reference/reference-sizes.md``."""
    corpora = _reference_rows(CORPORA_FILE, CORPORA_COLUMNS)
    topics = _reference_rows(TOPICS_FILE, TOPICS_COLUMNS)
    sources = data_dir(REFERENCE_DIR).joinpath("SOURCES.md").read_text(encoding="utf-8")
    counts = ("queries", "judgements", "relevant", "judged_passages")
    parts = [
        "# Reference sizes of the full data\n\n",
        "A published number is put beside a run's only when the partition has the full data it was computed on: "
        "its passages, queries, judgements, relevant judgements and judged passages are compared with these "
        f"sizes, and the fingerprints of its query ids and judgements with the full files' "
        f"(`miracl_eval/{REFERENCE_DIR}/`; see [verdicts and comparability](../outputs/verdicts.md)). The "
        "tables are read from the files at every build of the docs; `-` is unknown (not checked).\n\n",
        "## Corpora\n\n",
        table(
            ("dataset", "corpus", "passages", "source"),
            ([code(r["dataset"]), code(r["corpus"]), _count(r["passages"]), cell(r["source"])] for r in corpora),
        ),
        "\n## Topics and judgements\n\n",
        table(
            ("dataset", "version", "split", "partition", *counts, "source"),
            (
                [
                    code(r["dataset"]),
                    cell(r["version"]),
                    cell(r["split"]),
                    code(r["partition"]),
                    *(_count(r[c]) for c in counts),
                    cell(r["source"].replace(";", ", ")),
                ]
                for r in topics
            ),
        ),  # fmt: skip
        "\n",
        _without_title(sources),
    ]
    return "".join(parts)
