"""The usage signal learns each call that came from its caller's search once, whatever order and time its two log
rows are written in (a search row written after its call, a call replayed from a spill file an hour late), and a
replica reading the log from the start holds the same evidence as one that read it as it came."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import insert

from indexer.embedding import HashingEmbedder
from service.db.models import Execution, Search
from service.resources import Resources, build_resources, close_resources, start_resources
from service.usage.learning import refresh_stats, start_learning, stop_learning
from service.usage.signal import UsageVectors, refresh_usage
from tests.conftest import make_settings

TOOL = "notes__remember_fact"


def _search(query: str, at: datetime) -> dict[str, object]:
    return {
        "id": str(uuid.uuid4()),
        "caller": "dev-1",
        "scope": "dev",
        "query": query,
        "k": 3,
        "results": [{"name": TOOL, "score": 0.5}],
        "result_count": 1,
        "latency_ms": 1.0,
        "created_at": at,
    }


def _call(search_id: object, at: datetime) -> dict[str, object]:
    return {
        "id": str(uuid.uuid4()),
        "caller": "dev-1",
        "scope": "dev",
        "tool": TOOL,
        "server_id": "notes",
        "search_id": search_id,
        "arguments_digest": "0" * 64,
        "status": "ok",
        "duration_ms": 5.0,
        "started_at": at,
        "finished_at": at,
    }


async def _write(resources: Resources, table: type, *rows: dict[str, object]) -> None:
    async with resources.session() as session:
        await session.execute(insert(table), list(rows))
        await session.commit()


def _learned(state: UsageVectors | None) -> list[str]:
    assert state is not None
    usage = state.tools.get(("dev", TOOL))
    return [query for query, _, _ in usage.queries] if usage is not None else []


async def test_pairs_written_out_of_order_are_learned_once_and_alike_after_a_restart(
    tmp_path: Path, database_url: str
) -> None:
    settings = make_settings(tmp_path, db={"url": database_url})
    settings.learning.refresh_lag_seconds = 0.0
    resources = build_resources(settings, HashingEmbedder())
    await start_resources(resources)
    await start_learning(resources)
    try:
        now = datetime.now(UTC)
        late_search = _search("store that Alice works at Acme", now - timedelta(seconds=30))
        await _write(resources, Execution, _call(late_search["id"], now - timedelta(seconds=29)))
        await refresh_stats(resources)  # the call is counted; its search is not in the log yet
        on_time = _search("keep this fact", now - timedelta(seconds=20))
        await _write(resources, Search, on_time)
        await _write(resources, Execution, _call(on_time["id"], now - timedelta(seconds=19)))
        await refresh_stats(resources)
        assert _learned(resources.usage) == ["keep this fact"]

        await _write(resources, Search, late_search)  # written late: a spill replayed
        replayed = _search("note down my address", now - timedelta(hours=1))
        await _write(resources, Search, replayed)
        await _write(resources, Execution, _call(replayed["id"], now - timedelta(hours=1)))  # replayed an hour late
        await refresh_stats(resources)
        await refresh_stats(resources)  # read again within the overlap: nothing learned twice
        # Before: ["keep this fact"] for as long as the process lived (its mark had passed both rows' times).
        expected = ["note down my address", "store that Alice works at Acme", "keep this fact"]
        assert _learned(resources.usage) == expected  # in the calls' time order

        restarted = UsageVectors()  # a replica started now reads the whole log
        await refresh_usage(resources, restarted)
        assert _learned(restarted) == expected
        assert resources.usage is not None
        weights = restarted.tools[("dev", TOOL)].weight, resources.usage.tools[("dev", TOOL)].weight
        assert abs(weights[0] - weights[1]) < 1e-4  # decayed a moment apart
    finally:
        await stop_learning(resources)
        await close_resources(resources)
