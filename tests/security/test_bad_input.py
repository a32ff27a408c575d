"""Bad input from a careless or hostile client: a 4xx problem that says what was wrong and where, never a 500, a
hang, a fetch the schema's author asked for, or data mangled on its way to a tool."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from service.catalog.files import load_catalog_file
from service.db.models import ApiKey, Approval, Execution, Search, Tool
from service.execution.runtime import get_gateway
from tests.security.conftest import assert_problem, bearer, cli_key, count_rows, make_settings, running

JSON = {"Content-Type": "application/json"}


def tool(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"server": "s", "name": name, "description": "d", "input_schema": schema}


@contextmanager
def schema_host() -> Iterator[tuple[str, list[str]]]:
    """A local HTTP server that would serve any schema asked of it, and the paths it was asked for."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            asked.append(self.path)
            body = b'{"type": "string"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


async def test_a_body_of_another_content_type_is_a_415_naming_the_type_expected(tmp_path: Path) -> None:
    """A JSON body sent as text/plain or as a form (curl -d's default) was a 422, as if the JSON were wrong: HTTP says
    415 Unsupported Media Type. The problem says which type the route takes, and which came; a JSON type with a
    suffix or parameters is JSON."""
    async with running(make_settings(tmp_path, permissions=None)) as (_app, http):
        content = b'{"query": "weather in Paris"}'
        for sent, said in [
            ("text/plain", "not text/plain"),
            ("application/x-www-form-urlencoded", "not application/x-www-form-urlencoded"),
            ("multipart/form-data; boundary=x", "not multipart/form-data; boundary=x"),
            (None, "and it came with none"),
        ]:
            headers = {"Content-Type": sent} if sent else {}
            body = assert_problem(await http.post("/search", content=content, headers=headers), 415)
            reason = f"the body must be JSON, sent with Content-Type: application/json, {said}"
            assert body == {
                "type": "https://toolscout.dev/problems/unsupported-media-type",
                "title": "The body must be sent as application/json",
                "status": 415,
                "detail": f"Unsupported media type: /body: {reason}",
                "instance": "/search",
                "errors": [{"pointer": "/body", "reason": reason}],
                "expected": "application/json",
            }
        for sent in ("application/json", "application/json; charset=utf-8", "application/merge-patch+json"):
            assert (await http.post("/search", content=content, headers={"Content-Type": sent})).status_code == 200
        missing = assert_problem(await http.post("/search", headers={"Content-Type": "text/plain"}), 422)
        assert missing["errors"] == [{"pointer": "/body", "reason": "Field required"}]  # no body: none to type


async def test_a_body_that_is_not_json_says_why_and_points_at_the_body(tmp_path: Path) -> None:
    async with running(make_settings(tmp_path, permissions=None)) as (_app, http):
        for path in ("/tools", "/execute"):
            body = assert_problem(await http.post(path, content=b'{"tools": [', headers=JSON), 422, "invalid-request")
            assert body["errors"] == [{"pointer": "/body", "reason": body["errors"][0]["reason"]}]
            assert body["errors"][0]["reason"].startswith("not valid JSON: ")
            assert "line 1, column 12" in body["errors"][0]["reason"]  # not a pointer to a field named "11"
        wrong_type = await http.post("/tools", content=b'{"tools": []}', headers={"Content-Type": "text/plain"})
        body = assert_problem(wrong_type, 415, "unsupported-media-type")
        reason = "the body must be JSON, sent with Content-Type: application/json, not text/plain"
        assert body["errors"] == [{"pointer": "/body", "reason": reason}]
        # What FastAPI answered with a bare 400 "There was an error parsing the body".
        unreadable = {
            b'{"name": "a__b", "arguments": {"x": "\xff"}}': "not UTF-8 (byte 0xff at offset 37)",
            b'{"name": "a__b", "arguments": {"x": ' + b"[" * 10_000 + b"]" * 10_000 + b"}}": "nest too deeply",
            b'{"name": "a__b", "arguments": {"x": ' + b"9" * 5000 + b"}}": "Exceeds the limit (4300 digits)",
        }
        for content, reason in unreadable.items():
            body = assert_problem(await http.post("/execute", content=content, headers=JSON), 422, "invalid-request")
            assert body["errors"][0]["pointer"] == "/body" and reason in body["errors"][0]["reason"], body


