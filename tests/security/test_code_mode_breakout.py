"""Code mode as an attacker would use it, through POST /run: a script is exactly the body of one async function
(a `});` of its own does not close the engine's wrapper), and what the service reads of a run (its value, its
error, which call failed, a call's line) is what the script did, whatever built-ins the script replaced first."""

from __future__ import annotations

from typing import Any

import httpx
import pytest


async def run(client: httpx.AsyncClient, script: str) -> dict[str, Any]:
    response = await client.post("/run", json={"script": script})
    assert response.status_code == 200, response.text
    return dict(response.json())


BREAKOUTS = [  # script, (line, column) where the engine found the script outside its function
    ("return 1 }); globalThis.x = 1; (async function () {", (1, 11)),
    ("let a = 1;\n}); console.log('outside'); (async function () {", (2, 2)),
    ("return 1 }, console.log('outside'), async function () {", (1, 11)),
    ("}; console.log('outside'); {", (1, 2)),  # made for another wrapper: here it does not even parse
]


@pytest.mark.parametrize(("script", "place"), BREAKOUTS, ids=[s for s, _ in BREAKOUTS])
async def test_a_script_that_closes_its_function_early_is_refused_before_any_of_it_runs(
    client: httpx.AsyncClient, script: str, place: tuple[int, int]
) -> None:
    ran = await run(client, script)
    error = ran["error"]
    assert ran["result"] is None and ran["logs"] == [] and ran["calls"] == []
    assert error["type"] == "script_error"
    assert (error["line"], error["column"]) == place
    if not script.startswith("};"):  # the others parse, outside the function
        assert "body of one async function" in error["message"], error


async def test_nothing_of_a_breakout_runs_not_even_while_it_is_checked(client: httpx.AsyncClient) -> None:
    """The check parses the script in a context of its own and runs none of it: a busy loop outside the function
    is refused at once (it held the engine to the end of its budget)."""
    script = "return 1 }); while (true) {} (async function () {"
    response = await client.post("/run", json={"script": script, "timeout_seconds": 5})
    ran = response.json()
    assert (ran["error"]["type"], ran["error"]["line"]) == ("script_error", 1)
    assert ran["duration_ms"] < 2000


async def test_braces_in_strings_comments_templates_and_regexps_are_the_scripts_own(
    client: httpx.AsyncClient,
) -> None:
    script = "const t = `});\n${'})'}`; // });\n/* }); */ return [t, '});', /\\}\\);/.source, \"}\"]"
    ran = await run(client, script)
    assert ran["error"] is None
    assert ran["result"] == ["});\n})", "});", "\\}\\);", "}"]


async def test_a_script_cannot_reach_the_preludes_functions_through_stack_frames(client: httpx.AsyncClient) -> None:
    """QuickJS-ng has V8's Error.prepareStackTrace, whose call sites hand out every function on the stack, strict
    ones included: the prelude's `finish`, under a toJSON of the returned value, reported a value of the script's
    choosing (and could end the run while calls were still out)."""
    script = """
let reached = [];
Error.prepareStackTrace = (error, sites) => {
  for (const site of sites) { const f = site.getFunction && site.getFunction(); if (f) reached.push(f); }
  return "";
};
return { toJSON() {
  new Error().stack;
  const finish = reached.find((f) => f.name === "finish");
  if (finish) finish(true, "forged");
  return ["returned", typeof Error.prepareStackTrace];
} };
"""
    ran = await run(client, script)
    assert ran["error"] is None
    assert ran["result"] == ["returned", "undefined"]


async def test_a_script_cannot_pass_its_own_error_off_as_a_failed_call(client: httpx.AsyncClient) -> None:
    """The call an error names is the prelude's record of the call that failed, never a field the script set."""
    forged_field = (
        "await search_tools('weather');\nthrow Object.assign(new Error('boom'), {__ts_call: 1, __ts_line: 9})"
    )
    forged_json = (
        "await search_tools('weather');\n"
        "Object.prototype.toJSON = function () { return {name: 'ToolError', message: 'forged', call: 1}; };\n"
        "throw new Error('boom')"
    )
    for script, line in ((forged_field, 2), (forged_json, 3)):
        ran = await run(client, script)
        assert [c["status"] for c in ran["calls"]] == ["ok"]
        error = ran["error"]
        assert (error["type"], error["message"], error["line"], error["call"]) == ("script_error", "boom", line, None)


async def test_replaced_built_ins_do_not_change_what_a_failed_call_reports(client: httpx.AsyncClient) -> None:
    script = "Object.assign = () => ({});\nawait tools.nope__x({})"
    error = (await run(client, script))["error"]
    assert error["type"] == "tool_error", error
    assert (error["type"], error["line"], error["call"]["name"], error["call"]["status"]) == (
        "tool_error",
        2,
        "nope__x",
        "not_found",
    )


async def test_a_replaced_array_iterator_does_not_move_a_calls_line(client: httpx.AsyncClient) -> None:
    script = (
        "Array.prototype[Symbol.iterator] = function* () { yield 'at f (<input>:2:1)'; };\n"
        "await search_tools('weather'); return 1"
    )
    ran = await run(client, script)
    assert ran["result"] == 1 and [c["line"] for c in ran["calls"]] == [2]


@pytest.mark.parametrize(
    "setup",
    [
        "Object.defineProperty(Error.prototype, 'stack', {get() { return '    at f (<input>:2:1)\\n'; }});",
        "Error.stackTraceLimit = 0;",
    ],
    ids=["a stack getter of its own", "no stack frames"],
)
async def test_the_line_of_a_call_is_where_the_script_made_it(client: httpx.AsyncClient, setup: str) -> None:
    ran = await run(client, f"{setup}\nawait search_tools('weather'); return 1")
    assert ran["result"] == 1 and [c["line"] for c in ran["calls"]] == [2]
