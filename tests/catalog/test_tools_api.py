"""The catalog over HTTP: batches with bad tools, updates, deletes, problem+json everywhere."""

from __future__ import annotations

import httpx

TIME_TOOLS = [
    {
        "server": "time",
        "name": "get_current_time",
        "description": "Get current time in a specific timezone",
        "input_schema": {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]},
    },
    {
        "server": "time",
        "name": "convert_time",
        "description": "Convert time between timezones",
        "input_schema": {"type": "object", "properties": {"source_timezone": {"type": "string"}}},
    },
]


async def test_register_counts_created_updated_unchanged_and_errors(client: httpx.AsyncClient) -> None:
    first = await client.post("/tools", json={"tools": TIME_TOOLS})
    assert first.status_code == 200
    assert first.json() | {"tools": None} == {
        "created": 2,
        "updated": 0,
        "unchanged": 0,
        "removed": 0,
        "errors": [],
        "warnings": [],
        "held": [],
        "tools": None,
    }
    changed = [
        {**TIME_TOOLS[0], "description": "Current time in a timezone"},
        TIME_TOOLS[1],
        {"server": "time", "name": "bad", "input_schema": {"type": "array"}},
    ]
    second = (await client.post("/tools", json={"tools": changed})).json()
    assert (second["created"], second["updated"], second["unchanged"]) == (0, 1, 1)
    assert second["errors"] == [
        {
            "index": 2,
            "tool": "bad",
            "pointer": "/body/tools/2/input_schema",
            "field": "input_schema",
            "reason": "input_schema must describe an object (type \"object\"), not 'array'",
            "kind": "invalid",
        }
    ]
    tool = (await client.get("/tools/time__get_current_time")).json()
    assert tool["description"] == "Current time in a timezone"
    assert tool["tool"] == "get_current_time" and tool["server"] == "time"


async def test_a_batch_where_every_tool_is_bad_is_a_422_problem(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/tools", json={"tools": [{"server": "s"}, {"name": "x", "server": "s", "input_schema": "nope"}]}
    )
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["type"].endswith("/invalid-tool")
    assert [e["pointer"] for e in body["errors"]] == ["/body/tools/0/name", "/body/tools/1/input_schema"]


