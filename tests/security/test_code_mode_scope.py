"""Code mode (POST /run) as a restricted caller: what a script's answer may name, and who may read the rest of a
return value cut to the result budget."""

from __future__ import annotations

import json
from typing import Any

from tests.security.conftest import TOOLS, assert_problem, bearer, cli_key, statements


async def test_a_restricted_caller_reads_the_rest_of_its_own_run_result_and_no_one_else_does(
    world: dict[str, Any],
) -> None:
    app, http, dev = world["app"], world["http"], world["dev"]
    ran = await http.post("/run", json={"script": "return 'word '.repeat(50000)"}, headers=bearer(dev))
    assert ran.status_code == 200, ran.text
    cut = ran.json()["result"]
    assert cut["truncated"] is True
    page = await http.get(
        f"/results/{cut['result_id']}", params={"offset": cut["returned_tokens"]}, headers=bearer(dev)
    )
    assert page.status_code == 200, page.text
    assert page.json()["tool"] == "run_script" and "word" in page.json()["text"]
    other = await cli_key(app, "other-agent", ["dev"])  # same roles, another caller
    assert_problem(await http.get(f"/results/{cut['result_id']}", headers=bearer(other)), 404, "not-found")


async def test_a_run_lists_the_callers_tools_from_the_policy_without_reading_the_catalog(
    world: dict[str, Any],
) -> None:
    """The names a script's `tools` holds are the policy's cached set of the caller: a run reads no catalog rows
    (on 100k tools that was a query and a permission check per tool on the event loop, 0.35 s each run)."""
    app, http = world["app"], world["http"]
    listing = {"script": "return Object.keys(tools)"}
    await http.get("/tools", headers=bearer(world["dev"]))  # the policy's snapshot takes in the registered tools
    with statements(app, lambda statement: "FROM tools" in statement) as catalog_reads:
        dev_sees = (await http.post("/run", json=listing, headers=bearer(world["dev"]))).json()["result"]
        admin_sees = (await http.post("/run", json=listing, headers=bearer(world["admin"]))).json()["result"]
    assert dev_sees == ["public__get_weather", "util__purge_cache"]
    assert admin_sees == sorted(f"{t['server']}__{t['name']}" for t in TOOLS)
    assert catalog_reads == []


async def test_a_script_reaches_no_file_and_learns_nothing_of_hidden_tools(world: dict[str, Any]) -> None:
    """Held in this pass, kept so: no module loader (an existing file and a missing one fail alike), no host API,
    and a hidden tool's call fails exactly as a missing one's, suggestions included."""
    http, dev = world["http"], world["dev"]
    script = """
const failed = async (f) => { try { await f(); return null; } catch (e) { return [e.name, e.message, e.status]; } };
return {
  existing: await failed(() => import('/etc/hostname')), missing: await failed(() => import('/nonexistent.js')),
  host: [typeof std, typeof os, typeof require, typeof process, typeof fetch, typeof setTimeout],
  hidden: await failed(() => tools.vault__get_secret({})), absent: await failed(() => tools.vault__get_secre({})),
  listed: Object.keys(tools), has: 'vault__get_secret' in tools,
};
"""
    result = (await http.post("/run", json={"script": script}, headers=bearer(dev))).json()["result"]
    assert result["existing"][1].replace("/etc/hostname", "X") == result["missing"][1].replace("/nonexistent.js", "X")
    assert result["host"] == ["undefined"] * 6
    assert result["hidden"][1].replace("vault__get_secret", "X") == result["absent"][1].replace("vault__get_secre", "X")
    assert result["hidden"][2] == result["absent"][2] == "not_found"
    assert "vault" not in json.dumps(result["listed"]) and result["has"] is False


async def test_a_search_the_service_refuses_is_the_scripts_mistake_not_an_internal_error(
    world: dict[str, Any],
) -> None:
    script = "try { await search_tools('word '.repeat(3000)); } catch (e) { return [e.status, e.problem.limit]; }"
    ran = (await world["http"].post("/run", json={"script": script}, headers=bearer(world["dev"]))).json()
    assert ran["result"] == ["invalid_arguments", "search.max_query_chars"]
    assert [c["status"] for c in ran["calls"]] == ["invalid_arguments"]
