"""The library's layout: its layers in the order data flows through them (imports point down this order or
into shared infrastructure, never across or up: ``tests/unit/test_layers.py`` checks it), and the tables the
architecture page shows of it: each rule file with its rules and the library modules its code lives in, and
each subpackage, what it holds (its docstring) and the rules whose code lives in it (from the rules' scripts,
as Snakemake parses the workflow)."""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from pathlib import Path

from miracl_eval.manual.markdown import cell, code, table
from miracl_eval.manual.workflow import Workflow, library_calls, stage_function

#: shared infrastructure: the top-level modules, importable from anywhere
INFRASTRUCTURE = frozenset({"errors", "atomic", "tsv", "ids", "schemas", "shards", "runs", "types"})
#: each subpackage's layer; a module may import its own subpackage, infrastructure, or a lower layer
LAYERS: Mapping[str, int] = {
    "jobs": 1,
    "inputs": 2,
    "encoders": 3,
    "rerankers": 4,  # models like the encoders, below the config that validates their settings
    "config": 5,
    "offline": 5,
    "lucene": 6,
    "faiss": 6,
    "fusion": 7,
    "evaluation": 8,
    "report": 9,
    "manual": 10,  # the docs' generated pages: they read every stage's code and data
}


def summary(package: Path) -> str:
    """The first paragraph of a package's docstring (a module's, for a ``.py`` path), on one line, its
    Sphinx roles (``:mod:`.base```) as plain code."""
    path = package / "__init__.py" if package.is_dir() else package
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    text = " ".join(doc.split("\n\n")[0].split())
    return re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", text)


def rules_by_subpackage(repo: Path, parsed: Workflow) -> dict[str, list[str]]:
    """The rules whose stage function (:func:`~miracl_eval.manual.workflow.stage_function`, else every library
    function its script imports) lives in each subpackage."""
    found: dict[str, list[str]] = {}
    for rule in parsed.rules:
        if not rule.script:
            continue
        stage = stage_function(repo / rule.script)
        for call in [stage] if stage else library_calls(repo / rule.script):
            parts = call.split(".")
            if len(parts) > 2 and parts[1] in LAYERS and rule.name not in found.setdefault(parts[1], []):
                found[parts[1]].append(rule.name)
    return found


_IMPORT = re.compile(r"^from (miracl_eval[\w.]*) import (\([^)]*\)|[^\n]*)", re.MULTILINE)


def imported_modules(repo: Path, text: str) -> list[str]:
    """The library modules a rule file's text imports from (``from miracl_eval.jobs import requests``: the
    module ``miracl_eval.jobs.requests``), each once, in order."""
    found: list[str] = []
    for match in _IMPORT.finditer(text):
        package, names = match.group(1), match.group(2).strip("()")
        for name in (n.split(" as ")[0].strip() for n in names.split(",")):
            module = f"{package}.{name}" if name else package
            path = repo / Path(*module.split("."))
            found.append(module if path.with_suffix(".py").is_file() or path.is_dir() else package)
    return list(dict.fromkeys(found))


def _stage_modules(repo: Path, script: str) -> list[str]:
    """The library modules a rule's script runs: its stage function's, else those of every function it imports."""
    stage = stage_function(repo / script)
    return [call.rsplit(".", 1)[0] for call in ([stage] if stage else library_calls(repo / script))]


def stages_table(repo: Path, parsed: Workflow) -> str:
    """The architecture page's table of the ``Snakefile`` and the rule files, in the order it includes them: each
    one's rules, the library modules their scripts run, and the library modules the file itself imports (for the
    config, its shared names, input functions and requests; ``rules/common/`` holds only those)."""
    rows = []
    for file in ["Snakefile", *parsed.files]:
        rules = [r for r in parsed.rules if r.file == file]
        runs = list(dict.fromkeys(m for r in rules if r.script for m in _stage_modules(repo, r.script)))
        imports = imported_modules(repo, (repo / file).read_text(encoding="utf-8"))
        rows.append(
            [
                code(file),
                ", ".join(f"[`{r.name}`](../reference/rules.md#{r.name})" for r in rules) or "(none)",
                ", ".join(code(m) for m in runs) or "(none)",
                ", ".join(code(m) for m in imports) or "(none)",
            ]
        )
    return table(("rule file", "rules", "their scripts run", "the rule file imports"), rows)


def layout_table(repo: Path, parsed: Workflow) -> str:
    """The architecture page's table: layer, subpackage, what it holds, its rules."""
    library = repo / "miracl_eval"
    rules = rules_by_subpackage(repo, parsed)
    rows = []
    for name, layer in sorted(LAYERS.items(), key=lambda item: (item[1], item[0])):
        names = rules.get(name, [])
        shown = ", ".join(f"[`{r}`](../reference/rules.md#{r})" for r in names) or "(none)"
        rows.append([str(layer), code(f"miracl_eval/{name}/"), cell(summary(library / name)), shown])
    infrastructure = ", ".join(code(f"{m}.py") for m in sorted(INFRASTRUCTURE))
    return (
        table(("layer", "subpackage", "what it holds", "rules whose code it holds"), rows)
        + f"\nShared infrastructure, importable from every layer: {infrastructure} (`miracl_eval/`).\n"
    )
