"""A dense model's query prompt: its ``query_template`` with ``{query}`` and ``{task}`` filled in.

A template is plain text with two placeholders, ``{query}`` (the query, required) and ``{task}`` (the
task instruction, ``query_instruction``), each replaced wherever it occurs; it holds no other braces. It
is not a Python format string: ``{{`` is no escape, and an unknown placeholder (``{lang}``, ``{}``) is an
error rather than text. Both are filled in one pass, so an instruction or a query that holds ``{query}``
or braces is put in as written.
"""

from __future__ import annotations

import re

QUERY, TASK = "{query}", "{task}"
PLACEHOLDERS = (QUERY, TASK)
_PLACEHOLDER = re.compile(r"\{(?:query|task)\}")
_BRACED = re.compile(r"\{[^{}]*\}")


def template_problem(template: str) -> str | None:
    """Why ``template`` is not a query template (a sentence), or None when it is one."""
    for double in ("{{", "}}"):
        if double in template:
            return (
                f"holds '{double}': a template is not a Python format string (no escapes); its placeholders are "
                "{query} and {task}, in single braces, and it holds no other braces"
            )
    for found in _BRACED.finditer(template):
        if found.group() not in PLACEHOLDERS:
            return f"has the placeholder {found.group()!r}; a template knows only {{query}} and {{task}}"
    rest = _PLACEHOLDER.sub("", template)
    for brace in "{}":
        if brace in rest:
            return f"holds a '{brace}' that is not part of {{query}} or {{task}} (a template holds no other braces)"
    if QUERY not in template:
        return "must contain '{query}' (where the query goes)"
    return None


def instruction_problem(instruction: str) -> str | None:
    """Why ``instruction`` cannot fill a template's ``{task}``, or None."""
    if not instruction.strip():
        return f"is {'empty' if not instruction else 'only whitespace'}: {{task}} would be left blank"
    return None


def query_text(template: str, query: str, instruction: str | None = None) -> str:
    """``template`` with every ``{query}`` replaced by ``query`` and every ``{task}`` by ``instruction``, in one
    pass (what either holds is put in as written)."""

    def fill(found: re.Match[str]) -> str:
        if found.group() == QUERY:
            return query
        if instruction is None:
            raise ValueError("the template has {task} and no instruction fills it")
        return instruction

    return _PLACEHOLDER.sub(fill, template)
