"""The library's layering: imports point down the pipeline or into shared infrastructure, and no module
imports itself back through others (no import cycle, however the import is hidden)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from miracl_eval.manual.layout import INFRASTRUCTURE, LAYERS

LIBRARY = Path(__file__).resolve().parents[2] / "miracl_eval"


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


def _module_name(library: Path, path: Path) -> str:
    """``miracl_eval/fusion/scores.py`` -> ``miracl_eval.fusion.scores``; a package's ``__init__`` -> the package."""
    parts = [library.name, *path.relative_to(library).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(library: Path = LIBRARY) -> dict[str, set[str]]:
    """Every library module's imports of other library modules: every import statement wherever it is
    (at the top, in a function, under ``TYPE_CHECKING``), since an import moved into a function hides a
    cycle without removing it. ``from miracl_eval.x import y`` names the module ``miracl_eval.x.y`` when
    there is one, else ``miracl_eval.x``."""
    paths = {_module_name(library, p): p for p in sorted(library.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == library.name:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    found.add(sub if sub in paths else node.module)
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in paths}
        graph[module] = {m for m in found if m in paths and m != module}
    return graph


def import_cycles(library: Path = LIBRARY) -> list[list[str]]:
    """Each import cycle among the library's modules, as the path around it (``a -> b -> a``), once."""
    graph = import_graph(library)
    cycles: list[list[str]] = []
    seen: set[frozenset[str]] = set()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycle = path[path.index(target) :]
                if frozenset(cycle) not in seen:
                    seen.add(frozenset(cycle))
                    cycles.append([*cycle, target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return cycles


def test_no_import_cycles():
    assert [" -> ".join(c) for c in import_cycles()] == []


def test_the_cycle_check_finds_cycles_hidden_in_functions_and_type_checking(tmp_path: Path):
    lib = tmp_path / "miracl_eval"
    for name, body in {
        "a/__init__.py": "",
        "a/one.py": "from miracl_eval.a.two import f\n",
        "a/two.py": "def f():\n    from miracl_eval.a.one import g\n",  # a cycle through a function-level import
        "b/__init__.py": "",
        "b/x.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from miracl_eval.b import y\n",
        "b/y.py": "import miracl_eval.b.x\n",  # a cycle through a TYPE_CHECKING import, by module name
        "c/__init__.py": "",
        "c/p.py": "from miracl_eval.c.q import h\n",
        "c/q.py": "from miracl_eval import errors\n",  # no cycle
        "errors.py": "",
    }.items():
        (lib / name).parent.mkdir(parents=True, exist_ok=True)
        (lib / name).write_text(body)
    found = {" -> ".join(c) for c in import_cycles(lib)}
    assert found == {
        "miracl_eval.a.one -> miracl_eval.a.two -> miracl_eval.a.one",
        "miracl_eval.b.x -> miracl_eval.b.y -> miracl_eval.b.x",
    }, found


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