async def test_nan_and_infinity_arguments_are_refused_not_passed_on(tmp_path: Path) -> None:
    async with running(make_settings(tmp_path, permissions=None)) as (app, http):
        await http.post("/tools", json={"tools": [tool("t", {"type": "object"})]})
        for value, reason in (
            ("NaN", "NaN is not a JSON number"),
            ("-Infinity", "-Infinity is not a JSON number"),
            ("1e400", "1e400 is beyond the range of a number"),
            ('1, "x": 2', "the key 'x' appears twice in one object"),
        ):
            content = f'{{"name": "s__t", "arguments": {{"x": {value}}}}}'.encode()
            body = assert_problem(await http.post("/execute", content=content, headers=JSON), 422, "invalid-request")
            assert body["errors"] == [{"pointer": "/body", "reason": f"not valid JSON: {reason}"}]
        # A big integer is not JSON's problem: it stays exact (orjson would have made it a float).
        exact = await http.post(
            "/execute", content=b'{"name": "s__t", "arguments": {"x": 123456789012345678901234567890}}', headers=JSON
        )
        assert_problem(exact, 502, "upstream-error")  # passed validation: the tool has no live server
        await get_gateway(app.state.resources).log.flush(10)
        assert await count_rows(app, Execution) == 1  # the refused bodies never reached the executor


async def test_registration_keeps_64_bit_integers_exact_and_refuses_larger_ones_where_they_are(
    tmp_path: Path, database_url: str
) -> None:
    """orjson read /tools bodies: 2**64 + 1 became a float (a schema's `maximum` then refused the value it
    allows), a key given twice was kept silently, and 10**400 was "number is infinity when parsed as double"."""
    settings = make_settings(tmp_path, permissions=None)
    settings.db.url = database_url
    u64, i64 = 2**64 - 1, -(2**63)
    async with running(settings) as (app, http):
        bounded = {"type": "object", "properties": {"x": {"type": "integer", "maximum": u64, "minimum": i64}}}
        enum = {"type": "object", "properties": {"a/b": {"enum": [1, 123456789012345678901234567890]}}}
        tools = [
            tool("bounded", bounded),
            tool("enum", enum),
            tool("huge", {"type": "object", "default": 10**400}),
            {**tool("noted", {"type": "object"}), "annotations": {"limits": [2**64]}},
        ]
        answer = await http.post("/tools", content=json.dumps({"tools": tools}).encode(), headers=JSON)
        assert answer.status_code == 200, answer.text
        assert answer.json()["tools"] == ["s__bounded"]
        errors = answer.json()["errors"]
        assert [(e["tool"], e["pointer"], e["field"]) for e in errors] == [
            ("enum", "/body/tools/1/input_schema/properties/a~1b/enum/1", "input_schema"),
            ("huge", "/body/tools/2/input_schema/default", "input_schema"),
            ("noted", "/body/tools/3/annotations/limits/0", "annotations"),
        ]
        assert errors[0]["reason"] == (
            "input_schema holds 123456789012345678901234567890 at /properties/a~1b/enum/1, beyond the 64-bit "
            "integers the catalog keeps exactly (-9223372036854775808 to 18446744073709551615); write it as a "
            "float (with an exponent) or a string"
        )
        assert errors[1]["reason"].startswith("input_schema holds an integer of 1329 bits at /default, beyond")
        # The 64-bit bounds stay exact in the catalog, the index, /search and /execute's argument check.
        stored = (await http.get("/tools/s__bounded")).json()["input_schema"]["properties"]["x"]
        assert (stored["maximum"], stored["minimum"]) == (u64, i64)
        found = (await http.post("/search", json={"query": "bounded"})).json()["results"]
        assert found[0]["input_schema"]["properties"]["x"]["maximum"] == u64
        calls = [{"name": "s__bounded", "arguments": {"x": u64 + 1}}, {"name": "s__bounded", "arguments": {"x": u64}}]
        batch = (await http.post("/execute/batch", content=json.dumps({"calls": calls}).encode(), headers=JSON)).json()
        assert [r["status"] for r in batch["results"]] == [422, 502]  # the second passed: no live server
        assert batch["results"][0]["error"]["errors"][0]["reason"] == (
            "18446744073709551616 is greater than the maximum of 18446744073709551615"
        )
        # A batch of refused tools only is a 422 problem naming each value; a key given twice is refused.
        refused = await http.post("/tools", content=json.dumps({"tools": tools[1:2]}).encode(), headers=JSON)
        body = assert_problem(refused, 422, "invalid-tool")
        assert [e["pointer"] for e in body["errors"]] == ["/body/tools/0/input_schema/properties/a~1b/enum/1"]
        twice = b'{"tools": [{"server": "s", "name": "a", "description": "d"}], "tools": []}'
        body = assert_problem(await http.post("/tools", content=twice, headers=JSON), 422, "invalid-request")
        assert body["errors"] == [
            {"pointer": "/body", "reason": "not valid JSON: the key 'tools' appears twice in one object"}
        ]
        assert await count_rows(app, Tool) == 1


