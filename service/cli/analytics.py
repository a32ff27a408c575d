"""`toolscout analytics tools | timeseries | callers | cooccurrence | conversion | unanswered | never-found`.

Reads the database directly with an admin's view (every caller, every tool), after folding what the logs
gained since the last refresh into the rollups."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from service.benchmarks.arguments import positive_int
from service.cli.database import print_table, with_database
from service.cli.settings_values import days_back, iso_time
from service.db.models import as_utc
from service.resources import Resources
from service.settings import Settings
from service.usage import analytics
from service.usage.analytics import Scope
from service.usage.learning import refresh_stats


def _common(parser: argparse.ArgumentParser, window: bool = True) -> None:
    if window:
        parser.add_argument("--since", type=iso_time, default=None, help="ISO 8601 (UTC)")
        parser.add_argument("--until", type=iso_time, default=None, help="ISO 8601 (UTC), exclusive")
        parser.add_argument("--days", type=days_back, default=30.0, help="window when --since is not given (30)")
        parser.add_argument("--caller", default=None, help="only this caller")
    parser.add_argument("--limit", type=positive_int, default=50, help="at most this many rows (50)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(parser=parser)  # for the refusal of an empty window, on one line as argparse's


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("analytics", help="report what agents search for and call")
    sub = parser.add_subparsers(dest="analytics_command", required=True)

    tools = sub.add_parser("tools", help="list calls, success rate, p50/p95 latency and errors by status per tool")
    _common(tools)
    tools.add_argument("--tool", default=None, help="only this tool (qualified name)")
    tools.set_defaults(func=cmd_tools)

    series = sub.add_parser("timeseries", help="count calls and searches per hour or day")
    _common(series)
    series.add_argument("--bucket", choices=["hour", "day"], default="day", help="one row per hour or day (day)")
    series.set_defaults(func=cmd_timeseries)

    callers = sub.add_parser("callers", help="list the callers with the most calls")
    _common(callers)
    callers.set_defaults(func=cmd_callers)

    pairs = sub.add_parser("cooccurrence", help="list the pairs of tools one caller used together")
    _common(pairs)
    pairs.set_defaults(func=cmd_cooccurrence)

    conversion = sub.add_parser("conversion", help="show how often a search is followed by a call of a result")
    _common(conversion)
    conversion.set_defaults(func=cmd_conversion)

    unanswered = sub.add_parser("unanswered", help="list searches with no result, or never followed by a call")
    _common(unanswered)
    unanswered.add_argument(
        "--kind", choices=["no_result", "no_call"], default="no_result", help="no result, or no call after (no_result)"
    )
    unanswered.set_defaults(func=cmd_unanswered)

    never = sub.add_parser("never-found", help="list the tools no search ever returned")
    _common(never, window=False)
    never.add_argument("--since", type=iso_time, default=None, help="not returned since (ISO 8601)")
    never.set_defaults(func=cmd_never_found)


def _scope(args: argparse.Namespace) -> Scope:
    since = as_utc(args.since) or datetime.now(UTC) - timedelta(days=args.days)
    until = as_utc(args.until)
    if until is not None and until <= since:  # an empty window: every figure would be 0 (exit 2)
        start = "--since" if args.since else f"the window's start ({args.days:g} days ago, --days)"
        args.parser.error(f"argument --until: {until:%Y-%m-%d %H:%M} is not after {start}")
    return Scope(since=since, until=until, caller=args.caller)


def _run(query: Callable[[AsyncSession], Awaitable[Any]]) -> Any:
    async def run(resources: Resources) -> Any:
        # Fold whatever the logs gained since the last refresh (a running service does this by itself).
        await refresh_stats(resources)
        async with resources.session() as session:
            return await query(session)

    return asyncio.run(with_database(Settings(), run))


def _window(args: argparse.Namespace) -> str:
    """The window an empty answer covered, as the user can check it ("no data in this window" named none)."""
    since = as_utc(args.since) or datetime.now(UTC) - timedelta(days=args.days)
    until = as_utc(args.until)
    span = f"from {since:%Y-%m-%d %H:%M} to {f'{until:%Y-%m-%d %H:%M}' if until else 'now'} UTC"
    span += f" (--days {args.days:g})" if args.since is None else ""
    return span + (f", caller {args.caller}" if args.caller else "")


def _readable(row: dict[str, Any]) -> dict[str, Any]:
    """A table row as a person reads it (the JSON keeps the values): a rate in percent (0.3333 read as a
    fraction or a share nobody could tell), a moment to the second in UTC, a tool no search returned "never"."""
    out = dict(row)
    for key, value in row.items():
        rate = key.endswith("_rate") or (key == "value" and str(row.get("metric", "")).endswith("_rate"))
        if rate and isinstance(value, float):
            out[key] = f"{value:.1%}"
        elif key.endswith("_at") and isinstance(value, str):
            out[key] = f"{datetime.fromisoformat(value).astimezone(UTC):%Y-%m-%d %H:%M:%S}Z"
    if "last_returned_at" in row and row["last_returned_at"] is None:
        out["last_returned_at"] = "never"
    return out


def _emit(args: argparse.Namespace, body: Any, rows: list[dict[str, Any]], columns: list[str], empty: str = "") -> int:
    if args.json:
        print(json.dumps(body, indent=2))
    elif not rows:
        print(empty or f"no calls {_window(args)}; widen it with --days or --since")
    else:
        print_table([_readable(row) for row in rows], columns)
    return 0


def cmd_tools(args: argparse.Namespace) -> int:
    scope = _scope(args)
    rows = _run(lambda s: analytics.tool_usage(s, scope, tool=args.tool, limit=args.limit))
    flat = [
        {
            **r,
            "p50_ms": r["latency_ms"]["p50"],
            "p95_ms": r["latency_ms"]["p95"],
            "errors": ", ".join(f"{k}={v}" for k, v in r["errors"].items()),
        }
        for r in rows
    ]
    return _emit(args, rows, flat, ["tool", "calls", "success_rate", "p50_ms", "p95_ms", "errors"])


def cmd_timeseries(args: argparse.Namespace) -> int:
    scope = _scope(args)
    rows = _run(lambda s: analytics.timeseries(s, scope, args.bucket))
    return _emit(
        args,
        rows,
        rows,
        ["bucket", "calls", "success_rate", "mean_latency_ms", "callers", "searches", "empty_searches"],
        f"no calls or searches {_window(args)}; widen it with --days or --since",
    )


def cmd_callers(args: argparse.Namespace) -> int:
    scope = _scope(args)
    rows = _run(lambda s: analytics.top_callers(s, scope, args.limit))
    return _emit(args, rows, rows, ["caller", "calls", "success_rate", "tools", "searches", "last_active_day"])


def cmd_cooccurrence(args: argparse.Namespace) -> int:
    scope = _scope(args)
    rows = _run(lambda s: analytics.cooccurrence(s, scope, limit=args.limit))
    flat = [{"tool_a": r["tools"][0], "tool_b": r["tools"][1], "count": r["count"]} for r in rows]
    empty = f"no two tools called one after the other by one caller {_window(args)}"
    return _emit(args, rows, flat, ["tool_a", "tool_b", "count"], empty)


def cmd_conversion(args: argparse.Namespace) -> int:
    scope = _scope(args)
    body = _run(lambda s: analytics.conversion(s, scope))
    rows = [{"metric": k, "value": v} for k, v in body.items()]
    return _emit(args, body, rows, ["metric", "value"])


def cmd_unanswered(args: argparse.Namespace) -> int:
    scope = _scope(args)
    rows = _run(lambda s: analytics.unanswered_searches(s, scope, args.kind, args.limit))
    what = "no search without a result" if args.kind == "no_result" else "no search left without a call"
    other = (
        "--kind no_call lists the searches no call followed"
        if args.kind == "no_result"
        else ("--kind no_result lists the searches that found nothing")
    )
    empty = f"{what} {_window(args)}; {other}"
    return _emit(args, rows, rows, ["count", "callers", "last_at", "query"], empty)


def cmd_never_found(args: argparse.Namespace) -> int:
    scope = Scope(since=as_utc(args.since))
    rows = _run(lambda s: analytics.never_found(s, scope, limit=args.limit))
    empty = "every active tool was returned by a search" + (f" since {args.since:%Y-%m-%d %H:%M}" if args.since else "")
    return _emit(args, rows, rows, ["tool", "server", "calls", "first_seen_at", "last_returned_at"], empty)
