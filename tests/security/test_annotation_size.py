"""A tool's annotations are bounded as its schema is: they had no bound of size or depth, so an upstream server listed a
tool whose annotations' title was 5 MB, and every listing of the catalog (GET /tools, each search result, the front
end's tools/list) carried those 5 MB to whoever may use the tool. MCP's annotations are a title and four hints: under
100 bytes in every bundled catalog."""

from __future__ import annotations

from pathlib import Path

from indexer.json_values import MAX_ANNOTATIONS_BYTES, MAX_SCHEMA_DEPTH
from tests.security.conftest import make_settings, running, servers_file
from tests.security.scripted_servers import scripted_entry

LOUD_TOOLS = """
def handle(method, mid, msg):
    if method == "tools/list":
        plain = {"type": "object"}
        tools = [{"name": "quiet", "description": "A tool", "inputSchema": plain,
                  "annotations": {"title": "Quiet", "readOnlyHint": True}},
                 {"name": "loud", "description": "A tool", "inputSchema": plain,
                  "annotations": {"title": "A" * 5_000_000}}]
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
serve("loud", handle)
"""


async def test_a_listed_tool_with_megabytes_of_annotations_is_refused_and_the_rest_kept(tmp_path: Path) -> None:
    servers = {"loud": scripted_entry(tmp_path, "loud", LOUD_TOOLS)}
    execution = {"servers_file": servers_file(tmp_path, servers), "startup_wait_seconds": 60}
    async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (_, http):
        view = (await http.get("/servers/loud")).json()
        assert view["state"] == "ready" and view["tools"] == 1, view
        assert "annotations are larger than" in view["health"]["last_error"], view["health"]
        listing = await http.get("/tools", params={"server": "loud"})
        assert len(listing.content) < 5_000, len(listing.content)  # 5 MB before
        assert [(t["name"], t["annotations"]) for t in listing.json()["tools"]] == [
            ("loud__quiet", {"title": "Quiet", "readOnlyHint": True})
        ]
        assert (await http.get("/tools/loud__loud")).status_code == 404


async def test_registered_annotations_past_the_bound_or_too_deep_are_refused_with_their_pointer(tmp_path: Path) -> None:
    deep: dict[str, object] = {}
    for _ in range(MAX_SCHEMA_DEPTH + 1):
        deep = {"x": deep}
    tools = [
        {"server": "s", "name": "fits", "annotations": {"title": "t" * (MAX_ANNOTATIONS_BYTES - 20)}},
        {"server": "s", "name": "big", "annotations": {"title": "t" * MAX_ANNOTATIONS_BYTES}},
        {"server": "s", "name": "deep", "annotations": deep},
    ]
    async with running(make_settings(tmp_path, permissions=None)) as (_, http):
        response = await http.post("/tools", json={"tools": tools})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["created"] == 1, body
        refused = {e["pointer"]: e["reason"] for e in body["errors"]}
        assert refused == {
            "/body/tools/1/annotations": f"annotations are larger than {MAX_ANNOTATIONS_BYTES} bytes "
            "(MAX_ANNOTATIONS_BYTES)",
            "/body/tools/2/annotations": f"annotations nest deeper than {MAX_SCHEMA_DEPTH} levels (MAX_SCHEMA_DEPTH)",
        }, body["errors"]