async def test_a_catalog_file_keeps_big_integers_exact_for_registration_to_refuse(tmp_path: Path) -> None:
    path = tmp_path / "catalog.jsonl"
    lines = [
        {"name": "fine", "description": "d", "input_schema": {"type": "object", "maximum": 2**64 - 1}},
        {"name": "big", "description": "d", "input_schema": {"type": "object", "maximum": 2**64 + 1}},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines))
    catalog = load_catalog_file(path, "s")
    # A dataset's line keeps its tool: the schema the registration would refuse is left out and said so, never
    # rounded to a float.
    assert [t["input_schema"].get("maximum") for t in catalog.tools] == [2**64 - 1, None]
    assert catalog.repairs == [f"catalog.jsonl:2: big: input_schema left out (input_schema holds {2**64 + 1} at "
                               "/maximum, beyond the 64-bit integers the catalog keeps exactly (-9223372036854775808 "
                               "to 18446744073709551615); write it as a float (with an exponent) or a string)"]
    listed = tmp_path / "s.json"  # a server's tools/list, read as it lists them
    listed.write_text(json.dumps({"tools": [{**line, "inputSchema": line.pop("input_schema")} for line in lines]}))
    served = load_catalog_file(listed)
    assert [t["inputSchema"]["maximum"] for t in served.tools] == [2**64 - 1, 2**64 + 1]  # exact, not floats
    async with running(make_settings(tmp_path, permissions=None)) as (_app, http):
        answer = await http.post("/tools", json={"tools": served.tools})  # what `toolscout index` sends
        assert answer.json()["tools"] == ["s__fine"]
        errors = [(e["tool"], e["pointer"]) for e in answer.json()["errors"]]
        assert errors == [("big", "/body/tools/1/input_schema/maximum")]


async def test_registration_refuses_schemas_that_execute_could_not_trust(tmp_path: Path) -> None:
    with schema_host() as (host, asked):
        async with running(make_settings(tmp_path, permissions=None)) as (app, http):
            tools = [
                tool("remote", {"type": "object", "properties": {"x": {"$ref": f"{host}/x.json"}}}),
                tool("based", {"$id": f"{host}/base.json", "type": "object", "properties": {"x": {"$ref": "y.json"}}}),
                tool("dangling", {"type": "object", "properties": {"x": {"$ref": "#/$defs/nowhere"}}}),
                tool("regex", {"type": "object", "properties": {"x": {"type": "string", "pattern": "(unclosed"}}}),
            ]
            body = assert_problem(await http.post("/tools", json={"tools": tools}), 422, "invalid-tool")
            errors = {e["tool"]: e for e in body["errors"]}
            assert {e["pointer"] for e in body["errors"]} == {f"/body/tools/{i}/input_schema" for i in range(4)}
            assert "remote references are never fetched" in errors["remote"]["reason"]
            assert f"{host}/x.json" in errors["remote"]["reason"]
            assert "remote references are never fetched" in errors["based"]["reason"]
            assert "'/$defs/nowhere' does not exist" in errors["dangling"]["reason"]
            assert '"(unclosed" is not a "regex"' in errors["regex"]["reason"]
            assert await count_rows(app, Tool) == 0
        assert asked == []


