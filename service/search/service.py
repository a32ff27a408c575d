"""Search as a service function: filter by caller and scope, rank, log. REST and MCP both call this."""

from __future__ import annotations

import difflib
import logging
import uuid
from dataclasses import replace
from typing import Any

import anyio

from indexer.index.base import SearchFilter
from indexer.query_text import normalize_query
from indexer.spelling import warm_spelling
from indexer.tools import normalize_server_id
from service.catalog.server_vectors import refresh_servers
from service.cluster.changes import last_seq
from service.cluster.state import cluster_state
from service.db.engine import write_bound
from service.db.models import Search, utcnow
from service.db.spill import spill_location
from service.errors import InvalidRequest, body_pointer
from service.observability import observe_search, span
from service.policy.callers import OPEN_CALLER, Caller
from service.policy.keys import key_resolver
from service.policy.service import permission_filter
from service.resources import Resources
from service.search.availability import mark_availability
from service.search.log import SearchLog
from service.search.retrieval import NameDirectory, Retriever, SearchOutcome
from service.settings import SearchSettings
from service.usage.signal import scope_key

logger = logging.getLogger(__name__)

SEARCH_LOG_TASK = "search-log"
WARM_UP = (
    "find the weather forecast for tomorrow",
    "List the files in my project folder. Then read the newest one and summarise it; finally send the summary "
    "to my team by email and remember who received it.",
)


async def start_search(resources: Resources) -> Retriever:
    """Build the retriever of started resources and load the catalog's names into it."""
    resources.retriever = Retriever(resources)
    async with resources.session() as session:
        # Read before the names: a change committed while they load is followed again (harmlessly).
        cluster_state(resources).start_seq = await last_seq(session)
        await resources.retriever.load_names(session)
    await refresh_servers(resources)
    return resources.retriever


async def warm_search(resources: Resources) -> None:
    """Warm before ready (the last step of start-up): load (or export, on the first start) the model, then search
    a short request and a long one of several parts as the local caller would (permissions, learned boosts,
    usage; neither logged nor counted), so that the first search after start-up costs what the hundredth does.
    An embedding alone left the first search 2.8 x the steady p50 at 10k tools."""
    assert resources.retriever is not None
    where = permission_filter(resources, OPEN_CALLER, SearchFilter())
    observability, resources.observability = resources.observability, None  # no stage metrics either
    await anyio.to_thread.run_sync(warm_spelling)
    try:
        for text in WARM_UP:
            await resources.retriever.search(
                text, 5, where, caller_id=OPEN_CALLER.id, boosts=resources.boosts, scope=scope_key(OPEN_CALLER.roles)
            )
    finally:
        resources.observability = observability
    if resources.batcher is not None:
        await anyio.to_thread.run_sync(resources.batcher.warm)


def result_view(tool: Any) -> dict[str, Any]:
    """The public shape of one ranked tool."""
    payload = tool.payload
    view = {
        "name": tool.name,
        "server": payload.get("server"),
        "tool": payload.get("name"),
        "description": payload.get("description", ""),
        "input_schema": payload.get("input_schema", {}),
        "annotations": payload.get("annotations", {}),
        "tags": payload.get("tags", []),
        "score": tool.score,
        # Whether the tool can be called now (service/search/availability.py); None (left out): not known here.
        "available": getattr(tool, "available", None),
        "unavailable_reason": getattr(tool, "unavailable_reason", None),
    }
    if tool.explain is not None:
        view["explain"] = tool.explain
    return view


async def search_tools(
    resources: Resources,
    caller: Caller,
    query: str,
    *,
    k: int | None = None,
    servers: list[str] | None = None,
    tags: list[str] | None = None,
    explain: bool = False,
) -> tuple[str, SearchOutcome]:
    """Rank tools for a request inside the caller's permissions; returns the search id and the outcome."""
    settings = resources.settings.search
    k = settings.default_k if k is None else k
    if not 1 <= k <= settings.max_k:
        reason = f"must be between 1 and {settings.max_k}"
        raise InvalidRequest(
            f"k {reason} (search.max_k)",
            errors=[{"pointer": body_pointer("k"), "reason": reason}],
            limit="search.max_k",
            max_k=settings.max_k,
        )
    if not query.strip():
        raise InvalidRequest(
            "query must not be empty", errors=[{"pointer": body_pointer("query"), "reason": "must not be empty"}]
        )
    if len(query) > settings.max_query_chars:
        raise InvalidRequest(
            f"query is longer than {settings.max_query_chars} characters (search.max_query_chars)",
            errors=[{"pointer": body_pointer("query"), "reason": f"at most {settings.max_query_chars} characters"}],
            limit="search.max_query_chars",
        )
    if not normalize_query(query):  # invisible characters, emoji or markdown only: the search reads nothing
        reason = "must hold words, not only invisible characters, symbols or markdown"
        raise InvalidRequest(f"query {reason}", errors=[{"pointer": body_pointer("query"), "reason": reason}])
    chosen = SearchFilter(
        servers=_filter_values("servers", server_ids(servers), settings), tags=_filter_values("tags", tags, settings)
    )
    assert resources.retriever is not None
    where = _within_view(resources.retriever.directory, permission_filter(resources, caller, chosen))
    await key_resolver(resources).charge_search(caller, query)
    with span("search", k=k):
        outcome = await resources.retriever.search(
            query,
            k,
            where,
            caller_id=caller.id,
            boosts=resources.boosts,
            explain=explain,
            scope=scope_key(caller.roles),
        )
    outcome = mark_availability(resources, outcome)
    search_id = str(uuid.uuid4())
    observe_search(resources, search_id, outcome.latency_ms, len(outcome.results))
    return search_id, outcome


