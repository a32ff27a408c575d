"""The supervisor restarts a failing loop with growing delays, reports it, and stops it on demand."""

from __future__ import annotations

import asyncio
import logging

import pytest

from service.supervisor import Supervisor


async def test_a_loop_is_restarted_after_any_error_with_backoff(caplog: pytest.LogCaptureFixture) -> None:
    supervisor = Supervisor(initial_seconds=0.01, max_seconds=0.04)
    runs: list[float] = []

    async def flaky() -> None:
        runs.append(asyncio.get_running_loop().time())
        if len(runs) <= 4:
            raise KeyError(f"bad {len(runs)}")  # not a database error: restarted all the same

    with caplog.at_level(logging.ERROR, logger="service.supervisor"):
        supervisor.start("flaky", flaky)
        await asyncio.wait_for(supervisor.wait("flaky"), 5)
    assert len(runs) == 5
    gaps = [b - a for a, b in zip(runs, runs[1:], strict=False)]
    assert gaps[0] >= 0.009 and gaps[1] >= 0.019 and gaps[2] >= 0.035 and gaps[3] >= 0.035  # doubling, capped
    status = supervisor.report()["flaky"]
    assert status["state"] == "stopped" and status["restarts"] == 4
    assert supervisor.status["flaky"].last_error == "KeyError: 'bad 4'"  # the log's text
    assert status["last_error"] == "KeyError"  # what /readyz shows anyone: the kind, never the text
    assert sum("background task flaky failed" in r.message for r in caplog.records) == 4
    assert supervisor.healthy()


async def test_a_failing_loop_shows_as_backoff_until_stopped() -> None:
    supervisor = Supervisor(initial_seconds=30.0)

    async def broken() -> None:
        raise RuntimeError("no")

    supervisor.start("broken", broken)
    await asyncio.sleep(0.05)
    assert supervisor.report()["broken"]["state"] == "backoff"
    assert supervisor.report()["broken"]["next_attempt_in"] == 30.0
    assert not supervisor.healthy()
    with pytest.raises(RuntimeError):
        supervisor.start("broken", broken)  # one loop per name
    await supervisor.stop_all()
    assert supervisor.report()["broken"]["state"] == "stopped"
