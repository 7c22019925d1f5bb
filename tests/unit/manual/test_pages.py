"""The guides show what works: every file a page includes exists (with the part it names), every sample
config a page includes is run by a test, every YAML block written in a page is a valid configuration, and
every generated page and part has its place in the site."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from miracl_eval.config.validate import validate
from miracl_eval.errors import ConfigError
from miracl_eval.manual.pages import GENERATED, MARKER, PARTS
from tests.helpers import REPO

DOCS = REPO / "docs"
#: an include of pymdownx.snippets: ``--8<-- "path"`` or ``--8<-- "path:section"`` at the start of a line
INCLUDE = re.compile(r'^\s*--8<-- "([^":]+)(?::([\w-]+))?"\s*$', re.MULTILINE)
#: a fenced YAML block written in a page (``yaml`` or ``yaml title="..."``)
YAML_BLOCK = re.compile(r"^```yaml[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def includes(root: Path = DOCS) -> list[tuple[Path, str, str | None]]:
    """``(page, path, section)`` of every include of every page under ``root``."""
    return [(page, m.group(1), m.group(2)) for page in sorted(root.rglob("*.md")) for m in INCLUDE.finditer(page.read_text(encoding="utf-8"))]  # fmt: skip


def missing_includes(root: Path = DOCS, repo: Path = REPO) -> list[str]:
    problems = []
    for page, path, section in includes(root):
        target = repo / path
        if not target.is_file():
            problems.append(f"{page.name}: {path} does not exist")
        elif section and f"--8<-- [start:{section}]" not in target.read_text(encoding="utf-8"):
            problems.append(f"{page.name}: {path} has no part {section!r}")
    return problems


def test_every_included_file_and_part_exists() -> None:
    assert includes(), "no page includes a file"
    assert missing_includes() == []


def test_the_check_finds_a_missing_file_and_part(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "p.md").write_text('--8<-- "sample/nope.yaml"\n--8<-- "sample/miracl.yaml:nope"\n')
    (tmp_path / "sample").mkdir()
    (tmp_path / "sample" / "miracl.yaml").write_text("dataset: miracl\n")
    assert missing_includes(tmp_path / "docs", tmp_path) == [
        "p.md: sample/nope.yaml does not exist",
        "p.md: sample/miracl.yaml has no part 'nope'",
    ]


def _named_by_tests() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted((REPO / "tests").rglob("*.py")))


def test_every_sample_config_a_page_includes_is_run_by_a_test() -> None:
    """A sample config (``sample/*.yaml``) that a guide shows is named by a workflow test that runs it (or, for
    the demo's, by the Makefile's ``make run``, which CI runs)."""
    named = _named_by_tests()
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    shown = sorted({path for _, path, _ in includes() if path.startswith("sample/") and path.endswith(".yaml")})
    assert shown
    unrun = [p for p in shown if Path(p).name not in named and f"--configfile {p}" not in makefile]
    assert unrun == []


def test_every_configfile_a_page_names_exists() -> None:
    named = {
        m
        for page in pages()
        for m in re.findall(r"--configfile ((?:[\w./-]+\.yaml ?)+)", page.read_text(encoding="utf-8"))
    }
    files = {f for group in named for f in group.split()}
    assert "sample/your_model.yaml" in files
    ours = [f for f in files if f.startswith(("sample/", "profiles/")) or f in ("config.yaml", "scale.yaml")]
    assert [f for f in ours if not (REPO / f).is_file()] == []  # the reader's own (my.yaml, exp2.yaml) aside


def yaml_blocks() -> list[tuple[str, str]]:
    """``(page, block)`` of every YAML block written in a page (an include is checked as a file)."""
    found = []
    for page in pages():
        for block in YAML_BLOCK.findall(page.read_text(encoding="utf-8")):
            if not INCLUDE.search(block):
                found.append((str(page.relative_to(DOCS)), block))
    return found


@pytest.mark.parametrize(("page", "block"), yaml_blocks(), ids=[p for p, _ in yaml_blocks()])
def test_every_yaml_block_written_in_a_page_is_a_valid_config(page: str, block: str) -> None:
    config = yaml.safe_load(block)
    assert isinstance(config, dict), page
    config.setdefault("languages", ["sw", "yo"])
    try:
        validate(config)
    except ConfigError as err:
        pytest.fail(f"{page}: {err}")


def test_a_bad_block_is_found() -> None:
    with pytest.raises(ConfigError):
        validate({"languages": ["sw"], "models": {"x": {"family": "dense", "checkpoint": "c", "pooling": "median"}}})


def test_every_generated_page_and_part_has_its_place() -> None:
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8").replace("!!python", "#"))["nav"]
    flat = yaml.safe_dump(nav)
    assert all(path in flat for path in GENERATED)
    assert not any((DOCS / path).exists() for path in GENERATED), "a generated page is also written by hand"
    used = {m.group(1) for page in pages() for m in MARKER.finditer(page.read_text(encoding="utf-8"))}
    assert used == set(PARTS)