async def test_execute_never_fetches_a_remote_ref_of_a_stored_schema(tmp_path: Path) -> None:
    with schema_host() as (host, asked):
        async with running(make_settings(tmp_path, permissions=None)) as (app, http):
            await http.post("/tools", json={"tools": [tool("old", {"type": "object"})]})
            # A row stored before registrations were checked for remote references.
            schema = {"type": "object", "properties": {"x": {"$ref": f"{host}/x.json"}}}
            async with app.state.resources.session() as session:
                await session.execute(
                    update(Tool).where(Tool.qualified_name == "s__old").values(input_schema=schema, content_hash="0")
                )
                await session.commit()
            response = await http.post("/execute", json={"name": "s__old", "arguments": {"x": 1}})
            body = assert_problem(response, 422, "invalid-tool")
            assert body["tool"] == "s__old" and body["errors"][0]["pointer"] == "/input_schema"
            assert f"$ref '{host}/x.json' does not resolve within the schema" in body["detail"]
        assert asked == []


async def test_a_ref_loop_is_a_422_naming_the_schema_not_a_500(tmp_path: Path) -> None:
    async with running(make_settings(tmp_path, permissions=None)) as (_app, http):
        loop = tool("loop", {"type": "object", "$ref": "#"})
        assert (await http.post("/tools", json={"tools": [loop]})).status_code == 200
        body = assert_problem(
            await http.post("/execute", json={"name": "s__loop", "arguments": {}}), 422, "invalid-tool"
        )
        assert "recursed without end" in body["detail"] and body["errors"][0]["pointer"] == "/input_schema"
        batch = await http.post("/execute/batch", json={"calls": [{"name": "s__loop", "arguments": {}}]})
        assert batch.status_code == 200 and batch.json()["results"][0]["status"] == 422


async def test_a_catastrophic_pattern_is_answered_at_once(tmp_path: Path) -> None:
    async with running(make_settings(tmp_path, permissions=None)) as (_app, http):
        schema = {
            "type": "object",
            "properties": {"x": {"type": "string", "pattern": "^(a|aa)+$"}},
            "patternProperties": {"^(b|bb)+$": {"type": "string"}},
            "additionalProperties": False,
        }
        assert (await http.post("/tools", json={"tools": [tool("redos", schema)]})).status_code == 200
        started = time.perf_counter()  # Python's re took minutes on each of these (the event loop held)
        arguments = {"x": "a" * 60 + "!", "b" * 60 + "!": "v"}
        response = await http.post("/execute", json={"name": "s__redos", "arguments": arguments})
        assert time.perf_counter() - started < 5
        body = assert_problem(response, 422, "invalid-arguments")
        assert [(e["pointer"], e["keyword"]) for e in body["errors"]] == [
            ("", "additionalProperties"),
            ("/x", "pattern"),
        ]
        assert body["errors"][1]["reason"] == f"'{'a' * 60}!' does not match '^(a|aa)+$'"
        fine = await http.post("/execute", json={"name": "s__redos", "arguments": {"x": "aaa", "bb": "v"}})
        assert_problem(fine, 502, "upstream-error")  # valid: on to the (missing) server
        # unevaluatedProperties matches patternProperties in jsonschema's own helper, not through a keyword.
        unevaluated = {"type": "object", "patternProperties": {"^(c|cc)+$": {}}, "unevaluatedProperties": False}
        await http.post("/tools", json={"tools": [tool("redos2", unevaluated)]})
        started = time.perf_counter()
        response = await http.post("/execute", json={"name": "s__redos2", "arguments": {"c" * 60 + "!": 1}})
        assert time.perf_counter() - started < 5
        body = assert_problem(response, 422, "invalid-arguments")
        assert [(e["pointer"], e["keyword"]) for e in body["errors"]] == [("", "unevaluatedProperties")]


