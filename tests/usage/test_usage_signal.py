"""The usage signal: zero without history, growing with evidence, bounded, and learned inside one scope."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import insert

from indexer.embedding import SentenceTransformerEmbedder
from indexer.intents import split_intents, whole_from_parts
from service.catalog.service import register_tools
from service.db.models import Execution, Search
from service.policy.callers import Caller
from service.resources import Resources, build_resources, close_resources, start_resources
from service.search.ranking import Candidate, add_signal, behind_newcomers, rank
from service.search.service import log_search, search_tools, start_search
from service.settings import LearningSettings
from service.usage.learning import refresh_stats, start_learning, stop_learning
from service.usage.signal import UsageVectors, evidence, scope_key
from tests.conftest import make_settings

SETTINGS = LearningSettings()
NOW = datetime.now(UTC)


def _vectors_with(
    uses: int,
    scope: str = "dev",
    tool: str = "a__tool",
    rows: list[list[float]] | None = None,
    state: UsageVectors | None = None,
    caller: str = "me",
) -> UsageVectors:
    """`uses` past queries of `tool`, embedded as `rows` (default: all [1, 0])."""
    state = state or UsageVectors()
    for i in range(uses):
        state.add(scope, tool, caller, f"query {i}", NOW, SETTINGS.usage_max_queries)
    usage = state.tools.get((scope, tool))
    if usage is not None:
        usage.vectors = np.array(rows or [[1.0, 0.0]] * len(usage.queries), dtype=np.float32)
        usage.weigh(np.full(len(usage.queries), uses / len(usage.queries)), SETTINGS)
    return state


def test_zero_without_history_growing_with_evidence_and_bounded() -> None:
    assert _vectors_with(0).signal("dev", "me", [1.0, 0.0], ["a__tool"], SETTINGS) == {}
    values = [_vectors_with(n).signal("dev", "me", [1.0, 0.0], ["a__tool"], SETTINGS)["a__tool"] for n in (1, 4, 16)]
    values.append(_vectors_with(64).signal("dev", "me", [1.0, 0.0], ["a__tool"], SETTINGS)["a__tool"])
    assert values == sorted(values) and len(set(values)) == 4
    assert values[-1] < SETTINGS.usage_weight
    assert evidence(SETTINGS.usage_half_evidence, SETTINGS.usage_half_evidence) == 0.5
    # A query unlike the tool's past queries gets nothing, however much history there is.
    assert _vectors_with(64).signal("dev", "me", [0.0, 1.0], ["a__tool"], SETTINGS) == {}


def test_the_nearest_past_query_counts_and_two_tools_with_the_same_past_share_it() -> None:
    # Two phrasings far apart: a query like either one gets the signal (a centroid of both would be near neither).
    state = _vectors_with(2, rows=[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    near_one = state.signal("dev", "me", [0.0, 1.0, 0.0], ["a__tool"], SETTINGS)["a__tool"]
    assert near_one > 0.9 * SETTINGS.usage_weight * evidence(2, SETTINGS.usage_half_evidence)
    # A second tool asked for in the same words: the two split what one alone would get.
    _vectors_with(2, tool="b__tool", rows=[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], state=state)
    shared = state.signal("dev", "me", [0.0, 1.0, 0.0], ["a__tool", "b__tool"], SETTINGS)
    assert shared["a__tool"] == shared["b__tool"] < 0.51 * near_one
    # Only candidates compete: a tool with history that is not a candidate takes nothing.
    assert state.signal("dev", "me", [0.0, 1.0, 0.0], ["a__tool"], SETTINGS)["a__tool"] == near_one
    # A query near nobody's past (cosine 0.6 < usage_floor) gets a small share only.
    assert state.signal("dev", "me", [0.6, 0.0, 0.8], ["a__tool"], SETTINGS)["a__tool"] < 0.15 * near_one


def test_a_new_tool_leading_by_more_than_the_weight_stays_first() -> None:
    state = _vectors_with(10_000, tool="used__tool")
    values = state.signal("dev", "me", [1.0, 0.0], ["used__tool", "new__tool"], SETTINGS)
    assert set(values) == {"used__tool"} and 0.99 * SETTINGS.usage_weight < values["used__tool"] < SETTINGS.usage_weight
    candidates = {
        "new__tool": Candidate("new__tool", SETTINGS.usage_weight),
        "used__tool": Candidate("used__tool", 0.0),
    }
    add_signal(candidates, "usage", values)
    assert [c.name for c in rank(candidates, {}, 2)] == ["new__tool", "used__tool"]


def test_usage_never_lifts_a_tool_past_one_without_history_that_led_it() -> None:
    candidates = {
        "top__used": Candidate("top__used", 2.0),  # with history, above the newcomer: nothing holds it back
        "new__tool": Candidate("new__tool", 1.0),  # no history in this scope
        "other__used": Candidate("other__used", 0.9),  # with history, no usage value for this request
        "low__used": Candidate("low__used", 0.5),
    }
    history = {"top__used", "other__used", "low__used"}
    values = behind_newcomers(candidates, {"top__used": 0.4, "low__used": 3.0, "gone__tool": 1.0}, history)
    assert values["top__used"] == 0.4 and "gone__tool" not in values
    assert 0.499 < values["low__used"] < 0.5  # up to just below the newcomer, past the other used tool
    add_signal(candidates, "usage", values)
    assert [c.name for c in rank(candidates, {}, 4)] == ["top__used", "new__tool", "low__used", "other__used"]
    # Without a newcomer ahead the value is kept whole.
    assert behind_newcomers(candidates, {"new__tool": 0.0, "top__used": 3.0}, history)["top__used"] == 3.0


def test_another_scope_reads_nothing_and_the_set_is_bounded() -> None:
    state = _vectors_with(64, scope=scope_key(["dev"]))
    assert state.signal(scope_key(["dev", "ops"]), "me", [1.0, 0.0], ["a__tool"], SETTINGS) == {}
    assert len(state.tools[("dev", "a__tool")].queries) == SETTINGS.usage_max_queries
    assert scope_key(["ops", "dev"]) == scope_key(["dev", "ops"]) == "dev,ops"


TOOLS = [
    {"server": "notes", "name": "remember_fact", "description": "Store a fact in the knowledge graph"},
    {"server": "notes", "name": "list_facts", "description": "List every stored fact"},
    {"server": "clock", "name": "current_time", "description": "The current time in a time zone"},
]
DEV = Caller("dev-1", frozenset({"dev"}))
OPS = Caller("ops-1", frozenset({"ops"}))


@asynccontextmanager
async def learning_resources(tmp_path: Path, tools: list[dict], **learning: float) -> AsyncIterator[Resources]:
    """The service's resources with learning started (no refresh lag, `learning` settings) and `tools` registered."""
    settings = make_settings(tmp_path)
    settings.learning.refresh_lag_seconds = 0.0
    for name, value in learning.items():
        setattr(settings.learning, name, value)
    resources = build_resources(settings, SentenceTransformerEmbedder())
    await start_resources(resources)
    await start_search(resources)
    await start_learning(resources)
    assert not (await register_tools(resources, tools)).errors
    try:
        yield resources
    finally:
        await stop_learning(resources)
        await close_resources(resources)


