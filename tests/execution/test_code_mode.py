"""Code mode (POST /run) on real MCP servers: git (PyPI) on a repository, filesystem and memory (npm), and the
in-repo test server. Chained calls, a denied tool, a destructive call and its approval, the wall-clock and
memory budgets, the queue of scripts, and the execution log's run ids."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from httpx import ASGITransport
from mcp import Client
from sqlalchemy import select

from service.db.models import Execution
from service.execution.code_mode import code_mode
from service.execution.code_mode.sandbox import WORKER, Sandbox
from service.execution.executor import ExecutionResult
from service.execution.runtime import get_gateway
from service.mcp.server import create_frontend
from service.policy.callers import Caller
from service.policy.service import policy_state, refresh_catalog
from tests.upstream.upstream_support import local_server, node_server, running

pytestmark = [pytest.mark.upstream, pytest.mark.node]

PERMISSIONS = """
roles:
  admin:
    allow: ["*"]
    deny: ["t__pid"]
approver_roles: [approver]
"""


def make_repo(folder: Path) -> Path:
    """A git repository whose notes.md was touched by three of its four commits."""
    repo = folder / "repo"
    repo.mkdir()

    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-c", "user.name=Test", "-c", "user.email=test@example.invalid", *args],
            cwd=repo,
            check=True,
            capture_output=True,
        )

    git("init", "-q", "-b", "main")
    for i, (name, text) in enumerate(
        [("notes.md", "first"), ("other.txt", "x"), ("notes.md", "second"), ("notes.md", "third")]
    ):
        (repo / name).write_text(text + "\n")
        git("add", name)
        git("commit", "-q", "-m", f"commit {i}: {name}")
    return repo


@pytest.fixture(scope="module")
async def world(
    tmp_path_factory: pytest.TempPathFactory, python_servers: str, node_modules: Path
) -> AsyncIterator[dict[str, Any]]:
    """The service with git, filesystem, memory and the test server, small code-mode budgets."""
    tmp = tmp_path_factory.mktemp("code_mode")
    repo = make_repo(tmp)
    (tmp / "permissions.yaml").write_text(PERMISSIONS)
    servers = {
        "git": {"command": python_servers, "args": ["-m", "mcp_server_git", "--repository", str(repo)]},
        "filesystem": node_server(node_modules, "filesystem", str(repo)),
        "memory": node_server(node_modules, "memory", env={"MEMORY_FILE_PATH": str(tmp / "memory.jsonl")}),
        "t": local_server("stdio"),
    }
    async with running(tmp, servers) as (app, client):
        settings = app.state.resources.settings
        settings.policy.permissions_file = tmp / "permissions.yaml"
        settings.code_mode.timeout_seconds = 2.0
        settings.code_mode.memory_mib = 32
        settings.code_mode.max_concurrent = 4
        resources = app.state.resources
        resources.policy = None  # reload the policy with the permissions file
        policy_state(resources)
        await refresh_catalog(resources)
        yield {"app": app, "client": client, "repo": repo}


async def run(client: httpx.AsyncClient, script: str, **body: Any) -> dict[str, Any]:
    response = await client.post("/run", json={"script": script, **body})
    assert response.status_code == 200, response.text
    return dict(response.json())


async def logged(app: FastAPI, run_id: str) -> list[Execution]:
    resources = app.state.resources
    await get_gateway(resources).log.flush(10)
    async with resources.session() as session:
        query = select(Execution).where(Execution.run_id == run_id).order_by(Execution.started_at)
        return list((await session.scalars(query)).all())


async def test_a_script_chains_three_tools_and_every_call_is_logged_with_its_run_id(world: dict[str, Any]) -> None:
    repo = str(world["repo"])
    script = f"""
