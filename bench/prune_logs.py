"""What one prune batch of the log retention (service/usage/retention.py) costs on a big PostgreSQL table.

Usage: python bench/prune_logs.py [--rows 100000] [--batch 2000] [--query-chars 200] [--url URL]
(--url: an empty database, sqlite:///PATH for SQLite)

Creates a fresh database (dropped afterwards; default: the local server as postgres), fills it with --rows executions
and half as many searches, all counted and past the retention (a third of the calls come from their caller's own
search, 20 callers x 50 tools: the usage signal's evidence the prune must keep), then prunes with logs.prune_batch =
--batch. Prints the time per batch (median, p90, max) for each log, the rows kept as evidence, and the tables' sizes
before and after (PostgreSQL reuses the freed space for new rows after autovacuum; the files shrink on VACUUM FULL)."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from indexer.embedding import HashingEmbedder  # noqa: E402
from service.db.engine import create_engine_for, create_sessionmaker, upgrade_database  # noqa: E402
from service.db.models import Execution, Search  # noqa: E402
from service.resources import build_resources  # noqa: E402
from service.settings import DatabaseSettings, Settings  # noqa: E402
from service.usage.retention import prune_logs  # noqa: E402

ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def rows(count: int, query_chars: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(executions, searches), all 200 days old and counted."""
    start = datetime.now(UTC) - timedelta(days=200)
    searches, executions = [], []
    for i in range(count // 2):
        at = start + timedelta(seconds=i * 2)
        searches.append(
            {
                "id": str(uuid.uuid4()),
                "caller": f"caller{i % 20}",
                "query": (f"find the tool number {i} " * 40)[:query_chars],
                "scope": "dev",
                "k": 5,
                "results": [{"name": f"s__t{(i + j) % 50}", "score": 1.0 - j / 10} for j in range(5)],
                "result_count": 5,
                "latency_ms": 12.0,
                "created_at": at,
                "counted_at": at,
            }
        )
    for i in range(count):
        at = start + timedelta(seconds=i)
        origin = searches[i // 2] if i % 3 == 0 else None
        executions.append(
            {
                "id": str(uuid.uuid4()),
                "caller": origin["caller"] if origin else f"caller{i % 20}",
                "tool": f"s__t{i % 50}",
                "server_id": "s",
                "search_id": origin["id"] if origin else None,
                "arguments_digest": "0" * 64,
                "arguments": None,
                "status": "ok" if i % 5 else "tool_error",
                "error_class": None,
                "error_detail": None,
                "duration_ms": 30.0,
                "input_tokens": 10,
                "output_tokens": 100,
                "result_id": None,
                "started_at": at,
                "finished_at": at,
                "counted_at": at,
                "scope": "dev",
            }
        )
    return executions, searches


async def run(url: str, args: argparse.Namespace) -> None:
    upgrade_database(url)
    settings = Settings(data_dir=Path("/tmp/prune-bench"), db=DatabaseSettings(url=url), demo_catalog=False)
    settings.logs.prune_batch = args.batch
    resources = build_resources(settings, HashingEmbedder())
    resources.engine = create_engine_for(url)
    resources.sessionmaker = create_sessionmaker(resources.engine)
    executions, searches = rows(args.rows, args.query_chars)
    async with resources.session() as session:
        for table, values in ((Search, searches), (Execution, executions)):
            for start in range(0, len(values), 5000):
                await session.execute(sa.insert(table), values[start : start + 5000])
        await session.commit()
        await session.execute(sa.text("ANALYZE"))
        await session.commit()

    async def sizes() -> str:
        if url.startswith("sqlite"):
            return f"{Path(url.removeprefix('sqlite:///')).stat().st_size / 1e6:.0f} MB file"  # noqa: ASYNC240 - a bench
        async with resources.session() as session:
            values = [
                await session.scalar(sa.text(f"SELECT pg_size_pretty(pg_total_relation_size('{t}'))"))
                for t in ("executions", "searches")
            ]
        return f"executions {values[0]}, searches {values[1]}"

    print(f"{args.rows} executions, {len(searches)} searches ({args.query_chars}-char queries): {await sizes()}")
    started = time.perf_counter()
    report = await prune_logs(resources)
    total = time.perf_counter() - started
    split = -(-args.rows // args.batch)  # the executions' batches come first (every old row is read once)
    print(
        f"pruned {report.executions} executions, {report.searches} searches in {report.batches} batches, {total:.2f} s"
    )
    print(f"kept as evidence: {report.kept_evidence}; after: {await sizes()}")
    for log, part in (("executions", report.batch_seconds[:split]), ("searches", report.batch_seconds[split:])):
        seconds = sorted(part)
        print(
            f"{log}: {len(seconds)} batches of {args.batch}: median {statistics.median(seconds) * 1000:.0f} ms, "
            f"p90 {seconds[int(0.9 * (len(seconds) - 1))] * 1000:.0f} ms, max {seconds[-1] * 1000:.0f} ms"
        )
    await resources.engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--query-chars", type=int, default=200)
    parser.add_argument("--url", default=None, help="an empty PostgreSQL database (default: a fresh local one)")
    args = parser.parse_args()
    if args.url:
        asyncio.run(run(args.url, args))
        return
    name = f"toolscout_prune_bench_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        asyncio.run(run(f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}", args))
    finally:
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
