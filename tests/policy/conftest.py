"""The `world` fixture of the policy tests (helpers in policy_world.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from policy_world import TOOLS, bearer, first_key, make_key, make_settings, running


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """A service with the permissions file, the tools, and keys for an admin, a dev and an approver."""
    async with running(make_settings(tmp_path)) as (app, http):
        admin = await first_key(app, "root", ["admin"])  # the first key ends open mode
        assert (await http.post("/tools", json={"tools": TOOLS}, headers=bearer(admin))).status_code == 200
        dev = await make_key(http, "dev-agent", ["dev"], admin)
        approver = await make_key(http, "lead", ["approver", "ops"], admin)
        yield {
            "app": app,
            "http": http,
            "admin": admin,
            "dev": dev,
            "approver": approver,
            "resources": app.state.resources,
        }