async def test_malformed_requests_are_problems_with_pointers(client: httpx.AsyncClient) -> None:
    response = await client.post("/tools", json={"toolz": []})
    assert response.status_code == 422
    body = response.json()
    assert body["status"] == 422 and body["errors"][0]["pointer"] == "/body/tools"
    response = await client.post("/search", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 422 and response.headers["content-type"] == "application/problem+json"
    response = await client.post("/search", json={"query": "x", "k": 51})
    assert response.json()["errors"][0]["pointer"] == "/body/k"


async def test_unknown_tool_is_404_naming_the_closest(client: httpx.AsyncClient) -> None:
    await client.post("/tools", json={"tools": TIME_TOOLS})
    response = await client.get("/tools/time__get_current_tme")
    assert response.status_code == 404
    assert response.json()["closest"][0] == "time__get_current_time"
    assert (await client.get("/no/such/route")).json()["status"] == 404


async def test_list_filters_by_server_and_pages(client: httpx.AsyncClient) -> None:
    await client.post("/tools", json={"tools": TIME_TOOLS + [{"server": "git", "name": "git_status"}]})
    page = (await client.get("/tools", params={"server": "time", "limit": 1})).json()
    assert page["total"] == 2 and [t["name"] for t in page["tools"]] == ["time__convert_time"]
    page = (await client.get("/tools", params={"offset": 2})).json()
    assert [t["name"] for t in page["tools"]] == ["time__get_current_time"]
    tagged = [{"server": "tz", "name": f"zone_{i}", "tags": ["tz"] if i % 2 else []} for i in range(6)]
    await client.post("/tools", json={"tools": tagged})
    page = (await client.get("/tools", params={"tag": "tz", "limit": 2, "offset": 1})).json()
    assert page["total"] == 3 and [t["name"] for t in page["tools"]] == ["tz__zone_3", "tz__zone_5"]
    for params in ({"offset": 10**30}, {"tag": "tz", "offset": 10**30}):  # past the end, past any SQL integer
        response = await client.get("/tools", params=params)
        assert response.status_code == 200 and response.json()["tools"] == [], response.text


async def test_delete_removes_from_catalog_and_search(client: httpx.AsyncClient) -> None:
    await client.post("/tools", json={"tools": TIME_TOOLS})
    assert (await client.delete("/tools/time__convert_time")).status_code == 204
    assert (await client.get("/tools/time__convert_time")).status_code == 404
    results = (await client.post("/search", json={"query": "convert time", "k": 5})).json()["results"]
    assert [r["name"] for r in results] == ["time__get_current_time"]
    assert (await client.delete("/tools/time__convert_time")).status_code == 404


async def test_health_and_readiness(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = (await client.get("/readyz")).json()
    assert ready["status"] == "ready" and ready["checks"]["database"] == "ok"
    # Background loops run supervised and are listed.
    assert ready["checks"]["background"] == "ok"
    assert {"execution-log", "usage-statistics", "purge-results"} <= set(ready["background"])
    assert ready["background"]["execution-log"]["state"] == "running"
    assert "/search" in (await client.get("/openapi.json")).json()["paths"]


async def test_servers_described_with_a_batch_rank_their_tools(client: httpx.AsyncClient) -> None:
    weather = {"server": "weather", "name": "get_forecast", "description": "Forecast for a city"}
    servers = {
        "time": {"title": "Time", "description": "Clocks and time zones", "instructions": "Use IANA names"},
        "weather": {"description": "Weather forecasts", "version": "1.2"},
    }
    assert (await client.post("/tools", json={"tools": [*TIME_TOOLS, weather], "servers": servers})).status_code == 200
    found = (await client.post("/search", json={"query": "time zones", "explain": True})).json()["results"]
    assert all("server" in r["explain"]["signals"] for r in found)
    assert {r["explain"]["similarity"]["server"] for r in found if r["server"] == "time"} != {
        r["explain"]["similarity"]["server"] for r in found if r["server"] == "weather"
    }
    too_long = {"time": {"instructions": "x" * 20001}}
    refused = await client.post("/tools", json={"tools": TIME_TOOLS, "servers": too_long})
    assert refused.status_code == 422 and refused.headers["content-type"].startswith("application/problem+json")


async def test_a_batch_refuses_each_mistyped_tool_and_warns_of_a_misspelt_key(client: httpx.AsyncClient) -> None:
    tools = [
        {"server": "s", "name": 123},
        {"server": "s", "name": "a", "description": []},
        {"server": "s", "name": "b", "input_schema": "x"},
        {"server": "s", "name": ""},
        {"server": "s", "name": "c", "descripton": "Get the weather"},
        {"server": "s", "name": "fine", "title": "Fine", "description": "Kept", "outputSchema": {"type": "object"}},
    ]
    body = (await client.post("/tools", json={"tools": tools})).json()
    assert [(e["pointer"], e["reason"]) for e in body["errors"]] == [
        ("/body/tools/0/name", "name must be a string, not a number"),
        ("/body/tools/1/description", "description must be a string, not an array"),
        ("/body/tools/2/input_schema", "input_schema must be a JSON object, not a string"),
        ("/body/tools/3/name", "name is missing or empty"),
    ]
    assert [(w["tool"], w["pointer"], w["reason"]) for w in body["warnings"]] == [
        (
            "c",
            "/body/tools/4/descripton",
            "not a field of a tool, ignored (fields: server, name, description, input_schema, inputSchema, "
            "annotations, tags)",
        )
    ]
    assert body["tools"] == ["s__c", "s__fine"]
    assert (await client.get("/tools/s__a")).status_code == 404  # not registered without its description


async def test_a_body_with_lone_surrogates_names_the_first_in_document_order(client: httpx.AsyncClient) -> None:
    """The walk popped the last value first: a batch with `\\ud800` in tool 0's name and tool 2's description named
    /tools/2/description."""
    body = (
        b'{"tools": [{"server": "s", "name": "a\\ud800", "description": "ok"}, {"server": "s", "name": "b"},'
        b' {"server": "s", "name": "c", "description": "x \\udfff"}]}'
    )
    response = await client.post("/tools", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert response.json()["errors"][0]["reason"].startswith("not valid JSON: a string or key at /tools/0/name ")
    keyed = b'{"tools": [{"server": "s", "name": "d", "annotations": {"\\ud83d": 1, "t": "\\ud800"}}]}'
    response = await client.post("/tools", content=keyed, headers={"content-type": "application/json"})
    assert "at /tools/0/annotations holds" in response.json()["errors"][0]["reason"]
