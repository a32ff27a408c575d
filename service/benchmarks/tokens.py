"""Token benchmark of the front end: what each mode's tools/list costs a client per turn, for a catalog.

The counts come from the same rendering the server uses (`render.mode_tools`, `render.search_text`),
serialized as the handshake-era wire carries it and counted with cl100k, so repeated runs print identical
bytes. Live timings (optional) run the real front end against a running Toolscout API.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types

from indexer.tools import normalize_server_id, validate_batch
from service.catalog.files import DEMO_CATALOGS, load_catalog_file
from service.errors import BadRequest, ToolscoutError
from service.mcp import MODES, Mode, render
from service.mcp.profiles import Profile

DEFAULT_K = 5
SAMPLE_QUERIES = (
    "create an issue in a repository",
    "read the contents of a file",
    "what time is it in Tokyo",
    "fetch a web page and convert it to markdown",
    "send a message to a channel",
    "show the git log of a repository",
    "remember a fact about a person",
    "list the files of a directory",
)


def load_catalog(path: Path | None) -> list[dict[str, Any]]:
    """Tools (REST shape, sorted by name) from a tools/list JSON, a JSONL catalog, or a folder of either;
    the demo catalog when no path is given."""
    path = path or DEMO_CATALOGS
    files = sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonl")) if path.is_dir() else [path]
    if not files:
        raise BadRequest(f"{path}: no .json or .jsonl catalog in this folder")
    raw: list[Any] = []
    for file in files:
        raw.extend(load_catalog_file(file).tools)
    batch = validate_batch(raw)
    tools = [
        {
            "name": t.qualified_name,
            "server": normalize_server_id(t.server),
            "tool": t.name,
            "description": t.description,
            "input_schema": t.input_schema,
            "annotations": t.annotations,
            "tags": list(t.tags),
        }
        for t in batch.tools
    ]
    return sorted(tools, key=lambda t: t["name"])


def list_tokens(
    mode: Mode,
    catalog: Sequence[Mapping[str, Any]],
    profile: Profile | None = None,
    active: Sequence[Mapping[str, Any]] = (),
    run_script: bool = True,
) -> tuple[int, int]:
    """(tools listed, cl100k tokens) of a mode's tools/list (run_script is listed as the server lists it: on by
    default, never under a profile)."""
    scoped = [t for t in catalog if profile is None or profile.allows(t)]
    always = [t for t in scoped if profile is not None and t["name"] in profile.always_listed]
    tools = render.mode_tools(
        mode,
        catalog=scoped,
        always=always,
        active=active,
        default_k=profile.default_k if profile else None,
        run_script=run_script and profile is None,
    )
    return len(tools), render.count_tokens(render.wire_list(tools))


def typical_results(catalog: Sequence[Mapping[str, Any]], k: int, quantile: float) -> list[Mapping[str, Any]]:
    """The k tools whose search entries are closest in size to the given quantile of the catalog: a
    deterministic stand-in for a search answer of typical (0.5) or large (0.9) size."""
    sized = sorted(
        ((render.count_tokens(render.search_entry(t)), str(t["name"]), t) for t in catalog),
        key=lambda x: x[:2],
    )
    if not sized:
        return []
    target = sized[min(len(sized) - 1, int(quantile * (len(sized) - 1) + 0.5))][0]
    nearest = sorted(sized, key=lambda x: (abs(x[0] - target), x[1]))[: min(k, len(sized))]
    return [t for _, _, t in nearest]


def _saving(tokens: int, full: int) -> float:
    return round(100.0 * (1 - tokens / full), 1) if full else 0.0


def scope_report(catalog: Sequence[Mapping[str, Any]], profile: Profile | None, k: int) -> dict[str, Any]:
    """Tokens of every mode for one scope (the whole catalog, or a profile)."""
    scoped = [t for t in catalog if profile is None or profile.allows(t)]
    k = (profile.default_k if profile and profile.default_k else None) or k
    _, full = list_tokens("full", catalog, profile)
    modes: dict[str, Any] = {}
    for mode in MODES:
        count, tokens = list_tokens(mode, catalog, profile)
        modes[mode] = {"tools": count, "tokens": tokens, "saving_pct": _saving(tokens, full)}
    typical = typical_results(scoped, k, 0.5)
    large = typical_results(scoped, k, 0.9)
    search = {
        "k": k,
        "typical_tokens": render.count_tokens(render.search_text(typical, "lazy")),
        "p90_tokens": render.count_tokens(render.search_text(large, "lazy")),
    }
    _, after = list_tokens("dynamic", catalog, profile, active=typical)
    lazy_turn = modes["lazy"]["tokens"] + search["typical_tokens"]
    return {
        "servers": len({t["server"] for t in scoped}),
        "tools": len(scoped),
        "modes": modes,
        "search_result": search,
        "lazy_with_one_search": {"tokens": lazy_turn, "saving_pct": _saving(lazy_turn, full)},
        "dynamic_after_one_search": {"tokens": after, "saving_pct": _saving(after, full)},
    }


def token_report(
    catalog: Sequence[Mapping[str, Any]], profiles: Mapping[str, Profile], label: str, k: int = DEFAULT_K
) -> dict[str, Any]:
    """The whole deterministic report."""
    return {
        "catalog": label,
        "encoding": "cl100k_base",
        "wire": "tools/list result, compact JSON, protocol 2025-11-25",
        "all": scope_report(catalog, None, k),
        "profiles": {name: scope_report(catalog, profiles[name], k) for name in sorted(profiles)},
    }


def dumps(report: Mapping[str, Any]) -> str:
    """The report as stable bytes (sorted keys, fixed indentation, trailing newline)."""
    return json.dumps(report, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def markdown_table(report: Mapping[str, Any]) -> str:
    """The README table: one row per scope and mode."""
    lines = [
        f"Catalog: {report['catalog']} ({report['all']['tools']} tools, {report['all']['servers']} servers), "
        "tokens per turn (cl100k).",
        "",
        "| scope | lazy | grouped | full | dynamic (start) | dynamic (after 1 search) "
        "| search result (typical / p90) |",
        "|---|---|---|---|---|---|---|",
    ]
    scopes = [("all", report["all"])] + [(f"profile `{n}`", r) for n, r in report["profiles"].items()]
    for name, scope in scopes:
        modes, search = scope["modes"], scope["search_result"]

        def cell(mode: str, modes: Mapping[str, Any] = modes) -> str:
            entry = modes[mode]
            return (
                f"{entry['tokens']:,} ({entry['saving_pct']:g}% less)"
                if mode != "full"
                else f"{entry['tokens']:,}"
            )

        after = scope["dynamic_after_one_search"]
        lines.append(
            f"| {name} ({scope['tools']} tools) | {cell('lazy')} | {cell('grouped')} | {cell('full')} | "
            f"{cell('dynamic')} | {after['tokens']:,} | "
            f"{search['typical_tokens']:,} / {search['p90_tokens']:,} "
            f"(k={search['k']}) |"
        )
    if "live" in report:
        lines += ["", *_live_table(report["live"])]
    if "code_mode" in report:
        lines += ["", *_code_mode_table(report["code_mode"])]
    return "\n".join(lines) + "\n"


def _code_mode_table(scenario: Mapping[str, Any]) -> list[str]:
    """The README's code-mode table: the same task in lazy mode and as one script."""
    lazy, code = scenario["lazy"], scenario["code_mode"]
    return [
        f"Code mode: {scenario['task']}",
        "",
        "| | model turns | context tokens (kept) | input tokens (context re-read each turn) |",
        "|---|---:|---:|---:|",
        f"| lazy, one call per step | {lazy['model_turns']} | {lazy['context_tokens']:,} | {lazy['input_tokens']:,} |",
        f"| code mode, one script | {code['model_turns']} | {code['context_tokens']:,} "
        f"({scenario['context_tokens_saving_pct']:g}% less) | {code['input_tokens']:,} "
        f"({scenario['input_tokens_saving_pct']:g}% less) |",
    ]