async def test_multiple_of_a_huge_integer_is_checked_exactly(tmp_path: Path) -> None:
    async with running(make_settings(tmp_path, permissions=None)) as (_app, http):
        schema = {"type": "object", "properties": {"tenth": {"multipleOf": 0.1}, "third": {"multipleOf": 3}}}
        await http.post("/tools", json={"tools": [tool("m", schema)]})
        huge = "1" + "0" * 4000
        content = f'{{"name": "s__m", "arguments": {{"tenth": {huge}, "third": {huge}}}}}'.encode()
        body = assert_problem(await http.post("/execute", content=content, headers=JSON), 422, "invalid-arguments")
        assert [(e["pointer"], e["keyword"]) for e in body["errors"]] == [("/third", "multipleOf")]


async def test_an_error_about_a_huge_value_quotes_only_its_start(tmp_path: Path) -> None:
    async with running(make_settings(tmp_path, permissions=None)) as (_app, http):
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
        await http.post("/tools", json={"tools": [tool("big", schema)]})
        response = await http.post("/execute", json={"name": "s__big", "arguments": {"n": "x" * 1_000_000}})
        body = assert_problem(response, 422, "invalid-arguments")
        assert len(response.content) < 2_000
        reason = body["errors"][0]["reason"]
        assert reason.startswith("'xxx") and reason.endswith("… (1,000,027 characters)") and len(reason) < 320


@pytest.mark.postgres
async def test_nul_characters_are_refused_before_they_reach_sql_text(tmp_path: Path, postgres_url: str) -> None:
    settings = make_settings(tmp_path, permissions=None)
    settings.db.url = postgres_url
    async with running(settings) as (app, http):
        tools = [
            {"server": "s", "name": "a\x00b"},
            {"server": "s", "name": "d", "description": "x\x00y"},
            {"server": "s", "name": "fine"},
        ]
        answer = await http.post("/tools", json={"tools": tools})
        assert answer.status_code == 200, answer.text
        assert answer.json()["tools"] == ["s__fine"]
        assert [(e["pointer"], e["reason"]) for e in answer.json()["errors"]] == [
            ("/body/tools/0/name", "name must not contain NUL (U+0000) characters"),
            ("/body/tools/1/description", "description must not contain NUL (U+0000) characters"),
        ]
        body = assert_problem(await http.post("/execute", json={"name": "s__fine\x00"}), 422, "invalid-request")
        assert body["errors"][0]["pointer"] == "/body/name"
        body = assert_problem(await http.post("/search", json={"query": "fine\x00"}), 422, "invalid-request")
        assert body["errors"][0]["pointer"] == "/body/query"
        for url, pointer in (
            ("/tools/s__a%00b", "/path"),
            ("/tools?server=%00", "/query/server"),
            ("/servers/x%00", "/path"),
        ):
            body = assert_problem(await http.get(url), 422, "invalid-request")
            assert body["errors"] == [{"pointer": pointer, "reason": "must not contain NUL (U+0000) characters"}]
        assert_problem(await http.delete("/tools/s__fine%00"), 422, "invalid-request")
        assert await count_rows(app, Tool) == 1
        assert await count_rows(app, Search) == 0


