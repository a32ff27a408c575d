"""Code mode's error positions are the script's own line and column, wherever the error is (start, middle or
end of a one- or a multi-line script), whether the engine found it parsing or running the script: the engine
runs the script inside an opening and a closing of its own, which no position may show."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

CASES = [  # script, (type, line, column), the place named
    ("return 1 +", ("script_error", 1, 11), "a one-line script that ends too early: just past its end"),
    ("return 1 +\n\n", ("script_error", 1, 11), "the same with blank lines after it"),
    ("return (1;", ("script_error", 1, 10), "one line, the middle"),
    (")", ("script_error", 1, 1), "one line, the start"),
    ("let a = 1;\nlet b = a +", ("script_error", 2, 12), "the end of two lines"),
    ("let a = 1;\nif (a) {\n  a = 2;", ("script_error", 3, 9), "an open block at the end of three lines"),
    ("let a = 1;\n  let b = ;\nreturn a", ("script_error", 2, 11), "the middle of three lines"),
    ("let a = 1; null.x", ("script_error", 1, 12), "a runtime error in the middle of one line"),
    ("null.x", ("script_error", 1, 1), "a runtime error at the start of one line"),
    ("let a = 1;\nreturn a.b.c", ("script_error", 2, 8), "a runtime error at the end of two lines"),
    ("let a = 1; await 0;\nthrow new Error('x')", ("script_error", 2, 11), "a throw after an await"),
    ("let a = 1;\n  JSON.parse('{')", ("script_error", 2, 8), "a runtime error in a text JSON.parse read"),
    ("let a = 1;\n\nawait tools.nope__x({})", ("tool_error", 3, None), "a failed call: its line"),
]


@pytest.mark.parametrize(("script", "where", "case"), CASES, ids=[c[2] for c in CASES])
async def test_an_error_names_the_scripts_own_line_and_column(
    client: httpx.AsyncClient, script: str, where: tuple[str, int, int | None], case: str
) -> None:
    response = await client.post("/run", json={"script": script})
    assert response.status_code == 200, response.text
    error: dict[str, Any] = response.json()["error"]
    assert (error["type"], error["line"], error.get("column")) == where, (case, error)


ENDED_EARLY = "SyntaxError: the script ends with an expression, bracket or brace left open, or one closed too many"


@pytest.mark.parametrize("script", ["return 1 +", "if (true) {\n  return 1", "return [1, 2", "return 1 }"])
async def test_a_script_that_ends_too_early_is_told_so_without_the_engines_closing(
    client: httpx.AsyncClient, script: str
) -> None:
    """The engine's message quoted the `}` or `)` of its own closing ("unexpected token in expression: ')'" for an
    open `if` block), which the script does not hold."""
    error = (await client.post("/run", json={"script": script})).json()["error"]
    assert (error["type"], error["message"]) == ("script_error", ENDED_EARLY)


async def test_a_syntax_error_inside_the_script_keeps_the_engines_own_message(client: httpx.AsyncClient) -> None:
    error = (await client.post("/run", json={"script": "let a = 1;\n  let b = ;\nreturn a"})).json()["error"]
    assert error["message"] == "SyntaxError: unexpected token in expression: ';'"
