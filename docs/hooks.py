"""mkdocs hooks (``hooks:`` in mkdocs.yml): the generated pages (:mod:`miracl_eval.manual`) join the site at
every build, so a change to the schema, a preset, a published file or a rule changes the docs with it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # this checkout's library, whichever one is installed


def on_files(files: Any, config: Any) -> Any:
    """Add (or replace) every generated page."""
    from mkdocs.structure.files import File

    from miracl_eval.manual.pages import generated_pages

    for path, text in generated_pages().items():
        existing = files.get_file_from_path(path)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, path, content=text))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Fill in the generated parts of a hand-written page (``<!-- generated: NAME -->``)."""
    from miracl_eval.manual.pages import fill_parts

    return fill_parts(markdown)
