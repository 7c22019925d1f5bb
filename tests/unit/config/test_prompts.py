"""A dense model's query prompt (``query_template``, ``query_instruction``): what a template may hold, what an
instruction may be, and that both are put in as written."""

from __future__ import annotations

import pytest

from miracl_eval.config.validate import fill_query_instruction, validate
from miracl_eval.encoders.prompts import query_text
from miracl_eval.errors import ConfigError

OWN = {"family": "dense", "checkpoint": "org/model", "pooling": "last", "normalize": True}


def model(**settings: object) -> dict:
    cfg = validate({"languages": ["sw"], "models": {"m": {**OWN, **settings}}, "methods": ["m/dense"]})
    return cfg["models"]["m"]


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("Instruct: {task}", "must contain '{query}'"),
        ("", "must contain '{query}'"),
        ("{Query}", "has the placeholder '{Query}'; a template knows only {query} and {task}"),
        ("{query} in {lang}", "has the placeholder '{lang}'"),
        ("{} {query}", "has the placeholder '{}'"),
        ("{query!r}", "has the placeholder '{query!r}'"),
        ("{{query}}", "holds '{{': a template is not a Python format string"),
        ("{task}: {query}}}", "holds '}}'"),
        ("{query} }", "holds a '}' that is not part of {query} or {task}"),
        ("{query {task}", "holds a '{' that is not part of {query} or {task}"),
    ],
)
def test_a_template_holds_its_two_placeholders_and_no_other_braces(template: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        model(query_template=template)
    assert err.value.key == "models.m.query_template" and message in err.value.reason


def test_placeholders_are_filled_in_one_pass_as_written() -> None:
    """Every {query} is the query (twice if written twice); what an instruction or a query holds, braces and
    placeholders included, is put in as written (an instruction holding {query} used to get the query)."""
    assert query_text("{query} | {query}", "q") == "q | q"
    template = "Instruct: {task}\nQuery: {query}"
    assert (
        query_text(template, "what is {task}?", "find {query} {x}")
        == "Instruct: find {query} {x}\nQuery: what is {task}?"
    )
    spec = model(query_template=template, query_instruction="Find the {query}\nin two lines")
    assert spec["query_instruction"] == "Find the {query}\nin two lines"  # newlines and braces kept

    encoders = pytest.importorskip("miracl_eval.encoders.dense")
    encoder = encoders.DenseEncoder.__new__(encoders.DenseEncoder)  # its texts need no weights
    encoder.spec = spec
    assert encoder.prepare(["¿qué es {x}?"], "query") == [
        "Instruct: Find the {query}\nin two lines\nQuery: ¿qué es {x}?"
    ]


@pytest.mark.parametrize(("instruction", "word"), [("", "is empty"), (" \n\t", "is only whitespace")])
def test_an_instruction_fills_task_with_something(instruction: str, word: str) -> None:
    with pytest.raises(ConfigError) as err:
        model(query_template="{task}: {query}", query_instruction=instruction)
    assert err.value.key == "models.m.query_instruction" and word in err.value.reason
    with pytest.raises(ConfigError, match=r"models\.e5-mistral-7b\.query_instruction.*is empty"):
        validate({"languages": ["sw"], "models": {"e5-mistral-7b": {"query_instruction": ""}}})


def test_a_task_template_on_a_dataset_without_an_instruction_asks_for_one() -> None:
    spec = {"query_template": "{task}: {query}", "query_instruction": None}
    with pytest.raises(ConfigError) as err:
        fill_query_instruction(spec, "", "models.m", "my-data")
    assert err.value.key == "models.m.query_instruction"
    assert "my-data has no task instruction to put there: give one here" in err.value.reason
    fill_query_instruction(spec | {"query_instruction": "Find it"}, "", "models.m", "my-data")  # given: fine


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"query_instruction": "Find \udc80 it", "query_template": "{task}: {query}"}, "models.m.query_instruction"),
        ({"query_template": "\ud800{query}"}, "models.m.query_template"),
        ({"query_prefix": "query:\udfff "}, "models.m.query_prefix"),
    ],
)
def test_unpaired_surrogates_name_their_key(settings: dict, key: str) -> None:
    """YAML's "\\ud800" escape gives half of a UTF-16 pair, which no file (nor a tokenizer's UTF-8) can hold."""
    with pytest.raises(ConfigError) as err:
        model(**settings)
    assert err.value.key == key and "unpaired surrogate" in err.value.reason
