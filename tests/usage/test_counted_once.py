"""Every execution row is counted once by learning and analytics, whatever its arrival: rows with old
finished_at values, spill replays, and two writers and two consumers at once, on SQLite and PostgreSQL.
Plus the migrations: 0003 marks what the old cursor had counted, and three replicas upgrading a fresh
PostgreSQL database at once all succeed."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from indexer.embedding import HashingEmbedder
from service.db.engine import alembic_config, create_engine_for, create_sessionmaker, sync_url, upgrade_database
from service.db.models import Search
from service.execution.log import ExecutionLog
from service.resources import Resources, build_resources
from service.settings import DatabaseSettings, Settings
from service.supervisor import Supervisor
from service.usage.learning import refresh_stats

ROOT = Path(__file__).resolve().parents[2]


def row(tool: str = "a__x", at: datetime | None = None, **extra: Any) -> dict[str, Any]:
    """An executions row as the executor logs it."""
    at = at or datetime.now(UTC) - timedelta(minutes=1)
    values: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "caller": "alice",
        "tool": tool,
        "server_id": tool.split("__")[0],
        "search_id": None,
        "arguments_digest": "0" * 64,
        "arguments": None,
        "status": "ok",
        "error_class": None,
        "error_detail": None,
        "duration_ms": 5.0,
        "input_tokens": 1,
        "output_tokens": 1,
        "result_id": None,
        "started_at": at,
        "finished_at": at + timedelta(milliseconds=5),
    }
    values.update(extra)
    return values


async def open_replica(url: str, tmp_path: Path, name: str) -> Resources:
    """Resources of one "replica" on the shared database (its own engine and data folder)."""
    settings = Settings(data_dir=tmp_path / name, db=DatabaseSettings(url=url), demo_catalog=False)
    settings.learning.refresh_lag_seconds = 0.0
    settings.learning.refresh_batch = 37  # many small transactions: more chances to race
    resources = build_resources(settings, HashingEmbedder())
    resources.engine = create_engine_for(url)
    resources.sessionmaker = create_sessionmaker(resources.engine)
    return resources


async def totals(resources: Resources) -> tuple[int, int, int, int]:
    """(executions, uncounted executions, tool_stats calls, usage_daily calls)."""
    async with resources.session() as session:
        values = [
            await session.scalar(sa.text(sql))
            for sql in (
                "SELECT count(*) FROM executions",
                "SELECT count(*) FROM executions WHERE counted_at IS NULL",
                "SELECT coalesce(sum(calls), 0) FROM tool_stats",
                "SELECT coalesce(sum(calls), 0) FROM usage_daily",
            )
        ]
    return tuple(int(v or 0) for v in values)  # type: ignore[return-value]


@pytest.fixture
async def replicas(database_url: str, tmp_path: Path) -> AsyncIterator[tuple[Resources, Resources]]:
    upgrade_database(database_url)
    pair = (await open_replica(database_url, tmp_path, "one"), await open_replica(database_url, tmp_path, "two"))
    yield pair
    for resources in pair:
        assert resources.engine is not None
        await resources.engine.dispose()


async def write(resources: Resources, rows: list[dict[str, Any]]) -> None:
    """Write rows through a commit-mode execution log, as a replica's calls do."""
    log = ExecutionLog(resources.session, resources.settings.data_dir / "spill.jsonl", "commit")
    supervisor = Supervisor()
    await log.start()
    supervisor.start("log", log.run)
    waiters = []
    for item in rows:
        waiters.append(log.record(item))
        await asyncio.sleep(0)  # a stream of calls, not one burst
    await asyncio.gather(*[w for w in waiters if w is not None])
    await log.close(supervisor.task("log"))


async def test_late_replayed_and_concurrent_rows_are_each_counted_once(
    replicas: tuple[Resources, Resources], tmp_path: Path
) -> None:
    one, two = replicas
    await write(one, [row() for _ in range(50)])
    assert await refresh_stats(one) == 50
    # Rows that arrive late with an old finished_at (a retry, a replica with a slow clock): still counted.
    await write(two, [row(at=datetime.now(UTC) - timedelta(days=2)) for _ in range(20)])
    assert await refresh_stats(two) == 20
    # A spill file from a crashed run, replayed at start: its rows are days old too.
    spill = one.settings.data_dir / "spill.jsonl"
    spill.parent.mkdir(parents=True, exist_ok=True)
    spilled = [row("b__y", at=datetime.now(UTC) - timedelta(days=1)) for _ in range(15)]
    spill.write_text("".join(json.dumps(r, default=str) + "\n" for r in spilled))
    await write(one, [])
    assert not spill.exists()
    # Two writers and two consumers at once.
    stop = asyncio.Event()

    async def consume(resources: Resources) -> int:
        counted = 0
        while not stop.is_set():
            counted += await refresh_stats(resources)
            await asyncio.sleep(0.01)
        return counted + await refresh_stats(resources)

    consumers = [asyncio.create_task(consume(r)) for r in (one, two)]
    await asyncio.gather(write(one, [row("c__z") for _ in range(150)]), write(two, [row("c__z") for _ in range(150)]))
    stop.set()
    counted = sum(await asyncio.gather(*consumers))
    counted += await refresh_stats(one) + await refresh_stats(two)
    assert counted == 15 + 300
    assert await totals(one) == (385, 0, 385, 385)
    async with one.session() as session:
        cursor = (await session.execute(sa.text("SELECT rows_seen FROM stats_cursor WHERE name = 'executions'"))).one()
        per_tool = dict((await session.execute(sa.text("SELECT tool, calls FROM tool_stats"))).all())
    assert cursor.rows_seen == 385
    assert per_tool == {"a__x": 70, "b__y": 15, "c__z": 300}