const repo = {json.dumps(repo)};
const log = await tools.git__git_log({{repo_path: repo, max_count: 10}});
const touched = log.split("\\n").filter(l => /commit \\d: notes\\.md/.test(l)).map(l => l.trim());
const text = await tools.filesystem__read_text_file({{path: repo + "/notes.md"}});
const content = typeof text === "string" ? text : text.content;
const entity = {{name: "notes.md", entityType: "file", observations: [`last commits: ${{touched.length}}`]}};
entity.observations.push(`content: ${{content.trim()}}`); await tools.memory__create_entities({{entities: [entity]}});
const found = await tools.memory__open_nodes({{names: ["notes.md"]}});
console.log("commits", touched.length);
return {{commits: touched.length, content: content.trim(), observations: found.entities[0].observations}};
"""
    body = await run(world["client"], script)
    assert body["error"] is None, body["error"]
    assert body["result"] == {
        "commits": 3,
        "content": "third",
        "observations": ["last commits: 3", "content: third"],
    }
    assert body["logs"] == ["commits 3"]
    calls = body["calls"]
    assert [(c["name"], c["status"], c["line"]) for c in calls] == [
        ("git__git_log", "ok", 3),
        ("filesystem__read_text_file", "ok", 5),
        ("memory__create_entities", "ok", 8),
        ("memory__open_nodes", "ok", 9),
    ]
    rows = await logged(world["app"], body["run_id"])
    assert sorted(r.id for r in rows) == sorted(c["execution_id"] for c in calls)
    assert {r.status for r in rows} == {"ok"} and {r.caller for r in rows} == {"local"}
    assert {r.scope for r in rows} == {"admin,approver"}  # the caller's sorted roles: what its boosts learn in
    # /execute rows carry no run id.
    plain = await world["client"].post("/execute", json={"name": "t__echo", "arguments": {"text": "plain"}})
    await get_gateway(world["app"].state.resources).log.flush(10)
    async with world["app"].state.resources.session() as session:
        row = await session.get(Execution, plain.json()["execution_id"])
    assert row is not None and row.run_id is None and row.scope == "admin,approver"


async def test_a_tools_structured_result_reaches_the_script_when_only_the_answer_leaves_it_out(
    world: dict[str, Any],
) -> None:
    # t__echo answers its text beside {"result": text}: together over the token budget, the answer leaves out the
    # structured content repeating the text (it fits alone), but a script still gets the structured value.
    script = """
const small = await tools.t__echo({text: "word", times: 3});
const large = await tools.t__echo({text: "word", times: 3000});
return [small, typeof large === "string" ? "text" : large.result.length];
"""
    body = await run(world["client"], script)
    assert body["error"] is None, body["error"]
    assert body["result"] == [{"result": "word word word"}, len(" ".join(["word"] * 3000))]
    large = {"name": "t__echo", "arguments": {"text": "word", "times": 3000}}
    answer = (await world["client"].post("/execute", json=large)).json()
    assert answer["structured_content"] is None and answer["truncated"] is False


async def test_a_denied_tool_is_refused_without_running(world: dict[str, Any]) -> None:
    before = (await world["client"].get("/servers/t")).json()["health"]["calls"]
    body = await run(
        world["client"],
        "const names = Object.keys(tools);\nconst pid = await tools.t__pid({});\nreturn names;",
    )
    after = (await world["client"].get("/servers/t")).json()["health"]["calls"]
    error = body["error"]
    assert error["type"] == "tool_error" and error["line"] == 2
    assert error["call"]["name"] == "t__pid" and error["call"]["status"] == "not_found"
    assert "No tool named 't__pid'" in error["message"]  # the same answer as a tool that does not exist
    assert after == before  # the server never saw the call
    rows = await logged(world["app"], body["run_id"])
    assert [(r.tool, r.status) for r in rows] == [("t__pid", "denied")]
    listed = await run(world["client"], "return Object.keys(tools).filter(n => n.startsWith('t__'))")
    assert "t__pid" not in listed["result"] and "t__echo" in listed["result"]


async def test_a_destructive_call_stops_the_script_until_it_is_approved(world: dict[str, Any]) -> None:
    client = world["client"]
    script = """
