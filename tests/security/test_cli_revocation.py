"""`toolscout keys revoke` against a running service: the key is refused at once, not when the key cache expires.

The command wrote the database alone and told no one, so a running service (every replica) went on accepting a leaked
key for `policy.key_cache_seconds`: 5 s by default, 5 minutes with the 300 s these tests set."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from service.cli import main
from tests.processes import free_port
from tests.security.conftest import bearer, opened_world, serving

LONG_CACHE = {"key_cache_seconds": 300.0}


def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, url: str, key: str | None) -> None:
    """The CLI run where the service runs: its data folder, its address, and the operator's key."""
    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TOOLSCOUT_FRONTEND__API_URL", url)
    monkeypatch.setenv("TOOLSCOUT_POLICY__KEY_CACHE_SECONDS", "300")
    if key is None:
        monkeypatch.delenv("TOOLSCOUT_FRONTEND__API_KEY", raising=False)
    else:
        monkeypatch.setenv("TOOLSCOUT_FRONTEND__API_KEY", key)


async def key_id(world: dict[str, Any], caller: str) -> str:
    listed = (await world["http"].get("/keys", headers=bearer(world["admin"]))).json()["keys"]
    return str(next(k["id"] for k in listed if k["caller"] == caller))


async def revoke(key: str) -> int:
    return await anyio.to_thread.run_sync(main, ["keys", "revoke", key])


async def test_a_key_revoked_from_the_cli_is_refused_at_once_by_the_running_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async with opened_world(tmp_path, policy=LONG_CACHE) as world, serving(world["app"]) as url:
        http = world["http"]
        assert (await http.get("/tools", headers=bearer(world["dev"]))).status_code == 200  # cached for 300 s
        dev_id = await key_id(world, "dev-agent")
        cli_env(monkeypatch, tmp_path, url, world["admin"])
        capsys.readouterr()
        assert await revoke(dev_id) == 0
        after = await http.get("/tools", headers=bearer(world["dev"]))
        printed = capsys.readouterr()
    assert after.status_code == 401, after.text  # was 200 for 300 s more
    assert printed.out == (
        f"revoked {dev_id} ({world['dev'][:12]}, caller dev-agent); the running service refuses it now, and so do "
        "its replicas\n"
    )
    assert printed.err == ""


async def test_the_cli_may_revoke_its_own_key_through_the_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async with opened_world(tmp_path, policy=LONG_CACHE) as world, serving(world["app"]) as url:
        http = world["http"]
        root_id = await key_id(world, "root")
        cli_env(monkeypatch, tmp_path, url, world["admin"])
        capsys.readouterr()
        assert await revoke(world["admin"][:12]) == 0  # by the prefix `keys list` shows
        after = await http.get("/tools", headers=bearer(world["admin"]))
        printed = capsys.readouterr()
    assert after.status_code == 401, after.text
    assert printed.out.startswith(f"revoked {root_id} ")
    assert printed.out.endswith("the running service refuses it now, and so do its replicas\n")


async def test_with_a_key_that_is_not_an_admins_the_cli_revokes_in_the_database_and_says_when_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async with opened_world(tmp_path, policy=LONG_CACHE) as world, serving(world["app"]) as url:
        approver_id = await key_id(world, "lead")
        cli_env(monkeypatch, tmp_path, url, world["dev"])
        capsys.readouterr()
        assert await revoke(approver_id) == 0
        printed = capsys.readouterr()
        listed = (await world["http"].get("/keys?include_revoked=true", headers=bearer(world["admin"]))).json()
    assert next(k for k in listed["keys"] if k["id"] == approver_id)["revoked_at"] is not None
    assert printed.out == (
        f"revoked {approver_id} ({world['approver'][:12]}, caller lead) in the database; a running service refuses "
        "it within policy.key_cache_seconds (300 s)\n"
    )
    assert printed.err.startswith(f"note: the service at {url} refused the revocation (")
    assert printed.err.endswith("with an admin key in TOOLSCOUT_FRONTEND__API_KEY it ends the key at once\n")


async def test_a_key_revoked_in_the_database_is_announced_to_the_replicas_over_redis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No service at the CLI's address (a replica on another machine): the database is written and, as
    `DELETE /keys` does, the revocation is published on the replicas' Redis channel."""
    prefix = f"toolscout-test-{uuid.uuid4().hex[:8]}"
    cluster = {"redis_url": "redis://127.0.0.1:6379/0", "key_prefix": prefix}
    async with opened_world(tmp_path, policy=LONG_CACHE, cluster=cluster) as world:
        http, bus = world["http"], world["app"].state.resources.cluster.bus
        with anyio.fail_after(10):
            while not bus.healthy:  # noqa: ASYNC110 - the bus offers no event to wait on
                await anyio.sleep(0.02)
        assert (await http.get("/tools", headers=bearer(world["dev"]))).status_code == 200  # cached for 300 s
        dev_id = await key_id(world, "dev-agent")
        cli_env(monkeypatch, tmp_path, f"http://127.0.0.1:{free_port()}", None)
        monkeypatch.setenv("TOOLSCOUT_CLUSTER__REDIS_URL", "redis://127.0.0.1:6379/0")
        monkeypatch.setenv("TOOLSCOUT_CLUSTER__KEY_PREFIX", prefix)
        capsys.readouterr()
        received = bus.received
        assert await revoke(dev_id) == 0
        with anyio.fail_after(2):
            while bus.received == received:  # noqa: ASYNC110 - delivered in the background
                await anyio.sleep(0.01)
        after = await http.get("/tools", headers=bearer(world["dev"]))
        printed = capsys.readouterr()
    assert after.status_code == 401, after.text  # was 200 for 300 s more
    assert printed.out == (
        f"revoked {dev_id} ({world['dev'][:12]}, caller dev-agent) in the database; the replicas were told over "
        "Redis and refuse it now\n"
    )
    assert printed.err == ""
