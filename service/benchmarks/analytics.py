"""`toolscout bench analytics`: every analytics query over a million execution rows in PostgreSQL.

Creates its own database (dropped afterwards unless --keep), fills it with COPY from a simulated month of
agent traffic (callers of very different activity, sessions that chain a few tools, searches that lead to
calls or not, errors and slow calls), then times each query (median and worst of --repeat runs after a
warm-up) and the incremental refresh of the learning statistics."""

from __future__ import annotations

import argparse
import asyncio
import io
import itertools
import json
import random
import re
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import func, select

from service.benchmarks import BenchFailed, save_report
from service.benchmarks.arguments import positive_int
from service.cli.database import print_table, with_database
from service.db.engine import upgrade_database
from service.db.models import Execution
from service.db.rollup_tables import usage_daily, usage_hourly
from service.resources import Resources
from service.settings import Settings
from service.usage import analytics
from service.usage.analytics import Scope
from service.usage.learning import refresh_stats

DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DATABASE = "toolscout_bench_analytics"
DAYS = 30
STATUSES = [
    ("ok", None, 0.90),
    ("tool_error", "ToolError", 0.04),
    ("invalid_arguments", "InvalidArguments", 0.02),
    ("timeout", "UpstreamTimeout", 0.015),
    ("upstream_error", "UpstreamError", 0.01),
    ("tool_error", "ValueError", 0.01),
    ("denied", "PermissionDenied", 0.005),
]


