"""What a replica does with what anyone with Redis access can publish on its event channel."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from redis.asyncio import Redis

from service.cluster.bus import BUS_TASK, MAX_MESSAGE_CHARS, ClusterBus
from service.supervisor import Supervisor

REDIS_URL = "redis://127.0.0.1:6379/0"


async def _wait_for(condition: Any, seconds: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_messages_that_are_not_json_objects_are_skipped_and_the_listener_stays_up() -> None:
    bus = ClusterBus(REDIS_URL, f"toolscout-test-{uuid.uuid4().hex[:8]}", "replica")
    supervisor = Supervisor()
    seen: list[dict[str, Any]] = []

    async def on_keys(message: dict[str, Any]) -> None:
        seen.append(message)

    bus.on("keys", on_keys)
    publisher = Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        bus.start(supervisor)
        await _wait_for(lambda: bus.healthy)
        # `[` * 100,000 raised RecursionError, not ValueError: the listener restarted (events published meanwhile
        # were lost). A message past MAX_MESSAGE_CHARS is not parsed at all.
        deep, long = "[" * 100_000, '{"kind": "keys", "pad": "' + "x" * (MAX_MESSAGE_CHARS + 1) + '"}'
        for raw in ["[1, 2]", '"keys"', "42", "null", "not json", deep, long, '{"kind": "keys", "n": 1}']:
            await publisher.publish(bus.channel, raw)
        await _wait_for(lambda: len(seen) == 1)
        await asyncio.sleep(0.1)
        status = supervisor.status[BUS_TASK]
        assert (status.restarts, status.state, status.last_error) == (0, "running", None)
        assert seen == [{"kind": "keys", "n": 1}]
        assert bus.received == 1 and bus.healthy is True
    finally:
        await publisher.aclose()
        await bus.close()
