"""Token benchmark of the front end: what each mode's tools/list costs a client per turn, for a catalog.

The counts come from the same rendering the server uses (`render.mode_tools`, `render.search_text`), serialized
as the handshake-era wire carries it and counted with cl100k, so repeated runs print identical bytes. Live
timings (optional) run the real front end against a running Toolscout API.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from indexer.tools import normalize_server_id, validate_batch
from service.catalog_files import DEMO_CATALOGS, load_catalog_file
from service.errors import BadRequest
from service.mcp import render
from service.mcp.profiles import Profile
from service.mcp.render import MODES, Mode

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
) -> tuple[int, int]:
    """(tools listed, cl100k tokens) of a mode's tools/list."""
    scoped = [t for t in catalog if profile is None or profile.allows(t)]
    always = [t for t in scoped if profile is not None and t["name"] in profile.always_listed]
    tools = render.mode_tools(
        mode, catalog=scoped, always=always, active=active, default_k=profile.default_k if profile else None
    )
    return len(tools), render.count_tokens(render.wire_list(tools))


def typical_results(catalog: Sequence[Mapping[str, Any]], k: int, quantile: float) -> list[Mapping[str, Any]]:
    """The k tools whose search entries are closest in size to the given quantile of the catalog: a
    deterministic stand-in for a search answer of typical (0.5) or large (0.9) size."""
    sized = sorted(
        ((render.count_tokens(render.search_entry(t)), str(t["name"]), t) for t in catalog), key=lambda x: x[:2]
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
        "| scope | lazy | grouped | full | dynamic (start) | dynamic (after 1 search) | search result (typical / p90) |",
        "|---|---|---|---|---|---|---|",
    ]
    scopes = [("all", report["all"])] + [(f"profile `{n}`", r) for n, r in report["profiles"].items()]
    for name, scope in scopes:
        modes, search = scope["modes"], scope["search_result"]

        def cell(mode: str, modes: Mapping[str, Any] = modes) -> str:
            entry = modes[mode]
            return f"{entry['tokens']:,} ({entry['saving_pct']:g}% less)" if mode != "full" else f"{entry['tokens']:,}"

        after = scope["dynamic_after_one_search"]
        lines.append(
            f"| {name} ({scope['tools']} tools) | {cell('lazy')} | {cell('grouped')} | {cell('full')} | "
            f"{cell('dynamic')} | {after['tokens']:,} | {search['typical_tokens']:,} / {search['p90_tokens']:,} "
            f"(k={search['k']}) |"
        )
    return "\n".join(lines) + "\n"


def _stats(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "median_ms": round(statistics.median(ordered), 2),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 2),
    }


async def live_timings(
    settings: Any, *, rounds: int = 20, call_tool: str | None = None, call_arguments: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Latencies of tools/list, search_tools and call_tool through the real front end (in-memory MCP client)
    against the running API at settings.frontend.api_url."""
    from mcp import Client

    from service.mcp.server import create_frontend

    timings: dict[str, Any] = {"api_url": settings.frontend.api_url}
    for mode in MODES:
        frontend = create_frontend(settings, mode=mode, transport="memory")
        async with frontend.running(), Client(frontend.server, mode="legacy") as client:
            lists, searches, calls = [], [], []
            for i in range(rounds):
                started = time.perf_counter()
                await client.list_tools()
                lists.append(1000 * (time.perf_counter() - started))
                started = time.perf_counter()
                found = await client.call_tool(render.SEARCH, {"query": SAMPLE_QUERIES[i % len(SAMPLE_QUERIES)]})
                searches.append(1000 * (time.perf_counter() - started))
                if found.is_error:
                    raise BadRequest(f"search_tools failed against {settings.frontend.api_url}: {found.content}")
            name, arguments = call_tool, call_arguments or {}
            if name is None:
                name = _callable_without_arguments(await frontend.catalog())
            if name is not None:
                for _ in range(rounds):
                    started = time.perf_counter()
                    await client.call_tool(render.CALL, {"name": name, "arguments": arguments})
                    calls.append(1000 * (time.perf_counter() - started))
            timings[mode] = {"tools_list": _stats(lists), "search_tools": _stats(searches)}
            if calls:
                timings[mode]["call_tool"] = {"tool": name, **_stats(calls)}
    return timings


def _callable_without_arguments(catalog: Sequence[Mapping[str, Any]]) -> str | None:
    """A read-only tool that needs no arguments, to time calls without side effects."""
    for tool in catalog:
        hints = tool.get("annotations") or {}
        if hints.get("readOnlyHint") and not (tool.get("input_schema") or {}).get("required"):
            return str(tool["name"])
    return None