# A server and a tag no tool has (a NUL is refused in both): what a filter value the caller may not see becomes.
NO_LABEL = "\x00"


def _within_view(directory: NameDirectory, where: SearchFilter) -> SearchFilter:
    """The filter with the servers and tags that no tool the caller may use has replaced by NO_LABEL: the index
    marks each value's rows, every row, so a tag of 10,000 hidden tools made a search that finds nothing take 2.6
    ms against 2.1 for an unknown tag (a server of theirs 2.2 against 2.0), telling the caller they exist."""
    if where.allowed is None or not (where.servers or where.tags):
        return where
    servers, tags = directory.labels(where.allowed)
    return replace(
        where,
        servers=tuple(dict.fromkeys(s if s in servers else NO_LABEL for s in where.servers)),
        tags=tuple(dict.fromkeys(t if t in tags else NO_LABEL for t in where.tags)),
    )


def filter_warnings(
    resources: Resources, caller: Caller, servers: list[str] | None, tags: list[str] | None
) -> list[dict[str, str]]:
    """A warning for each server or tag of a search that no tool the caller may use has, with the nearest one it has:
    `servers: ["tiem"]` (or `"Time"`) found nothing and said nothing. Tools the caller may not use are never named."""
    if not (servers or tags) or resources.retriever is None:
        return []
    allowed = permission_filter(resources, caller, SearchFilter()).allowed
    known_servers, known_tags = resources.retriever.directory.labels(allowed)
    warnings = []
    # Each value as the caller wrote it, and as the catalog would hold it.
    written = [
        ("servers", servers or [], server_ids(servers) or [], known_servers),
        ("tags", tags or [], tags or [], known_tags),
    ]
    for field, values, ids, known in written:
        for i, (value, label) in enumerate(zip(values[:MAX_FILTER_WARNINGS], ids, strict=False)):
            if label not in known:
                near = nearest_label(label, known)
                said = f"; did you mean {near}?" if near else ""
                reason = f"no tool this key may use has {field[:-1]} {value[:64]!r}{said}"
                warnings.append({"pointer": body_pointer(field, i), "reason": reason})
    return warnings


def server_ids(servers: list[str] | None) -> list[str] | None:
    """A search's servers as the catalog stores them: `Big Data/Cloud computing` of a catalog file is registered as
    `Big_Data_Cloud_computing`, and searching within the name as written found nothing."""
    return [normalize_server_id(s) if s.strip() else s for s in servers] if servers else servers


MAX_FILTER_WARNINGS = 20
NEAREST_LABEL_POOL = 2000  # difflib over more labels than this would cost the search more than it helps


def nearest_label(value: str, known: frozenset[str]) -> str | None:
    """The known server or tag a filter value most likely meant: the same but for case, else the closest spelling
    among a few thousand."""
    if len(known) > NEAREST_LABEL_POOL:
        return None
    folded = value.casefold()
    same = sorted(label for label in known if label.casefold() == folded)
    close = same or difflib.get_close_matches(value, sorted(known), n=1)
    return close[0] if close else None


def _filter_values(field: str, values: list[str] | None, settings: SearchSettings) -> tuple[str, ...]:
    """A search's servers or tags, each once (the index marks each value's rows: 100,000 repeats of one tag held
    every search 8.6 s), at most `search.max_filter_values` of them."""
    distinct = tuple(dict.fromkeys(values or ()))
    limit = settings.max_filter_values
    if len(distinct) > limit:
        reason = f"at most {limit} distinct values"
        raise InvalidRequest(
            f"{field} holds {len(distinct)} distinct values, over the limit of {limit} (search.max_filter_values)",
            errors=[{"pointer": body_pointer(field), "reason": reason}],
            limit="search.max_filter_values",
        )
    return distinct


async def start_search_log(resources: Resources) -> None:
    """Start-up hook: the batched writer of the search log, under the supervisor."""
    settings = resources.settings
    spill, shared = spill_location(settings.data_dir, settings.db.spill_dir, "searches-spill.jsonl")
    resources.search_log = SearchLog(
        resources.session,
        spill,
        write_bound(settings.database_url, settings.db.timeout_seconds),
        shared_spill=shared,
        max_pending=settings.logs.max_pending_searches,
    )
    await resources.search_log.replay()
    resources.supervisor.start(SEARCH_LOG_TASK, resources.search_log.run)


async def stop_search_log(resources: Resources) -> None:
    """Shutdown hook (the last one): write every pending search row before the database closes."""
    log, resources.search_log = resources.search_log, None
    if log is not None:
        await log.close(resources.supervisor.task(SEARCH_LOG_TASK))


async def log_search(
    resources: Resources, search_id: str, caller: Caller, query: str, k: int, outcome: SearchOutcome
) -> None:
    """Log the search: queued for the batched writer when it runs, else written at once (CLI, evaluation)."""
    row = {
        "id": search_id,
        "caller": caller.id[:128],
        "scope": scope_key(caller.roles),
        "query": query[:4000],
        "k": k,
        "results": [{"name": r.name, "score": r.score} for r in outcome.results],
        "result_count": len(outcome.results),
        "latency_ms": round(outcome.latency_ms, 3),
        "created_at": utcnow(),
    }
    if resources.search_log is not None:
        resources.search_log.record(row)
        return
    async with resources.session() as session:
        session.add(Search(**row))
        await session.commit()