await tools.memory__create_entities({entities: [{name: "scratch", entityType: "note", observations: ["x"]}]});
await tools.memory__delete_entities({entityNames: ["scratch"]});
const left = await tools.memory__search_nodes({query: "scratch"});
return left.entities.length;
"""
    first = await run(client, script)
    error = first["error"]
    assert error["type"] == "approval_required" and error["line"] == 3
    assert error["call"]["name"] == "memory__delete_entities"
    assert [c["status"] for c in first["calls"]] == ["ok", "approval_required"]  # the script stopped there
    granted = await client.post("/approvals", json={"approval_id": error["approval_id"]})
    assert granted.status_code == 200, granted.text
    second = await run(client, script, approval_ids=[error["approval_id"]])
    assert second["error"] is None, second["error"]
    assert second["result"] == 0
    assert [c["status"] for c in second["calls"]] == ["ok", "ok", "ok"]
    again = await run(client, script, approval_ids=[error["approval_id"]])  # an approval works once
    assert again["error"]["type"] == "approval_required"


async def test_an_infinite_loop_is_stopped_at_the_wall_clock_budget(world: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    body = await run(world["client"], "let i = 0;\nwhile (true) { i++; }")
    elapsed = loop.time() - started
    assert body["error"]["type"] == "timeout"
    assert 1.8 <= body["duration_ms"] / 1000 <= 2.2 and elapsed < 3.0
    # A call in flight when the budget ends is cancelled, and logged so.
    slow = await run(world["client"], "await tools.t__sleep({seconds: 10});", timeout_seconds=1)
    assert slow["error"]["type"] == "timeout" and 0.9 <= slow["duration_ms"] / 1000 <= 1.1
    rows = await logged(world["app"], slow["run_id"])
    assert [(r.tool, r.status) for r in rows] == [("t__sleep", "cancelled")]


async def test_a_memory_hog_is_stopped_at_the_memory_budget(world: dict[str, Any]) -> None:
    body = await run(world["client"], "const a = [];\nwhile (true) a.push(new Array(10000).fill(1.5));")
    limit = 32 * 1024 * 1024
    assert body["error"]["type"] == "memory_limit" and body["error"]["line"] == 2
    assert 0.5 * limit <= body["memory_bytes"] <= 1.1 * limit


def engine_pids() -> list[int]:
    """The code-mode engines this process started (its children running worker.py)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue  # ended meanwhile
        if parent == os.getpid() and str(WORKER).encode() in command:
            found.append(int(stat.parent.name))
    return found


async def test_the_engine_process_runs_under_the_configured_address_space_limit(world: dict[str, Any]) -> None:
    runner = code_mode(world["app"].state.resources)
    expected = world["app"].state.resources.settings.code_mode.process_memory_mib * 1024 * 1024
    assert expected == 1024 * 1024 * 1024  # the default
    task = asyncio.create_task(runner.run(Caller("limits", frozenset({"admin"})), "while (true) {}", timeout_seconds=2))
    limit = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    for _ in range(150):  # until the engine has read its run and set the limit (it then runs the loop)
        pids = await asyncio.to_thread(engine_pids)
        if pids and (limit := resource.prlimit(pids[0], resource.RLIMIT_AS)) != (resource.RLIM_INFINITY,) * 2:
            break
        await asyncio.sleep(0.01)
    proc_limits = await asyncio.to_thread(Path(f"/proc/{pids[0]}/limits").read_text)
    body = await task
    assert limit == (expected, expected)  # hard = soft: the engine cannot raise it
    address_space = next(line for line in proc_limits.splitlines() if line.startswith("Max address space"))
    assert address_space.split()[3:] == [str(expected), str(expected), "bytes"]
    assert body["error"]["type"] == "timeout"


@pytest.mark.parametrize(
    "script",
    [
        "const a = [];\nwhile (true) a.push(new Array(10000).fill(1.5));",  # QuickJS's malloc fails first
        "return new Array(5e6).fill(1.5);",  # 120 MB in QuickJS, 180 MB more once read into Python
    ],
    ids=["engine-heap", "value-copied-into-python"],
)
async def test_a_script_past_the_engine_process_limit_gets_a_memory_error_and_the_next_runs(
    world: dict[str, Any], script: str
) -> None:
    """The OS limit, not QuickJS's heap limit (set above it here), stops the script: a memory_limit error
    naming both limits (before: no limit, and a value too big to copy into Python was an engine_error)."""
    runner = code_mode(world["app"].state.resources)
    settings = world["app"].state.resources.settings.code_mode
    settings.memory_mib, settings.process_memory_mib, settings.max_value_chars = 1024, 300, 10**9
    settings.timeout_seconds = 30.0  # filling 300 MiB took more than the world's 2 s on a loaded machine
    try:
        hog, other = await asyncio.gather(
            run(world["client"], script),
            runner.run(Caller("bystander", frozenset({"admin"})), "return (await tools.t__echo({text: 'hi'})).result;"),
        )
        after = await run(world["client"], "return 6 * 7;")
    finally:
        settings.memory_mib, settings.process_memory_mib, settings.max_value_chars = 32, 1024, 1_000_000
        settings.timeout_seconds = 2.0
    error = hog["error"]
    assert error["type"] == "memory_limit" and hog["result"] is None
    assert error["message"].endswith(
        "(the script's heap holds at most 1024 MiB, code_mode.memory_mib; "
        "the engine process 300 MiB, code_mode.process_memory_mib)"
    )
    assert error["message"].startswith("out of memory" if "while" in script else "the engine process ran out of memory")
    assert (other["error"], other["result"]) == (None, "hi")  # a script running beside it was not affected
    assert (after["error"], after["result"]) == (None, 42)  # a new engine for the next one
    assert await asyncio.to_thread(engine_pids) == []  # the engine that ran out is gone