@pytest.fixture
async def resources(tmp_path: Path) -> AsyncIterator[Resources]:
    async with learning_resources(tmp_path, TOOLS) as resources:
        yield resources


async def _use(resources: Resources, caller: Caller, query: str, tool: str, times: int) -> None:
    """Searches by `caller` that led to a successful call of `tool`, logged as the service logs them."""
    rows = []
    for i in range(times):
        search_id, outcome = await search_tools(resources, caller, query, k=3)
        await log_search(resources, search_id, caller, query, 3, outcome)
        at = datetime.now(UTC) - timedelta(seconds=60 - i)
        rows.append(
            {
                "id": str(uuid.uuid4()),
                "caller": caller.id,
                "tool": tool,
                "server_id": tool.split("__")[0],
                "search_id": search_id,
                "arguments_digest": "0" * 64,
                "status": "ok",
                "duration_ms": 5.0,
                "started_at": at,
                "finished_at": at,
            }
        )
    async with resources.session() as session:
        await session.execute(insert(Execution), rows)
        await session.commit()
    await refresh_stats(resources)


def _usage(outcome: object, name: str) -> float:
    result = next(r for r in outcome.results if r.name == name)  # type: ignore[attr-defined]
    return float(result.explain["signals"].get("usage", 0.0))


@pytest.mark.model
async def test_the_signal_is_learned_per_scope_and_the_clear_text_match_still_wins(resources: Resources) -> None:
    query = "remember that Alice works at Acme"
    _, before = await search_tools(resources, DEV, query, k=3, explain=True)
    assert all("usage" not in r.explain["signals"] for r in before.results)  # type: ignore[index]
    await _use(resources, DEV, "remember that Carol works at Initech", "notes__list_facts", 2)
    _, few = await search_tools(resources, DEV, query, k=3, explain=True)
    await _use(resources, DEV, "remember that Dave works at Globex", "notes__list_facts", 10)
    _, many = await search_tools(resources, DEV, query, k=3, explain=True)
    assert 0.0 < _usage(few, "notes__list_facts") < _usage(many, "notes__list_facts") < SETTINGS.usage_weight
    assert _usage(many, "notes__remember_fact") == 0.0  # no history of its own
    # Another scope's view gets no usage signal.
    _, other = await search_tools(resources, OPS, query, k=3, explain=True)
    assert all("usage" not in r.explain["signals"] for r in other.results)  # type: ignore[index]
    # A tool with no history and the clearly best text match stays first.
    _, clock = await search_tools(resources, DEV, "what is the current time in Tokyo", k=3, explain=True)
    assert clock.results[0].name == "clock__current_time"
    async with resources.session() as session:
        rows = (await session.execute(Search.__table__.select())).all()
    assert {row.scope for row in rows} == {"dev"}  # the searches are logged with their scope


