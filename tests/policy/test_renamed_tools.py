"""Deny and destructive patterns against a real upstream that spells its tool names as it likes: the names it
lists decide the qualified names, and it may change them at any re-list."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from policy_world import bearer, first_key, make_key, make_settings, running

TEST_SERVER = Path(__file__).resolve().parents[1] / "upstream" / "mcp_test_server.py"
PERMISSIONS = """
roles:
  dev:
    allow: ["server:gh"]
    deny: ["gh__delete_*"]
  tester:
    allow: ["gh__create_issue"]
approver_roles: [approver]
destructive: ["gh__drop_*"]
"""
RENAMED_DELETES = {"gh__Delete_Repo", "gh__DELETE-BRANCH", "gh__deleteRelease", "gh__delete_repo"}
RENAMED_DROPS = {"gh__Drop-Table", "gh__dropIndex"}


def listed_server(tmp_path: Path, names: list[str]) -> Path:
    """A servers file with the test server `gh` listing tools of exactly these names."""
    tools = [
        {
            "name": n,
            "description": f"{n.replace('_', ' ')}: delete or drop a repository thing",
            "inputSchema": {"type": "object"},
        }
        for n in names
    ]
    (tmp_path / "gh.json").write_text(json.dumps({"tools": tools}))
    servers = {"gh": {"command": sys.executable, "args": [str(TEST_SERVER), "listed", str(tmp_path / "gh.json")]}}
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


@pytest.mark.upstream
async def test_a_deny_or_destructive_pattern_catches_names_respelled_by_the_upstream(tmp_path: Path) -> None:
    names = ["create_issue", "Create_Issue", *(n[4:] for n in RENAMED_DELETES | RENAMED_DROPS)]
    settings = make_settings(tmp_path, PERMISSIONS)
    settings.execution.servers_file = listed_server(tmp_path, names)
    settings.execution.startup_wait_seconds = 60
    async with running(settings) as (app, http):
        admin = await first_key(app, "root", ["admin"])
        dev = await make_key(http, "dev-agent", ["dev"], admin)
        tester = await make_key(http, "tester", ["tester"], admin)
        everything = {f"gh__{n}" for n in names}
        listed = (await http.get("/tools", params={"limit": 100}, headers=bearer(admin))).json()
        assert {t["name"] for t in listed["tools"]} == everything
        dev_may = everything - RENAMED_DELETES

        for query in ["delete a repository", "delete", *RENAMED_DELETES, "DELETE_REPO"]:
            found = await http.post("/search", json={"query": query, "k": 50}, headers=bearer(dev))
            assert {r["name"] for r in found.json()["results"]} == dev_may, query
        tools = (await http.get("/tools", params={"limit": 100}, headers=bearer(dev))).json()
        assert {t["name"] for t in tools["tools"]} == dev_may
        for name in sorted(RENAMED_DELETES):
            refused = await http.post("/execute", json={"name": name, "arguments": {}}, headers=bearer(dev))
            assert refused.status_code == 404, (name, refused.text)
            assert refused.json()["type"].endswith("/not-found")
        for name in sorted(RENAMED_DROPS):
            held = await http.post("/execute", json={"name": name, "arguments": {}}, headers=bearer(dev))
            assert held.status_code == 403, (name, held.text)
            assert held.json()["type"].endswith("/approval-required")
        done = await http.post("/execute", json={"name": "gh__Create_Issue", "arguments": {}}, headers=bearer(dev))
        assert done.json()["content"] == [{"type": "text", "text": "Create_Issue:{}"}]

        # An allow pattern stays exact: a respelled name is not let in by it.
        found = await http.post("/search", json={"query": "create issue", "k": 50}, headers=bearer(tester))
        assert [r["name"] for r in found.json()["results"]] == ["gh__create_issue"]
        other = await http.post("/execute", json={"name": "gh__Create_Issue", "arguments": {}}, headers=bearer(tester))
        assert other.status_code == 404


LOOKALIKE_DELETES = ["d\u0435lete_repo", "\uff44\uff45\uff4c\uff45\uff54\uff45_repo", "de1ete_repo"]
LOOKALIKE_DROPS = ["dr\u03bfp_table"]


@pytest.mark.upstream
async def test_a_deny_or_destructive_pattern_catches_lookalike_letters(tmp_path: Path) -> None:
    """A Cyrillic `е`, fullwidth letters, a `1` for an `l`, a Greek `ο`: the qualified names keep none of them
    (`gh__d_lete_repo-<hash>`), the patterns read the names as the upstream listed them."""
    settings = make_settings(tmp_path, PERMISSIONS)
    settings.execution.servers_file = listed_server(tmp_path, ["create_issue", *LOOKALIKE_DELETES, *LOOKALIKE_DROPS])
    settings.execution.startup_wait_seconds = 60
    async with running(settings) as (app, http):
        admin = await first_key(app, "root", ["admin"])
        dev = await make_key(http, "dev-agent", ["dev"], admin)
        listed = (await http.get("/tools", params={"limit": 100}, headers=bearer(admin))).json()["tools"]
        names = {t["name"] for t in listed}
        deletes = {n for n in names if not n.startswith(("gh__create_", "gh__dr"))}
        drops = names - deletes - {"gh__create_issue"}
        assert len(deletes) == 3 and len(drops) == 1
        assert any(n.startswith("gh__d_lete_repo-") for n in deletes)

        tools = (await http.get("/tools", params={"limit": 100}, headers=bearer(dev))).json()["tools"]
        assert {t["name"] for t in tools} == {"gh__create_issue", *drops}
        found = await http.post("/search", json={"query": "delete a repository", "k": 50}, headers=bearer(dev))
        assert {r["name"] for r in found.json()["results"]} == {"gh__create_issue", *drops}
        for name in sorted(deletes):
            refused = await http.post("/execute", json={"name": name, "arguments": {}}, headers=bearer(dev))
            assert refused.status_code == 404, (name, refused.text)
        (drop,) = drops
        held = await http.post("/execute", json={"name": drop, "arguments": {}}, headers=bearer(dev))
        assert held.status_code == 403, held.text
        assert held.json()["type"].endswith("/approval-required")
