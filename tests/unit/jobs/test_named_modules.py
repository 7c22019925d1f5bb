"""Modules named by strings (preload calls, preload lists) exist and hold what they are called for."""

from __future__ import annotations

import ast
import importlib
import importlib.util

import pytest

from tests.helpers import REPO


def _calls() -> list[tuple[str, str, str]]:
    """``(script, module, function)`` of every ``Call("module", "function", ...)`` in scripts/."""
    found = []
    for path in sorted((REPO / "scripts").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Call":
                module, function = (a.value for a in node.args[:2] if isinstance(a, ast.Constant))
                found.append((path.name, module, function))
    return found


def test_the_scripts_name_their_preloaded_stages():
    """Every Python stage's script hands a named call to run_stage (so that it can be preloaded); the
    Lucene stages, whose JVM cannot be forked, and the report pages call their stage directly."""
    assert {script for script, _, _ in _calls()} == {
        f"{name}.py"
        for name in (
            "encode_corpus_block", "encode_queries", "fetch_model", "rerank_components", "union_components", "fuse", "hybrid",
            "dense_index", "dense_search", "dense_block_search", "dense_merge", "preprocess_corpus", "preprocess_topics", "evaluate", "judged_not_in_corpus",
            "reranker_scores", "reranked_run",
        )
    }  # fmt: skip


@pytest.mark.parametrize(("script", "module", "function"), _calls())
def test_a_preloaded_call_names_a_function_that_exists(script: str, module: str, function: str):
    assert callable(getattr(importlib.import_module(module), function, None)), f"{script}: {module}.{function}"


@pytest.mark.parametrize(
    "module",
    [
        "miracl_eval.encoders.encode",
        "miracl_eval.fusion.components",
        "miracl_eval.fusion.hybrids",
        "miracl_eval.faiss.index",
        "miracl_eval.faiss.search",
        "miracl_eval.evaluation.metrics",
    ],
)
def test_every_preload_list_names_importable_modules(module: str):
    names = importlib.import_module(module).PRELOAD
    assert names
    for name in names:
        assert importlib.util.find_spec(name) is not None, f"{module}.PRELOAD names {name!r}"


def test_the_scripts_import_only_modules_that_exist():
    for path in sorted((REPO / "scripts").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("miracl_eval"):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{path.name}: {node.module}.{alias.name}"


def test_a_missing_name_is_found():
    """The checks above fail on a stage that does not exist."""
    with pytest.raises(AssertionError):
        test_a_preloaded_call_names_a_function_that_exists("x.py", "miracl_eval.encoders.encode", "no_such_stage")