async def test_five_scripts_with_a_cap_of_four_queue_the_fifth(world: dict[str, Any]) -> None:
    runner = code_mode(world["app"].state.resources)
    runner.peak_running = 0
    script = "return await tools.t__sleep({seconds: 0.6});"
    callers = [Caller(f"caller-{i}", frozenset({"admin"})) for i in range(5)]  # within max_per_caller each
    bodies = await asyncio.gather(*(runner.run(caller, script) for caller in callers))
    assert [b["result"] for b in bodies] == [{"result": "slept 0.6"}] * 5
    assert runner.peak_running == 4
    queued = sorted(b["queued_ms"] for b in bodies)
    assert queued[3] < 300 and queued[4] >= 400  # the fifth waited for a slot


async def test_a_run_past_the_queue_is_refused_at_once(world: dict[str, Any]) -> None:
    runner = code_mode(world["app"].state.resources)
    settings = world["app"].state.resources.settings.code_mode
    # Four sleeps of 1.5 s at once on a loaded 2-core machine can pass the world's 2 s budget (a CI run did).
    settings.max_queued, settings.max_per_caller, settings.timeout_seconds = 1, 10, 6.0
    try:
        script = "return await tools.t__sleep({seconds: 1.5});"
        accepted = [asyncio.create_task(run(world["client"], script)) for _ in range(5)]
        for _ in range(50):  # until four run and one waits
            if (runner.running, runner.waiting) == (4, 1):
                break
            await asyncio.sleep(0.02)
        assert (runner.running, runner.waiting) == (4, 1)
        refused = await world["client"].post("/run", json={"script": script})
        bodies = await asyncio.gather(*accepted)
    finally:
        settings.max_queued, settings.max_per_caller, settings.timeout_seconds = 16, 3, 2.0
    assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
    problem = refused.json()
    assert problem["limit"] == "code_mode.max_queued"
    assert problem["detail"].startswith("Code mode is busy: 4 scripts run and 1 waits its turn")
    assert [b["result"] for b in bodies] == [{"result": "slept 1.5"}] * 5, bodies


async def test_one_caller_can_neither_fill_the_queue_nor_hold_every_slot(world: dict[str, Any]) -> None:
    runner = code_mode(world["app"].state.resources)
    assert world["app"].state.resources.settings.code_mode.max_per_caller == 3
    script = "return await tools.t__sleep({seconds: 1});"
    accepted = [asyncio.create_task(run(world["client"], script)) for _ in range(3)]
    for _ in range(50):
        if runner.running == 3:
            break
        await asyncio.sleep(0.02)
    refused = await world["client"].post("/run", json={"script": script})
    other = await runner.run(Caller("someone-else", frozenset()), "return 6 * 7;")  # the free slot is theirs
    bodies = await asyncio.gather(*accepted)
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    problem = refused.json()
    assert problem["limit"] == "code_mode.max_per_caller"
    assert problem["detail"].startswith("3 scripts of this caller run or wait already")
    assert other["result"] == 42 and other["queued_ms"] < 100
    assert [b["result"] for b in bodies] == [{"result": "slept 1.0"}] * 3
    assert runner.in_flight == {}
    assert (await run(world["client"], "return 1;"))["result"] == 1  # its turn again once they ended