async def add_searches(resources: Resources, ids: list[str]) -> None:
    at = datetime.now(UTC) - timedelta(minutes=2)
    async with resources.session() as session:
        session.add_all(
            [Search(id=i, caller="alice", query="q", k=3, created_at=at, results=[], result_count=0) for i in ids]
        )
        await session.commit()


async def test_a_search_is_followed_once_whichever_log_lands_first(replicas: tuple[Resources, Resources]) -> None:
    one, two = replicas
    early, late = [str(uuid.uuid4()) for _ in range(3)], [str(uuid.uuid4()) for _ in range(4)]
    # The calls of `late` are folded before their searches are written (the search log flushes later).
    await write(one, [row(search_id=i) for i in late] + [row(search_id=late[0])])
    await refresh_stats(one)
    await add_searches(two, late + early)
    await refresh_stats(two)
    # The calls of `early` come after their searches were folded.
    await write(two, [row(search_id=i) for i in early] + [row(search_id=early[1])])
    await refresh_stats(one)
    await refresh_stats(two)
    async with one.session() as session:
        followed = await session.scalar(sa.text("SELECT sum(followed_searches) FROM usage_hourly"))
        marked = await session.scalar(sa.text("SELECT count(*) FROM searches WHERE followed_at IS NOT NULL"))
    assert (followed, marked) == (7, 7)


def test_migration_0003_marks_what_the_old_cursor_counted(database_url: str) -> None:
    upgrade_database(database_url, "0002")
    engine = sa.create_engine(sync_url(database_url))
    executions = sa.table(
        "executions",
        *(sa.column(c) for c in ("id", "caller", "tool", "arguments_digest", "status", "duration_ms")),
        *(sa.column(c) for c in ("input_tokens", "output_tokens")),
        sa.column("started_at", sa.DateTime(timezone=True)),
        sa.column("finished_at", sa.DateTime(timezone=True)),
    )
    cursor = sa.table(
        "stats_cursor",
        sa.column("name"),
        sa.column("last_started_at", sa.DateTime(timezone=True)),
        sa.column("last_execution_id"),
        sa.column("rows_seen"),
    )
    t0 = datetime(2026, 5, 1, 12, tzinfo=UTC)

    def old_row(ident: str, minutes: int) -> dict[str, Any]:
        at = t0 + timedelta(minutes=minutes)
        return {
            "id": ident,
            "caller": "c",
            "tool": "a__x",
            "arguments_digest": "0",
            "status": "ok",
            "duration_ms": 1.0,
            "input_tokens": 0,
            "output_tokens": 0,
            "started_at": at,
            "finished_at": at,
        }

    try:
        with engine.begin() as connection:
            connection.execute(
                executions.insert(), [old_row("a", 0), old_row("b", 5), old_row("c", 5), old_row("d", 9)]
            )
            connection.execute(
                cursor.insert(),
                [
                    {
                        "name": "executions",
                        "last_started_at": t0 + timedelta(minutes=5),
                        "last_execution_id": "b",
                        "rows_seen": 2,
                    }
                ],
            )
        upgrade_database(database_url)
        with engine.connect() as connection:
            counted = connection.execute(sa.text("SELECT id FROM executions WHERE counted_at IS NOT NULL ORDER BY id"))
            assert [r.id for r in counted] == ["a", "b"]
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_three_replicas_upgrading_a_fresh_database_at_once_all_succeed(postgres_url: str) -> None:
    code = "import sys; from service.db.engine import upgrade_database; upgrade_database(sys.argv[1])"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", code, postgres_url], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(3)
    ]
    outcomes = [(p.wait(120), p.stderr.read().decode() if p.stderr else "") for p in processes]
    assert [code for code, _ in outcomes] == [0, 0, 0], [err[-2000:] for _, err in outcomes]
    engine = sa.create_engine(sync_url(postgres_url))
    try:
        with engine.connect() as connection:
            head = ScriptDirectory.from_config(alembic_config(postgres_url)).get_current_head()
            assert connection.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all() == [head]
            tables = set(sa.inspect(connection).get_table_names())
    finally:
        engine.dispose()
    assert {"executions", "searches", "tools", "stats_cursor", "usage_daily"} <= tables
