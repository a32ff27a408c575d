"""Code mode (POST /run) as a restricted caller: what a script's answer may name, and who may read the rest of a
return value cut to the result budget."""

from __future__ import annotations

from typing import Any

from tests.security.conftest import assert_problem, bearer, cli_key


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