def register_bench(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("analytics", help="time the analytics queries on 1,000,000 executions (PostgreSQL)")
    parser.add_argument(
        "--admin-url",
        default=DEFAULT_ADMIN_URL,
        help="a PostgreSQL URL allowed to create databases (default %(default)s)",
    )
    parser.add_argument("--rows", type=positive_int, default=1_000_000, help="executions to generate (default 1000000)")
    parser.add_argument("--tools", type=positive_int, default=500, help="distinct tools called (default 500)")
    parser.add_argument("--callers", type=positive_int, default=200, help="distinct callers (default 200)")
    parser.add_argument(
        "--repeat", type=positive_int, default=5, help="timed runs per query after one warm-up (default 5)"
    )
    parser.add_argument("--seed", type=int, default=7, help="of the generated log (default 7)")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--json", type=Path, default=None, dest="json_out", help="also write the JSON here")
    parser.set_defaults(func=run)


@dataclass
class Generated:
    """Counts of what was written."""

    executions: int = 0
    searches: int = 0
    tools: list[str] = field(default_factory=list)
    callers: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _zipf_cumulative(n: int, s: float) -> list[float]:
    """Cumulative Zipf weights, for random.choices(cum_weights=...)."""
    return list(itertools.accumulate(1.0 / (i + 1) ** s for i in range(n)))


def _ts(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f+00")


def generate(conn: psycopg.Connection[Any], args: argparse.Namespace) -> Generated:
    """COPY a simulated month of traffic into executions, searches, tools and the statistics tables."""
    started = time.perf_counter()
    rng = random.Random(args.seed)
    out = Generated()
    servers = [f"srv{i:02d}" for i in range(max(1, args.tools // 25))]
    out.tools = [f"{servers[i % len(servers)]}__tool_{i:04d}" for i in range(args.tools)]
    out.callers = [f"agent-{i:03d}" for i in range(args.callers)]
    # A few tools are never part of any task: the "never found" ones.
    usable = out.tools[: int(len(out.tools) * 0.95)]
    tool_weights = _zipf_cumulative(len(usable), 0.9)
    tasks = [rng.sample(usable, rng.randint(2, 4)) for _ in range(800)]
    task_weights = _zipf_cumulative(len(tasks), 0.8)
    # Each agent has its own few jobs (a persona): a handful of task templates it keeps repeating.
    personas = {c: rng.choices(tasks, cum_weights=task_weights, k=rng.randint(3, 12)) for c in out.callers}
    caller_weights = _zipf_cumulative(len(out.callers), 1.0)
    queries = [
        f"query {i} about "
        + " ".join(
            rng.choice(["files", "issues", "mail", "weather", "sql", "docs", "calendar", "deploy", "logs", "billing"])
            for _ in range(3)
        )
        for i in range(5000)
    ]
    latency = {t: rng.lognormvariate(4.0, 1.0) for t in out.tools}
    end = datetime.now(UTC) - timedelta(minutes=1)
    start = end - timedelta(days=DAYS)
    span = (end - start).total_seconds()
    status_weights = list(itertools.accumulate(s[2] for s in STATUSES))
    executions: list[tuple[float, str]] = []
    searches: list[tuple[float, str]] = []
    while len(executions) < args.rows:
        caller = rng.choices(out.callers, cum_weights=caller_weights)[0]
        task = (
            rng.choice(personas[caller]) if rng.random() < 0.9 else rng.choices(usable, cum_weights=tool_weights, k=2)
        )
        # Sessions last at most 6 x 90 s: they all end before `end`.
        at = start.timestamp() + rng.random() * (span - 600)
        search_id = str(uuid.UUID(int=rng.getrandbits(128)))
        empty = rng.random() < 0.03
        shown = [] if empty else list(dict.fromkeys(task + rng.choices(usable, cum_weights=tool_weights, k=3)))[:5]
        query = rng.choice(queries)
        results = json.dumps([{"name": n, "score": round(1.0 - r / 10, 3)} for r, n in enumerate(shown)])
        searches.append((at, f"{search_id}\t{caller}\t{query}\t5\t{results}\t{len(shown)}\t{rng.uniform(5, 40):.3f}\t"))
        if empty or rng.random() < 0.25:
            continue  # a search no call followed
        for step in range(rng.randint(1, 6)):
            name = task[step % len(task)]
            at += rng.uniform(1, 90)
            status, error_class, _w = rng.choices(STATUSES, cum_weights=status_weights)[0]
            duration = latency[name] * rng.lognormvariate(0, 0.5) * (30 if status == "timeout" else 1)
            linked = search_id if step == 0 or rng.random() < 0.5 else "\\N"
            row_id = str(uuid.UUID(int=rng.getrandbits(128)))
            executions.append(
                (
                    at,
                    f"{row_id}\t{caller}\t{name}\t{name.split('__')[0]}\t{linked}\t{'0' * 64}\t"
                    f"{status}\t{error_class or chr(92) + 'N'}\t{duration:.3f}\t"
                    f"{rng.randint(20, 400)}\t{rng.randint(50, 4000)}\t",
                )
            )
            if len(executions) >= args.rows:
                break
    executions.sort(key=lambda item: item[0])  # a log is written in time order
    searches.sort(key=lambda item: item[0])
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO servers (id, transport, config, state, created_at) "
            "SELECT unnest(%s::text[]), 'catalog', '{}', 'registered', now()",
            (servers,),
        )
        cur.execute(
            "INSERT INTO tools (qualified_name, server_id, name, description, input_schema, annotations, "
            "tags, content_hash, deprecated, first_seen_at, last_seen_at) "
            "SELECT q, split_part(q, '__', 1), split_part(q, '__', 2), 'a tool', '{}', '{}', '[]', 'h', "
            "false, now() - interval '60 days', now() FROM unnest(%s::text[]) AS q",
            (out.tools,),
        )
        _copy(
            cur,
            "COPY searches (id, caller, query, k, results, result_count, latency_ms, created_at) FROM STDIN",
            (f"{line}{_ts(datetime.fromtimestamp(at, UTC))}\n" for at, line in searches),
        )
        _copy(
            cur,
            "COPY executions (id, caller, tool, server_id, search_id, arguments_digest, status, error_class, "
            "duration_ms, input_tokens, output_tokens, started_at, finished_at) FROM STDIN",
            (
                f"{line}{_ts(datetime.fromtimestamp(at, UTC))}\t{_ts(datetime.fromtimestamp(at, UTC))}\n"
                for at, line in executions
            ),
        )
    conn.commit()
    conn.autocommit = True
    conn.execute("VACUUM ANALYZE")
    conn.autocommit = False
    out.executions, out.searches = len(executions), len(searches)
    out.seconds = time.perf_counter() - started
    return out


def _copy(cur: psycopg.Cursor[Any], statement: str, lines: Any, chunk: int = 50_000) -> None:
    with cur.copy(statement) as copy:
        buffer = io.StringIO()
        for i, line in enumerate(lines, start=1):
            buffer.write(line)
            if i % chunk == 0:
                copy.write(buffer.getvalue())
                buffer = io.StringIO()
        copy.write(buffer.getvalue())


async def _time(fn: Callable[[], Awaitable[Any]], repeat: int) -> tuple[list[float], Any]:
    result = await fn()  # warm-up: plans and caches, as in a service that has run a while
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        result = await fn()
        times.append((time.perf_counter() - started) * 1000)
    return times, result


async def catch_up(resources: Resources) -> dict[str, Any]:
    """Fold the whole log into the statistics and rollups, as a service started on an old log would."""
    started = time.perf_counter()
    consumed = await refresh_stats(resources)
    seconds = time.perf_counter() - started
    return {
        "query": "refresh: fold the whole log (catch-up)",
        "rows": consumed,
        "median_ms": round(seconds * 1000, 1),
        "max_ms": round(seconds * 1000, 1),
    }


async def measure(resources: Resources, generated: Generated, repeat: int) -> list[dict[str, Any]]:
    """Time each analytics query, plus the statistics refresh with nothing new and with 10,000 new rows."""
    folded = await catch_up(resources)
    async with resources.session() as session:
        daily = (await session.execute(select(func.count()).select_from(usage_daily))).scalar_one()
        hourly = (await session.execute(select(func.count()).select_from(usage_hourly))).scalar_one()
    print(
        f"folded {folded['rows']:,} executions in {folded['median_ms'] / 1000:.1f} s "
        f"({folded['rows'] / max(folded['median_ms'] / 1000, 1e-9):,.0f} rows/s) into {daily:,} daily and "
        f"{hourly:,} hourly rollup rows"
    )
    window = Scope(since=datetime.now(UTC) - timedelta(days=DAYS + 1))
    busiest = generated.callers[0]
    permitted = frozenset(generated.tools[: int(len(generated.tools) * 0.8)])
    own = Scope(since=window.since, caller=busiest, tools=permitted)
    day = Scope(since=datetime.now(UTC) - timedelta(days=1))

    def q(fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Callable[[], Awaitable[Any]]:
        async def call() -> Any:
            async with resources.session() as session:
                return await fn(session, *args, **kwargs)

        return call

    cases: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("tools (30 days, all callers)", q(analytics.tool_usage, window, limit=50)),
        ("tools (30 days, one tool)", q(analytics.tool_usage, window, tool=generated.tools[0])),
        ("tools (30 days, one caller, 400 permitted tools)", q(analytics.tool_usage, own, limit=50)),
        ("tools (last day)", q(analytics.tool_usage, day, limit=50)),
        ("timeseries per hour (30 days)", q(analytics.timeseries, window, "hour")),
        ("timeseries per day (30 days)", q(analytics.timeseries, window, "day")),
        ("top callers (30 days)", q(analytics.top_callers, window, 20)),
        ("tools used together (30 days)", q(analytics.cooccurrence, window, limit=50)),
        ("tools used together (30 days, one caller)", q(analytics.cooccurrence, own, limit=50)),
        ("search -> call conversion (30 days)", q(analytics.conversion, window)),
        ("timeseries per hour (30 days, one caller)", q(analytics.timeseries, own, "hour")),
        ("searches with no result (30 days)", q(analytics.unanswered_searches, window, "no_result")),
        ("searches never followed by a call (30 days)", q(analytics.unanswered_searches, window, "no_call")),
        ("tools never found", q(analytics.never_found, Scope())),
        ("refresh, nothing new", lambda: refresh_stats(resources)),
    ]
    table = []
    for name, fn in cases:
        times, result = await _time(fn, repeat)
        rows = len(result) if isinstance(result, list) else (1 if isinstance(result, dict) else result)
        table.append(
            {
                "query": name,
                "rows": rows,
                "median_ms": round(statistics.median(times), 1),
                "max_ms": round(max(times), 1),
            }
        )
    table.append(await _refresh_new_rows(resources, generated))
    return [folded, *table]


async def _refresh_new_rows(resources: Resources, generated: Generated, count: int = 10_000) -> dict[str, Any]:
    at = datetime.now(UTC) - timedelta(seconds=resources.settings.learning.refresh_lag_seconds + 5)
    rng = random.Random(1)
    async with resources.session() as session:
        session.add_all(
            [
                Execution(
                    id=str(uuid.uuid4()),
                    caller=rng.choice(generated.callers),
                    tool=rng.choice(generated.tools),
                    server_id="srv00",
                    arguments_digest="0" * 64,
                    status="ok" if rng.random() < 0.9 else "tool_error",
                    duration_ms=rng.uniform(5, 500),
                    started_at=at,
                    finished_at=at,
                )
                for _ in range(count)
            ]
        )
        await session.commit()
    started = time.perf_counter()
    consumed = await refresh_stats(resources)
    ms = (time.perf_counter() - started) * 1000
    return {
        "query": f"refresh, {count:,} new executions",
        "rows": consumed,
        "median_ms": round(ms, 1),
        "max_ms": round(ms, 1),
    }


def _connect_admin(url: str) -> psycopg.Connection[Any]:
    """The admin connection, or one line on why not (nothing listening, a refused login, a malformed URL)."""
    try:
        return psycopg.connect(url, autocommit=True)
    except psycopg.Error as exc:
        reason = " ".join(str(exc).split())
        shown = re.sub(r"://([^:/@]*):[^@]*@", r"://\1:***@", url)  # never the password
        raise BenchFailed(
            f"cannot connect to PostgreSQL at {shown} ({reason}); pass --admin-url postgresql://USER@HOST:PORT/DB "
            "of a server where that user may create databases"
        ) from exc


def run(args: argparse.Namespace) -> int:
    # SQLAlchemy's spelling (TOOLSCOUT_DB__URL's) is accepted too; psycopg reads only the plain scheme.
    args.admin_url = args.admin_url.replace("postgresql+psycopg://", "postgresql://", 1)
    admin = _connect_admin(args.admin_url)
    admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
    admin.execute(f'CREATE DATABASE "{DATABASE}"')
    base = args.admin_url.rsplit("/", 1)[0]
    url = f"{base}/{DATABASE}".replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        upgrade_database(url)
        with psycopg.connect(f"{base}/{DATABASE}") as conn:
            generated = generate(conn, args)
        print(
            f"{generated.executions:,} executions and {generated.searches:,} searches "
            f"of {len(generated.callers)} "
            f"callers over {len(generated.tools)} tools, {DAYS} days, written in {generated.seconds:.1f} s"
        )
        settings = Settings(data_dir=Path(tempfile.gettempdir()) / "toolscout-bench", demo_catalog=False)
        settings.db.url = url
        settings.learning.refresh_lag_seconds = 0.0
        settings.learning.refresh_batch = 20_000
        table = asyncio.run(with_database(settings, lambda resources: measure(resources, generated, args.repeat)))
        with psycopg.connect(f"{base}/{DATABASE}") as conn:
            size = conn.execute("SELECT pg_size_pretty(pg_total_relation_size('executions'))").fetchone()
            version = conn.execute("SHOW server_version").fetchone()
        print(
            f"PostgreSQL {version[0] if version else '?'}, executions table with indexes "
            f"{size[0] if size else '?'}; times in ms, median and worst of {args.repeat} runs "
            "after a warm-up\n"
        )
        print_table(table, ["query", "rows", "median_ms", "max_ms"])
        slowest = max(row["max_ms"] for row in table if not row["query"].startswith("refresh"))
        print(f"\nslowest analytics query: {slowest:.1f} ms ({'within' if slowest <= 1000 else 'over'} the 1 s budget)")
        save_report(
            args.json_out,
            {
                "executions": generated.executions,
                "searches": generated.searches,
                "tools": len(generated.tools),
                "callers": len(generated.callers),
                "fill_seconds": round(generated.seconds, 1),
                "queries": table,
            },
        )
    finally:
        if not args.keep:
            admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        admin.close()
    return 0
