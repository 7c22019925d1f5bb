"""The generated pages by their path under ``docs/``, and the generated parts of hand-written pages (a marker
``<!-- generated: NAME -->`` on a line of its own): what ``docs/hooks.py`` puts into the site at every build."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path

from miracl_eval.manual.config_keys import config_page
from miracl_eval.manual.layout import layout_table, stages_table
from miracl_eval.manual.presets import models_page, rerankers_page
from miracl_eval.manual.published import published_page, reference_sizes_page
from miracl_eval.manual.workflow import Workflow, parse_all, rules_page

#: the repository (the workflow's ``Snakefile`` beside the library)
REPO = Path(__file__).resolve().parents[2]

#: the line every generated page ends with
FOOTER = (
    "\n---\n\n*Generated at every build of the docs from the code and data it describes "
    "(`miracl_eval/manual/`): edit those, not this page.*\n"
)
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)


@cache
def workflow() -> Workflow:
    """The workflow as Snakemake parses it (once per build: the rules page and the layout table share it)."""
    return parse_all(REPO)


def repository_document(relative: str) -> str:
    """A Markdown file of the repository as a docs page: its links to other files of the repository (which
    the site does not hold) become the file's name in code; web links and anchors stay."""
    path = REPO / relative

    def detach(match: re.Match[str]) -> str:
        text, target = match.group(1), match.group(2)
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            return match.group(0)
        file = os.path.normpath(os.path.join(os.path.dirname(relative), target.split("#", 1)[0]))
        return text if file in text else f"{text} (`{file}`)"

    return _LINK.sub(detach, path.read_text(encoding="utf-8"))


def rules_page_for(parsed: Workflow) -> str:
    """The rules page of a parsed workflow (of this repository)."""
    return rules_page(REPO, parsed)


#: each generated page's path under ``docs/`` and the function that writes it
GENERATED: dict[str, Callable[[], str]] = {
    "reference/config.md": config_page,
    "reference/models.md": models_page,
    "reference/rerankers.md": rerankers_page,
    "reference/published.md": published_page,
    "reference/reference-sizes.md": reference_sizes_page,
    "reference/rules.md": lambda: rules_page(REPO, workflow()),
    "development/benchmark-results.md": lambda: repository_document("benchmarks/RESULTS.md"),
}

#: the generated parts of hand-written pages, by marker name
PARTS: dict[str, Callable[[], str]] = {
    "layout": lambda: layout_table(REPO, workflow()),
    "stages": lambda: stages_table(REPO, workflow()),
}


def generated_pages() -> dict[str, str]:
    """Every generated page's Markdown, by its path under ``docs/``."""
    return {path: write() + FOOTER for path, write in GENERATED.items()}


def fill_parts(markdown: str) -> str:
    """``markdown`` with each marker line replaced by its generated part; an unknown marker is an error."""

    def part(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in PARTS:
            raise KeyError(f"no generated part {name!r} (known: {', '.join(PARTS)})")
        return PARTS[name]()

    return MARKER.sub(part, markdown)
