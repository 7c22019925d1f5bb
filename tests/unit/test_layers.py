"""The library's layering: imports point down the pipeline or into shared infrastructure."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

LIBRARY = Path(__file__).resolve().parents[2] / "miracl_eval"
#: shared infrastructure: the top-level modules, importable from anywhere
INFRASTRUCTURE = {"errors", "atomic", "tsv", "ids", "schemas", "shards", "runs", "types"}
#: each subpackage's layer; a module may import its own subpackage, infrastructure, or a lower layer
LAYERS = {
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
}


def _home(module: str) -> str:
    """``miracl_eval.fusion.scores`` -> ``fusion``; ``miracl_eval.runs`` -> ``runs``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _library_imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("miracl_eval"):
            if node.module == "miracl_eval":
                found += [(node.lineno, f"miracl_eval.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("miracl_eval.")]
        elif isinstance(node, ast.ImportFrom) and node.level:
            found.append((node.lineno, "relative"))
    return found


def violations(library: Path = LIBRARY) -> list[str]:
    problems = []
    for path in sorted(library.rglob("*.py")):
        rel = path.relative_to(library)
        home = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        for line, module in _library_imports(path):
            where = f"miracl_eval/{rel}:{line}"
            if module == "relative":
                problems.append(f"{where}: a relative import (the layering is checked on absolute ones)")
                continue
            target = _home(module)
            if target == home or target in INFRASTRUCTURE or target == "":
                continue
            if home in INFRASTRUCTURE:
                problems.append(f"{where}: infrastructure imports {module}")
            elif target not in LAYERS:
                problems.append(f"{where}: {module} is in no layer")
            elif LAYERS[target] >= LAYERS[home]:
                side = "across" if LAYERS[target] == LAYERS[home] else "up"
                problems.append(f"{where}: {home} imports {side} to {module}")
    return problems


def test_every_subpackage_has_a_layer():
    packages = {p.name for p in LIBRARY.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(LAYERS)
    modules = {p.stem for p in LIBRARY.glob("*.py")} - {"__init__"}
    assert modules == INFRASTRUCTURE


def test_imports_point_down_or_into_infrastructure():
    assert violations() == []


def test_the_check_finds_an_import_up_and_across(tmp_path: Path):
    lib = tmp_path / "miracl_eval"
    for package, body in {
        "inputs": "from miracl_eval.report.html import html_page\n",  # up
        "lucene": "from miracl_eval.faiss.search import dense_search\n",  # across
        "fusion": "from miracl_eval.lucene.bm25 import bm25_search\nfrom miracl_eval import runs\n",  # down: fine
    }.items():
        (lib / package).mkdir(parents=True)
        (lib / package / "__init__.py").write_text("")
        (lib / package / "mod.py").write_text(body)
    (lib / "runs.py").write_text("from miracl_eval.fusion.mod import x\n")  # infrastructure importing a stage
    found = violations(lib)
    assert len(found) == 3, found
    assert any("inputs imports up" in p for p in found)
    assert any("lucene imports across" in p for p in found)
    assert any("infrastructure imports" in p for p in found)


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_each_subpackage_is_documented(package: str):
    assert ast.get_docstring(ast.parse((LIBRARY / package / "__init__.py").read_text(encoding="utf-8")))
