"""A key sent in an Authorization header without its `Bearer ` scheme (a newcomer's `-H "Authorization: $KEY"`)
is told so, without the header's value quoted back: it was "An API key is required", as if none had been sent."""

from __future__ import annotations

from pathlib import Path

from tests.security.conftest import assert_problem, bearer, cli_key, make_settings, running


async def test_a_key_without_bearer_is_told_to_write_bearer(tmp_path: Path) -> None:
    async with running(make_settings(tmp_path, permissions=None)) as (app, http):
        key = await cli_key(app, "alice", ["admin"])
        query = {"query": "weather"}
        for header in (key, f"Basic {key}", f"Token {key}"):
            body = assert_problem(await http.post("/search", json=query, headers={"Authorization": header}), 401)
            assert body["detail"] == (
                "An API key is required: the Authorization header is not `Bearer <key>` (write `Bearer ` before the "
                "key, or send it as `X-API-Key`)"
            )
            assert key not in str(body)
        body = assert_problem(await http.post("/search", json=query), 401)
        assert body["detail"] == "An API key is required: send `Authorization: Bearer <key>` or `X-API-Key`"
        assert (await http.post("/search", json=query, headers=bearer(key))).status_code == 200
        assert (await http.post("/search", json=query, headers={"X-API-Key": key})).status_code == 200