@pytest.mark.postgres
async def test_a_lone_surrogate_escape_is_refused_where_it_is_not_a_500(tmp_path: Path, postgres_url: str) -> None:
    """`"\\ud800"` is valid JSON text but no character: stored (PostgreSQL) or hashed (the arguments' digest) it
    was a UnicodeEncodeError, a 500."""
    settings = make_settings(tmp_path, permissions=None)
    settings.db.url = postgres_url
    async with running(settings) as (app, http):
        await http.post("/tools", json={"tools": [tool("fine", {})]})
        bodies = {
            "/tools": (
                b'{"tools": [{"server": "s", "name": "d", "description": "x \\ud800 y"}]}',
                "/tools/0/description",
            ),
            "/execute": (b'{"name": "s__fine", "arguments": {"q": ["ok", "\\udc00"]}}', "/arguments/q/1"),
            "/execute/batch": (b'{"calls": [{"name": "s__fine", "arguments": {"\\ud83d": 1}}]}', "/calls/0/arguments"),
        }
        for path, (content, where) in bodies.items():
            body = assert_problem(await http.post(path, content=content, headers=JSON), 422, "invalid-request")
            assert body["errors"] == [
                {
                    "pointer": "/body",
                    "reason": f"not valid JSON: a string or key at {where} holds a lone surrogate (a \\uD800-\\uDFFF"
                    " escape not in a high-low pair), which is no Unicode character",
                }
            ]
        # A pair is one character, and an escaped backslash before "ud800" is no escape.
        pair = b'{"tools": [{"server": "s", "name": "e", "description": "\\ud83d\\ude00 \\\\ud800"}]}'
        answer = await http.post("/tools", content=pair, headers=JSON)
        assert answer.status_code == 200, answer.text
        assert (await http.get("/tools/s__e")).json()["description"] == "\U0001f600 \\ud800"
        assert await count_rows(app, Tool) == 2
        assert await count_rows(app, Execution) == 0


async def test_a_query_parameter_the_route_does_not_take_or_given_twice_is_a_422(tmp_path: Path) -> None:
    """Not ignored: `?serverz=x` answered with the whole catalog, `?limit=1&limit=500` with 500 tools."""
    async with running(make_settings(tmp_path, permissions=None)) as (_app, http):
        await http.post("/tools", json={"tools": [tool("a", {}), tool("b", {})]})
        body = assert_problem(await http.get("/tools?serverz=s"), 422, "invalid-request")
        assert [e["pointer"] for e in body["errors"]] == ["/query/serverz"]
        assert body["errors"][0]["reason"].startswith("not a parameter of this route (it takes: ")
        body = assert_problem(await http.get("/tools?limit=1&limit=500"), 422, "invalid-request")
        assert body["errors"] == [{"pointer": "/query/limit", "reason": "given 2 times; it takes one value"}]
        assert assert_problem(await http.get("/readyz?verbose=1"), 422, "invalid-request")["errors"][0]["pointer"] == (
            "/query/verbose"
        )
        listed = await http.get("/tools?limit=1&server=s")
        assert listed.status_code == 200 and len(listed.json()["tools"]) == 1


async def test_every_answer_says_nosniff(tmp_path: Path) -> None:
    """A JSON body quotes tools' descriptions and callers' queries: no browser may read it as HTML."""
    async with running(make_settings(tmp_path, permissions=None)) as (_app, http):
        answers = [
            await http.post("/search", json={"query": "<script>alert(1)</script>"}),
            await http.get("/tools/nope"),
            await http.get("/tools?serverz=x"),
            await http.get("/healthz"),
            await http.get("/%00"),
            await http.get("/", headers={"Host": "evil.example"}),
        ]
        assert [a.status_code for a in answers] == [200, 404, 422, 200, 422, 421]
        assert all(a.headers["x-content-type-options"] == "nosniff" for a in answers)


@pytest.mark.postgres
async def test_nul_characters_in_keys_approvals_and_scripts_are_refused_too(tmp_path: Path, postgres_url: str) -> None:
    """The ids and names of POST /approvals, POST /keys and POST /run reach SQL text as well (each was a 500)."""
    settings = make_settings(tmp_path)
    settings.db.url = postgres_url
    async with running(settings) as (app, http):
        admin = bearer(await cli_key(app, "root", ["admin"]))
        approver = bearer(await cli_key(app, "lead", ["approver"]))
        cases = [
            ("/approvals", {"approval_id": "a\x00"}, approver, "/body/approval_id"),
            ("/approvals", {"caller": "x\x00", "tool": "util__purge_cache"}, approver, "/body/caller"),
            ("/approvals", {"caller": "x", "tool": "util__purge\x00"}, approver, "/body/tool"),
            ("/keys", {"caller": "x\x00"}, admin, "/body/caller"),
            ("/keys", {"caller": "x", "roles": ["dev\x00"]}, admin, "/body/roles/0"),
            ("/run", {"script": "return 1", "approval_ids": ["a\x00"]}, admin, "/body/approval_ids/0"),
        ]
        for path, body, headers, pointer in cases:
            problem = assert_problem(await http.post(path, json=body, headers=headers), 422, "invalid-request")
            assert [e["pointer"] for e in problem["errors"]] == [pointer], (path, body)
            assert problem["errors"][0]["reason"].endswith("must not contain NUL (U+0000) characters")
        assert await count_rows(app, Approval) == 0
        assert await count_rows(app, ApiKey) == 2


