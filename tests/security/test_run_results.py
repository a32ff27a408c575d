"""Who reads the rest of a script's return value cut to the result budget (`GET /results/{id}` of a `run_script`).

A tool's stored result is read only by its caller while it may still use the tool. A script's was read by any key
of its caller id, whatever that key's roles (a caller may hold keys of different roles), and after the tools whose
answers it holds were taken away: the check let every `run_script` result through. Now it keeps the roles it ran
with and the tools that answered it, and its reader must hold the same roles and may still use every one of them."""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import httpx

from tests.security.conftest import assert_problem, bearer, cli_key, make_settings, probe_entry, running, servers_file

PERMISSIONS = """
roles:
  ops:
    allow: ["server:probe"]
  dev:
    allow: ["server:nothing"]
"""
SCRIPT = "return await tools.probe__echo({text: 'vault-token-7731 ', times: 6000})"


async def read(http: httpx.AsyncClient, result_id: str, key: str) -> httpx.Response:
    return await http.get(f"/results/{result_id}", params={"offset": 10}, headers=bearer(key))


async def test_a_script_result_is_read_only_in_its_roles_while_its_tools_may_still_be_used(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path,
        PERMISSIONS,
        execution={"servers_file": servers_file(tmp_path, {"probe": probe_entry()}), "startup_wait_seconds": 60},
    )
    async with running(settings) as (app, http):
        await cli_key(app, "root", ["admin"])
        ops = await cli_key(app, "alice", ["ops"])
        dev = await cli_key(app, "alice", ["dev"])  # the same caller id, a key of other roles

        ran = await http.post("/run", json={"script": SCRIPT}, headers=bearer(ops))
        assert ran.status_code == 200, ran.text
        cut = ran.json()["result"]
        assert cut["truncated"] is True and [c["status"] for c in ran.json()["calls"]] == ["ok"]
        called = await http.post(
            "/execute",
            json={"name": "probe__echo", "arguments": {"text": "vault-token-7731 ", "times": 6000}},
            headers=bearer(ops),
        )
        stored = called.json()["result_id"]
        assert called.json()["truncated"] is True and stored

        own = await read(http, cut["result_id"], ops)
        assert own.status_code == 200 and "vault-token-7731" in own.json()["text"], own.text
        # The dev key of the same caller may not use probe: neither result is there for it (the run's was, 200).
        for result_id in (stored, cut["result_id"]):
            body = assert_problem(await read(http, result_id, dev), 404, "not-found")
            assert body["detail"] == f"No stored result {result_id!r}"

        # A script that answered itself (no tool) stays readable by its own roles only.
        words = await http.post("/run", json={"script": "return 'word '.repeat(50000)"}, headers=bearer(dev))
        own_words = words.json()["result"]["result_id"]
        assert (await read(http, own_words, dev)).status_code == 200
        assert_problem(await read(http, own_words, ops), 404, "not-found")

        # probe is taken away from ops: both its results go, the script's too (it stayed readable, 200).
        path = settings.policy.permissions_file
        assert path is not None
        path.write_text(PERMISSIONS.replace('"server:probe"', '"server:other"'))
        os.utime(path, (time.time() + 10, time.time() + 10))
        await anyio.sleep(2.2)  # the permissions file is looked at every 2 s
        for result_id in (stored, cut["result_id"]):
            assert_problem(await read(http, result_id, ops), 404, "not-found")


async def test_a_script_result_naming_tools_its_search_found_goes_when_they_are_taken_away(tmp_path: Path) -> None:
    """A script's searches name tools too: its stored return value kept only the tools it called, so after probe was
    taken away from ops its keys still read which probe tools the search had found."""
    settings = make_settings(
        tmp_path,
        PERMISSIONS,
        execution={"servers_file": servers_file(tmp_path, {"probe": probe_entry()}), "startup_wait_seconds": 60},
    )
    async with running(settings) as (app, http):
        ops = await cli_key(app, "alice", ["ops"])
        script = (
            "const found = await search_tools('echo the text back', 5);"
            "return 'word '.repeat(50000) + JSON.stringify(found.map(t => t.name));"
        )
        ran = await http.post("/run", json={"script": script}, headers=bearer(ops))
        assert ran.status_code == 200, ran.text
        assert [c["kind"] for c in ran.json()["calls"]] == ["search"]
        result_id = ran.json()["result"]["result_id"]
        whole = await http.get(f"/results/{result_id}", params={"limit": 100_000}, headers=bearer(ops))
        assert whole.status_code == 200 and "probe__echo" in whole.json()["text"], whole.text

        path = settings.policy.permissions_file
        assert path is not None
        path.write_text(PERMISSIONS.replace('"server:probe"', '"server:other"'))
        os.utime(path, (time.time() + 10, time.time() + 10))
        await anyio.sleep(2.2)  # the permissions file is looked at every 2 s
        gone = await http.get(f"/results/{result_id}", params={"limit": 100_000}, headers=bearer(ops))
        body = assert_problem(gone, 404, "not-found")
        assert body["detail"] == f"No stored result {result_id!r}" and "probe" not in gone.text


async def test_a_script_result_holding_search_results_goes_with_the_tools_they_name(tmp_path: Path) -> None:
    """A script's return value kept what its searches told of tools (names, descriptions, input schemas), and stayed
    readable after those tools were taken from its roles: only the tools whose calls answered it were checked."""
    from tests.security.conftest import PERMISSIONS as WORLD_PERMISSIONS
    from tests.security.conftest import opened_world

    async with opened_world(tmp_path) as world:
        http, dev = world["http"], world["dev"]
        script = "const found = await search_tools('weather forecast', 5); return {pad: 'word '.repeat(9000), found}"
        ran = await http.post("/run", json={"script": script}, headers=bearer(dev))
        assert ran.status_code == 200, ran.text
        cut = ran.json()["result"]
        assert cut["truncated"] is True and "Weather forecast" not in cut["text"]  # the found tools are in the rest
        page = await http.get(f"/results/{cut['result_id']}", params={"offset": 9000}, headers=bearer(dev))
        assert page.status_code == 200 and "Weather forecast for a city" in page.json()["text"], page.text[:300]

        # get_weather is taken from dev: the stored search results that describe it go too (they stayed, 200).
        path = tmp_path / "permissions.yaml"
        path.write_text(WORLD_PERMISSIONS.replace('deny: ["*delete*"]', 'deny: ["*delete*", "public__get_weather"]'))
        os.utime(path, (time.time() + 10, time.time() + 10))
        await anyio.sleep(2.2)  # the permissions file is looked at every 2 s
        assert (await http.get("/tools/public__get_weather", headers=bearer(dev))).status_code == 404
        body = assert_problem(await read(http, cut["result_id"], dev), 404, "not-found")
        assert body["detail"] == f"No stored result {cut['result_id']!r}"