@pytest.mark.model
async def test_a_past_split_request_is_kept_as_the_search_embeds_it(resources: Resources) -> None:
    """A request of three parts or more is embedded as its parts' weighted mean (search.whole_from_parts): the
    usage signal keeps the same vector for it, so the same request asked again is at cosine 1 to its past; one
    of two parts keeps its own embedding, as its search does."""
    three = "Note that Erin works at Umbrella. Then list every fact about her; finally remember her manager"
    two = "Note that Erin works at Umbrella. Then list every fact about her"
    parts = split_intents(three)
    assert len(parts) == 3 and len(split_intents(two)) == 2
    await _use(resources, DEV, three, "notes__remember_fact", 1)
    await _use(resources, DEV, two, "notes__remember_fact", 1)
    assert resources.usage is not None
    kept = resources.usage.cache[three]
    assert kept.tolist() == pytest.approx(whole_from_parts(parts, await resources.embed(parts)), abs=1e-5)
    assert float(kept @ np.asarray((await resources.embed([three]))[0])) < 0.999  # not the text's own embedding
    assert resources.usage.cache[two].tolist() == pytest.approx((await resources.embed([two]))[0], abs=1e-5)


def test_another_callers_flood_is_bounded_kept_apart_and_evicts_its_own_past_first() -> None:
    """In one scope: the searcher's own past counts in full, another caller's at most usage_weight *
    evidence(usage_evidence_per_caller), whatever it floods, and never dilutes the searcher's own."""
    state = _vectors_with(40, tool="flooded", rows=[[1.0, 0.0]] * 32, caller="mallory")
    bound = SETTINGS.usage_weight * evidence(SETTINGS.usage_evidence_per_caller, SETTINGS.usage_half_evidence)
    theirs = state.signal("dev", "bob", [1.0, 0.0], ["flooded"], SETTINGS)["flooded"]
    mine = state.signal("dev", "mallory", [1.0, 0.0], ["flooded"], SETTINGS)["flooded"]
    assert 0.9 * bound < theirs <= bound < 0.15 and mine > 2.5
    # bob's own past of another tool, asked in the same words: the flood takes next to nothing of its share.
    _vectors_with(4, tool="right", rows=[[1.0, 0.0]] * 4, caller="bob", state=state)
    alone = _vectors_with(4, tool="right", rows=[[1.0, 0.0]] * 4, caller="bob").signal(
        "dev", "bob", [1.0, 0.0], ["right"], SETTINGS
    )["right"]
    assert state.signal("dev", "bob", [1.0, 0.0], ["right", "flooded"], SETTINGS)["right"] == alone
    # A full set loses the oldest query of the caller holding the most: bob's one query outlives mallory's flood.
    usage = state.tools[("dev", "flooded")]
    usage.keep("bob's request", NOW, "bob", SETTINGS.usage_max_queries)
    for i in range(100):
        usage.keep(f"flood {i}", NOW, "mallory", SETTINGS.usage_max_queries)
    assert len(usage.queries) == SETTINGS.usage_max_queries
    assert [q for q, _, c in usage.queries if c == "bob"] == ["bob's request"]


@pytest.mark.model
async def test_a_past_request_is_read_as_its_search_reads_it(resources: Resources) -> None:
    """Chat shorthand spelled out, a bare file name said to be one, quoted values out of the dense text
    (indexer/query_text.py): the usage signal keeps the vector the search embedded for the same request."""
    asked = "DM 'standup moved' with notes.txt"
    await _use(resources, DEV, asked, "notes__remember_fact", 1)
    assert resources.usage is not None
    kept = resources.usage.cache[asked]
    searched = (await resources.embed(["direct message '' with file notes.txt"]))[0]
    assert kept.tolist() == pytest.approx(searched, abs=1e-5)
    assert float(kept @ np.asarray((await resources.embed([asked]))[0])) < 0.99  # not the text as written
