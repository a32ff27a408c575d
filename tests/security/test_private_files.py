"""The data folder, the SQLite database and the spill files are this user's only: they hold every caller's queries,
call records and stored results (a tool's whole answer), and were made with the umask's 0755 and 0644, so any other
user of the machine read what the API shows each caller of its own only."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest

from service.db.spill import SpillFile
from tests.security.conftest import TOOLS, bearer, cli_key, make_settings, running


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def database_files(data: Path) -> list[Path]:
    return [data / name for name in ("toolscout.db", "toolscout.db-wal", "toolscout.db-shm")]


async def a_stored_result(settings: Any) -> dict[str, int]:
    """Run the service once: an admin registers the tools and searches (rows in the database). Returns the modes of
    the database's files while it runs (SQLite removes -wal and -shm when the last connection closes)."""
    async with running(settings) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        assert (await http.post("/tools", json={"tools": TOOLS}, headers=bearer(admin))).status_code == 200
        found = await http.post("/search", json={"query": "salary of an employee"}, headers=bearer(admin))
        assert found.status_code == 200
        return {p.name: mode(p) for p in database_files(settings.data_dir) if p.exists()}


async def test_a_new_data_folder_and_its_database_are_the_users_only(tmp_path: Path) -> None:
    old_umask = os.umask(0o022)  # the usual umask, whatever the test runner's
    try:
        settings = make_settings(tmp_path)
        settings.data_dir = tmp_path / "data"
        modes = await a_stored_result(settings)
    finally:
        os.umask(old_umask)
    data = settings.data_dir
    assert mode(data) == 0o700  # was 0o755: anyone could list and open what is inside
    assert modes == {"toolscout.db": 0o600, "toolscout.db-wal": 0o600, "toolscout.db-shm": 0o600}  # were 0o644
    with sqlite3.connect(data / "toolscout.db") as db:  # still the database, whole
        assert db.execute("select count(*) from searches").fetchone() == (1,)


async def test_a_database_others_could_read_is_made_the_users_only_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(tmp_path)
    await a_stored_result(settings)
    for path in database_files(tmp_path):
        if path.exists():
            path.chmod(0o644)  # as an older version left it
    caplog.set_level(logging.WARNING, logger="service.db.engine")
    async with running(settings) as (_app, http):
        assert (await http.get("/healthz")).status_code == 200
    assert mode(tmp_path / "toolscout.db") == 0o600
    said = [r.getMessage() for r in caplog.records if r.name == "service.db.engine"]
    assert any("toolscout.db was readable by other users of this machine" in m for m in said), said


def test_a_spill_file_is_the_users_only(tmp_path: Path) -> None:
    old_umask = os.umask(0o022)
    try:
        spill = SpillFile(tmp_path / "spill" / "searches.jsonl", label="search log")
        spill.append([{"id": "a", "query": "a caller's private request"}])
    finally:
        os.umask(old_umask)
    assert mode(tmp_path / "spill") == 0o700
    assert mode(spill.path) == 0o600
    assert "a caller's private request" in spill.path.read_text()