async def test_a_call_that_fails_unexpectedly_or_returns_a_lone_surrogate_still_answers_the_script(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    executor = get_gateway(world["app"].state.resources).executor

    async def execute(caller: Any, name: str, arguments: dict[str, Any], **_: Any) -> ExecutionResult:
        if arguments["text"] == "boom":
            raise RuntimeError("a bug")
        return ExecutionResult("id", name, "t", "ok", [], {"result": "a\ud800"}, False, None, False, 1, 1)

    monkeypatch.setattr(executor, "execute", execute)
    script = """
let failed;
try { await tools.t__echo({text: 'boom'}); } catch (e) { failed = [e.name, e.status, e.message]; }
return [failed, (await tools.t__echo({text: 'x'})).result];
"""
    body = await run(world["client"], script)
    assert body["error"] is None, body["error"]
    (name, status, message), text = body["result"]
    assert (name, status, text) == ("ToolError", "internal_error", "a\ufffd")
    assert message.startswith("An unexpected error occurred; quote error id ") and "a bug" not in message
    assert [c["status"] for c in body["calls"]] == ["internal_error", "ok"]


async def test_errors_name_the_script_line_and_search_is_available(world: dict[str, Any]) -> None:
    broken = await run(world["client"], "const x = 1;\nreturn x.y.z;")
    assert broken["error"]["type"] == "script_error" and broken["error"]["line"] == 2
    invalid = await run(world["client"], "\n\nawait tools.t__echo({text: 5});")
    assert invalid["error"]["line"] == 3 and invalid["error"]["call"]["status"] == "invalid_arguments"
    caught = await run(
        world["client"],
        "try { await tools.t__nope({}); } catch (e) { return [e.name, e.status, e.tool]; }",
    )
    assert caught["result"] == ["ToolError", "not_found", "t__nope"]
    found = await run(world["client"], "return (await search_tools('show the commit log', 3)).map(t => t.name);")
    assert "git__git_log" in found["result"] and len(found["result"]) == 3


async def test_the_mistakes_a_user_makes_say_where_and_what_to_do(world: dict[str, Any]) -> None:
    """A forgotten `await` was "TypeError: not a function" (search_tools(...).map) or a quiet null (a tool
    result's field); a missing tool said only "No tool named ..."; a script without `return` a bare null."""
    client = world["client"]
    unawaited_search = (await run(client, "const hits = search_tools('commit log', 2);\nreturn hits.map(t => t.name);"))
    assert (unawaited_search["error"]["line"], unawaited_search["error"]["message"]) == (
        2,
        "search_tools(...) (line 1) returns a promise, not its result: write `await search_tools(...)` to read .map",
    )
    # The run ended with its search in flight: the searches after it still answer (the embedder's thread ended).
    after = await run(client, "return (await search_tools('commit log', 1)).length;", timeout_seconds=10)
    assert (after["error"], after["result"]) == (None, 1)
    unawaited_tool = await run(client, "const r = tools.t__echo({text: 'a'});\n\nreturn r.result;")
    assert (unawaited_tool["error"]["type"], unawaited_tool["error"]["line"]) == ("script_error", 3)
    assert unawaited_tool["error"]["message"] == (
        "tools.t__echo(...) (line 1) returns a promise, not its result: write `await tools.t__echo(...)` to read "
        ".result"
    )
    # What a promise has still reads through: await, then, Promise.all, String().
    awaited = await run(
        client,
        "const p = tools.t__echo({text: 'a'});\nconst [x, y] = await Promise.all([p, tools.t__echo({text: 'b'})]);\n"
        "return [x.result, y.result, await tools.t__echo({text: 'c'}).then(r => r.result), String(p)];",
    )
    assert (awaited["error"], awaited["result"]) == (None, ["a", "b", "c", "[object Promise]"])
    missing = await run(client, "let a = 1;\nreturn await tools.t__nope({});")
    assert (missing["error"]["line"], missing["error"]["message"]) == (
        2,
        "No tool named 't__nope': `await search_tools(\"what it should do\")` lists the tools this key may call",
    )
    nothing = await run(client, "await tools.t__echo({text: 'a'});")
    assert (nothing["result"], nothing["error"], nothing["notes"]) == (
        None,
        None,
        [
            "the script returned nothing (undefined), so `result` is null: end it with `return VALUE` to get a value "
            "back"
        ],
    )
    assert (await run(client, "return null;"))["notes"] == []
    endless = await run(client, "let i = 0;\nwhile (true) { i++; }", timeout_seconds=1)
    assert endless["error"]["message"] == (
        "the script ran out of its 1 s wall-clock budget: look for a loop that never ends, or ask for less with "
        "timeout_seconds; its calls' statuses are in `calls`"
    )


async def test_a_meta_tool_or_a_bare_tool_name_in_a_script_says_how_a_script_calls_tools(
    world: dict[str, Any],
) -> None:
    """A model that has just used the front end's call_tool writes it in its script too: the engine's answer was
    only "call_tool is not defined" (and "t__echo is not defined" for a tool written bare)."""
    client = world["client"]
    said = {
        "return await call_tool('t__echo', {text: 'a'});": (
            "call_tool is not defined: in a script a tool is called as `await tools.NAME(arguments)` (or "
            '`tools["NAME"](arguments)`); call_tool is the MCP front end\'s meta-tool'
        ),
        "\nreturn await t__echo({text: 'a'});": (
            "t__echo is not defined: a tool is called as `await tools.t__echo(arguments)`"
        ),
        "return await search_tool('commit log');": (
            "search_tool is not defined: did you mean search_tools? A script has tools, search_tools, console"
        ),
        "return await fetch_result('abc');": (
            "fetch_result is not defined: a script gets each tool's whole result; fetch_result is the MCP front "
            "end's meta-tool, for a return value that comes back cut (its result_id)"
        ),
        "return undefinedThing + 1;": "undefinedThing is not defined",
    }
    for script, message in said.items():
        error = (await run(client, script))["error"]
        assert (error["type"], error["name"], error["message"]) == ("script_error", "ReferenceError", message), script
        assert error["line"] == script.count("\n") + 1, script
    # A script's own ReferenceError inside a caught call stays the script's to handle.
    caught = await run(client, "try { call_tool(); } catch (e) { return e.message; }")
    assert caught["result"] == "call_tool is not defined"


async def test_run_script_works_through_the_mcp_front_end(world: dict[str, Any]) -> None:
    settings = world["app"].state.resources.settings
    frontend = create_frontend(settings, mode="lazy", transport="memory", api_transport=ASGITransport(world["app"]))
    script = "const a = await tools.t__echo({text: 'hi', times: 2});\nconsole.log(a.result);\nreturn a.result.length;"
    async with frontend.running(), Client(frontend.server, mode="legacy") as client:
        listed = [t.name for t in (await client.list_tools()).tools]
        ok = await client.call_tool("run_script", {"script": script})
        failed = await client.call_tool("run_script", {"script": "\nawait tools.t__pid({});"})
        missing = await client.call_tool("run_script", {})
        no_return = await client.call_tool("run_script", {"script": "await tools.t__echo({text: 'a'});"})
    assert "run_script" in listed
    assert json.loads(no_return.content[0].text) == {
        "result": None,
        "notes": [
            "the script returned nothing (undefined), so `result` is null: end it with `return VALUE` to get a value "
            "back"
        ],
        "calls": 1,
    }
    assert ok.is_error is False
    assert json.loads(ok.content[0].text) == {"result": 5, "logs": ["hi hi"], "calls": 1}
    assert failed.is_error is True
    error = json.loads(failed.content[0].text)["error"]
    assert (error["type"], error["line"], error["call"]) == ("tool_error", 2, {"name": "t__pid", "status": "not_found"})
    assert missing.is_error and "`script` is required" in missing.content[0].text


async def test_the_token_bench_scenario_runs_the_task_both_ways(python_servers: str, node_modules: Path) -> None:
    from service.benchmarks.code_mode import code_mode_scenario

    report = await code_mode_scenario()
    lazy, code = report["lazy"], report["code_mode"]
    assert [s["tool"] for s in lazy["steps"]] == [
        "git__git_log",
        "git__git_show",
        "filesystem__read_text_file",
        "memory__create_entities",
        "memory__open_nodes",
    ]
    assert not any(s["is_error"] for s in lazy["steps"] + code["steps"])
    assert code["calls_in_script"] == 5 and (lazy["model_turns"], code["model_turns"]) == (6, 2)
    assert code["input_tokens"] < lazy["input_tokens"] and code["context_tokens"] < lazy["context_tokens"]


@pytest.mark.parametrize(
    ("script", "result", "logs"),
    [
        ("JSON.stringify = () => 'not json';\nreturn 1;", 1, []),
        ("JSON.stringify = () => ({});\nreturn (await tools.t__echo({text: 'a'})).result;", "a", []),
        (
            "RegExp.prototype.exec = () => ['x', 'NaN', '1'];\nreturn (await tools.t__echo({text: 'b'})).result;",
            "b",
            [],
        ),
        (
            "console.log('\\ud800');\nreturn (await tools.t__echo({text: 'c\\udc00'})).result + '\\ud801';",
            "c\ufffd\ufffd",
            ["\ufffd"],
        ),
        ("Array.prototype.toJSON = () => ({});\nreturn (await tools.t__echo({text: 'd'})).result;", "d", []),
        (
            "const p = tools.t__echo({text: 'real'});\nreturn typeof __ts_settle + ' ' + (await p).result;",
            "undefined real",
            [],
        ),
    ],
    ids=[
        "json-replaced",
        "json-replaced-before-a-call",
        "regexp-replaced",
        "lone-surrogates",
        "array-to-json-replaced",
        "no-settle-hook",
    ],
)
async def test_a_script_that_replaces_built_ins_cannot_break_the_engine(
    world: dict[str, Any], script: str, result: Any, logs: list[str]
) -> None:
    body = await run(world["client"], script)
    assert body["error"] is None, body["error"]
    assert (body["result"], body["logs"]) == (result, logs)


@pytest.mark.parametrize(
    ("script", "name", "message", "line"),
    [
        (
            "let a = [];\nfor (let i = 0; i < 300; i++) a = [a];\nreturn a;",
            None,
            "the script's return value is nested more than 100 levels deep",
            None,
        ),
        (
            "let a = [];\nfor (let i = 0; i < 300; i++) a = [a];\nawait tools.t__echo({text: 'x', a});",
            "TypeError",
            "the arguments of t__echo are nested more than 100 levels deep",
            3,
        ),
        (
            "return 'x'.repeat(20000);",
            None,
            "the script's return value is 20002 characters of JSON, over the "
            "limit of 10000 (code_mode.max_value_chars)",
            None,
        ),
        (
            "\nawait tools.t__echo({text: 'x'.repeat(20000)});",
            "TypeError",
            "the arguments of t__echo are 20011 characters of JSON, over the limit of 10000 "
            "(code_mode.max_value_chars)",
            2,
        ),
        ("await tools['x'.repeat(300)]({});", "TypeError", "a tool name has at most 256 characters", 1),
        (
            "\n\nawait tools.t__echo('hi');",
            "TypeError",
            "the arguments of t__echo must be an object, like {text: 'hi'}",
            3,
        ),
        ("throw new Proxy({}, {get() { throw 1; }});", "Error", "the script threw a value that cannot be read", None),
    ],
    ids=["deep-result", "deep-arguments", "long-result", "long-arguments", "long-name", "string-arguments", "proxy"],
)
async def test_a_value_that_cannot_cross_to_the_service_is_a_script_error(
    world: dict[str, Any], script: str, name: str | None, message: str, line: int | None
) -> None:
    settings = world["app"].state.resources.settings.code_mode
    settings.max_value_chars = 10_000
    try:
        body = await run(world["client"], script)
    finally:
        settings.max_value_chars = 1_000_000
    error = body["error"]
    assert (error["type"], error.get("name"), error["message"], error["line"]) == ("script_error", name, message, line)
    assert body["calls"] == []  # nothing reached a tool


async def test_an_engine_that_dies_tells_the_caller_its_exit_code_and_no_traceback() -> None:
    sandbox = await Sandbox.start({})  # no budget: the child fails before it runs anything
    try:
        assert await sandbox.receive() is None
        assert await sandbox.diagnostics() == "exit code 1"
    finally:
        await sandbox.close()


async def test_the_engine_process_gets_none_of_the_services_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLSCOUT_TEST_SECRET", "s3cret")
    config = {"script": "while (true) {}", "tools": [], "memory_bytes": 1 << 25, "process_memory_bytes": 1 << 30}
    limits = {"cpu_seconds": 5, "max_log_lines": 1, "max_log_chars": 1, "max_value_chars": 1}
    sandbox = await Sandbox.start(config | limits)
    try:
        await asyncio.sleep(0.3)  # the script runs: the process is alive, not a zombie with no environment
        environment = await asyncio.to_thread(Path(f"/proc/{sandbox.process.pid}/environ").read_bytes)
        assert sandbox.process.returncode is None
    finally:
        await sandbox.close()
    assert environment == b""


async def test_an_approval_id_longer_than_an_approval_id_is_refused(world: dict[str, Any]) -> None:
    response = await world["client"].post("/run", json={"script": "return 1;", "approval_ids": ["x" * 37]})
    assert response.status_code == 422
    assert [e["pointer"] for e in response.json()["errors"]] == ["/body/approval_ids/0"]