async def test_a_number_or_flag_of_the_wrong_type_is_refused_not_coerced(tmp_path: Path) -> None:
    """`k: true` searched for one tool, `explain: "no"` explained, `concurrency: true` ran one call at a time."""
    async with running(make_settings(tmp_path, permissions=None)) as (_app, http):
        cases = [
            ("/search", {"query": "x", "k": True}, "/body/k"),
            ("/search", {"query": "x", "k": "5"}, "/body/k"),
            ("/search", {"query": "x", "explain": "no"}, "/body/explain"),
            ("/search", {"query": "x", "explain": 1}, "/body/explain"),
            ("/execute/batch", {"calls": [{"name": "s__x"}], "concurrency": True}, "/body/concurrency"),
            ("/run", {"script": "return 1", "timeout_seconds": True}, "/body/timeout_seconds"),
            ("/run", {"script": "return 1", "timeout_seconds": "5"}, "/body/timeout_seconds"),
            ("/approvals", {"approval_id": "a", "ttl_seconds": "60"}, "/body/ttl_seconds"),
        ]
        for path, payload, pointer in cases:
            body = assert_problem(await http.post(path, json=payload), 422, "invalid-request")
            assert [e["pointer"] for e in body["errors"]] == [pointer], (path, payload, body)
        fine = await http.post("/run", json={"script": "return 1", "timeout_seconds": 5})
        assert fine.status_code == 200 and fine.json()["result"] == 1


async def test_every_request_problem_points_into_the_body_the_same_way(tmp_path: Path) -> None:
    """FastAPI's checks and the service's own (limits read from the settings) give one pointer form, `/body/...`:
    /search said `/body/k` for k = 0 and `/k` for k past search.max_k."""
    settings = make_settings(
        tmp_path,
        permissions=None,
        search={"max_k": 3, "max_filter_values": 2},
        execution={"batch_max_calls": 2},
        policy={"max_tools_per_registration": 1},
    )
    async with running(settings) as (_app, http):
        tools = [{"server": "s", "name": "a"}, {"server": "s", "name": "b"}]
        calls = [{"name": "s__a"}] * 3
        cases = [
            ("/search", {"query": "x", "k": 0}, 422, ["/body/k"]),  # FastAPI's check
            ("/search", {"query": "x", "k": 4}, 422, ["/body/k"]),  # the service's: search.max_k
            ("/search", {"query": "x", "k": 1, "tags": ["a", "b", "c"]}, 422, ["/body/tags"]),
            ("/search", {"query": "x", "servrs": ["a"]}, 422, ["/body/servrs"]),
            ("/execute", {"name": 5}, 422, ["/body/name"]),
            ("/execute/batch", {"calls": calls}, 422, ["/body/calls"]),
            ("/tools", {"tools": tools}, 413, ["/body/tools"]),
            ("/tools", {"tools": [{"server": "s", "name": ""}]}, 422, ["/body/tools/0/name"]),
        ]
        for path, payload, status, pointers in cases:
            answer = await http.post(path, json=payload)
            assert answer.status_code == status, (path, payload, answer.text)
            assert [e["pointer"] for e in answer.json()["errors"]] == pointers, (path, payload, answer.text)
        listed = await http.get("/tools", params={"limit": 0})
        assert [e["pointer"] for e in listed.json()["errors"]] == ["/query/limit"]