def _live_table(live: Mapping[str, Any]) -> list[str]:
    """The live timings as a table: median / p95 ms per mode and action."""
    lines = [
        f"Through the front end against {live['api_url']}, {live['rounds']} rounds (median / p95 ms):",
        "",
        "| mode | tools/list | search_tools | call_tool |",
        "|---|---|---|---|",
    ]
    for mode in MODES:
        row = live[mode]
        cells = [
            f"{row[a]['median_ms']} / {row[a]['p95_ms']}" + (f" ({row[a]['tool']})" if "tool" in row[a] else "")
            if a in row
            else "–"
            for a in ("tools_list", "search_tools", "call_tool")
        ]
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    return lines


def _stats(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "median_ms": round(statistics.median(ordered), 2),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 2),
    }


PACE_SECONDS = 0.35  # between rounds: three requests a round stay under the API's default 600 a minute


def _rate_limited(result: types.CallToolResult) -> bool:
    return bool(result.is_error) and _text(result).startswith("Rate limit exceeded")


def _text(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


async def _timed(call: Callable[[], Awaitable[Any]], accepted: Callable[[Any], bool], what: str) -> float:
    """Milliseconds of one accepted answer; a refused one (rate limit) is waited out and tried again."""
    for _ in range(10):
        started = time.perf_counter()
        answer = await call()
        elapsed = 1000 * (time.perf_counter() - started)
        if accepted(answer):
            return elapsed
        await anyio.sleep(1.0)
    raise BadRequest(f"{what} kept failing during the live timings: {answer}")


async def _time_mode(
    settings: Any, mode: Mode, rounds: int, call_tool: str | None, arguments: dict[str, Any]
) -> dict[str, Any]:
    from mcp import Client

    from service.mcp.server import create_frontend

    frontend = create_frontend(settings, mode=mode, transport="memory")
    failure: ToolscoutError | None = None
    async with frontend.running(), Client(frontend.server, mode="legacy") as client:
        try:
            timing = await _rounds(frontend, client, rounds, call_tool, arguments)
        except ToolscoutError as exc:  # raised below, outside the task groups that would wrap it
            failure = exc
    if failure is not None:
        raise failure
    return timing


async def _rounds(
    frontend: Any, client: Any, rounds: int, call_tool: str | None, arguments: dict[str, Any]
) -> dict[str, Any]:
    expected = len((await client.list_tools()).tools)
    name = call_tool
    if name is None:
        ready = {s["id"] for s in await frontend.api.servers() if s.get("state") == "ready"}
        name = _callable_without_arguments([t for t in await frontend.catalog() if t["server"] in ready])
    if name is not None:
        await _check_call(client, name, arguments)
    lists, searches, calls = [], [], []
    for i in range(rounds):
        query = SAMPLE_QUERIES[i % len(SAMPLE_QUERIES)]
        # A tools/list the API refused falls back to the meta-tools: shorter than the first one.
        lists.append(await _timed(client.list_tools, lambda r: len(r.tools) >= expected, "tools/list"))
        searches.append(
            await _timed(
                lambda q=query: client.call_tool(render.SEARCH, {"query": q}),
                lambda r: not r.is_error,
                "search",
            )
        )
        if name is not None:
            calls.append(
                await _timed(
                    lambda: client.call_tool(render.CALL, {"name": name, "arguments": arguments}),
                    lambda r: not _rate_limited(r),
                    "call_tool",
                )
            )
        await anyio.sleep(PACE_SECONDS)
    timing: dict[str, Any] = {"tools_list": _stats(lists), "search_tools": _stats(searches)}
    if calls:
        timing["call_tool"] = {"tool": name, **_stats(calls)}
    return timing


async def _check_call(client: Any, name: str, arguments: dict[str, Any]) -> None:
    """Stop before timing a call that fails (an unknown tool, wrong arguments): its figures would be an error's."""
    result = await client.call_tool(render.CALL, {"name": name, "arguments": arguments})
    if result.is_error and not _rate_limited(result):
        raise BadRequest(f"call_tool({name}) fails, so there is nothing to time: {_text(result)}")


async def live_timings(
    settings: Any,
    *,
    rounds: int = 20,
    call_tool: str | None = None,
    call_arguments: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Latencies of tools/list, search_tools and call_tool through the real front end (in-memory MCP client)
    against the running API at settings.frontend.api_url, for every mode."""
    timings: dict[str, Any] = {"api_url": settings.frontend.api_url, "rounds": rounds}
    for mode in MODES:
        timings[mode] = await _time_mode(settings, mode, rounds, call_tool, call_arguments or {})
    return timings


def _callable_without_arguments(catalog: Sequence[Mapping[str, Any]]) -> str | None:
    """A read-only tool of a connected server that needs no arguments: calls without side effects."""
    for tool in catalog:
        hints = tool.get("annotations") or {}
        if hints.get("readOnlyHint") and not (tool.get("input_schema") or {}).get("required"):
            return str(tool["name"])
    return None
