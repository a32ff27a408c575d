"""Turns at the argument-check threads: a caller with many checks waiting does not make another wait for all."""

from __future__ import annotations

import asyncio

from service.security.turns import Turns


async def test_waiting_callers_take_the_free_slots_in_turn() -> None:
    turns, order, release = Turns(1), [], asyncio.Event()

    async def hold(caller: str, label: str) -> None:
        async with turns.turn(caller):
            order.append(label)
            await release.wait()

    first = asyncio.create_task(hold("flood", "flood-0"))
    await asyncio.sleep(0)
    queued = [asyncio.create_task(hold("flood", f"flood-{i}")) for i in range(1, 6)]
    await asyncio.sleep(0)
    queued.append(asyncio.create_task(hold("admin", "admin")))
    queued.append(asyncio.create_task(hold("search", "search")))
    await asyncio.sleep(0)
    assert order == ["flood-0"] and turns.waiting == 7
    release.set()
    await asyncio.gather(first, *queued)
    assert order == ["flood-0", "flood-1", "admin", "search", "flood-2", "flood-3", "flood-4", "flood-5"]


async def test_a_cancelled_waiter_gives_up_its_turn_and_slots_are_not_lost() -> None:
    turns, entered, release = Turns(2), [], asyncio.Event()

    async def hold(caller: str) -> None:
        async with turns.turn(caller):
            entered.append(caller)
            await release.wait()

    holders = [asyncio.create_task(hold(c)) for c in ("a", "b")]
    await asyncio.sleep(0)
    cancelled, waiting = asyncio.create_task(hold("c")), asyncio.create_task(hold("d"))
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(*holders, waiting)
    assert cancelled.cancelled() and entered == ["a", "b", "d"]
    async with turns.turn("e"), turns.turn("f"):  # both slots are free again: neither waits
        assert turns.waiting == 0


async def test_a_caller_holds_one_slot_at_a_time_and_another_takes_the_free_one_at_once() -> None:
    turns, entered, release = Turns(2), [], asyncio.Event()

    async def hold(caller: str, label: str) -> None:
        async with turns.turn(caller):
            entered.append(label)
            await release.wait()

    flood = [asyncio.create_task(hold("flood", f"flood-{i}")) for i in range(3)]
    await asyncio.sleep(0)
    assert entered == ["flood-0"] and turns.waiting == 2  # the second slot stays free for someone else
    admin = asyncio.create_task(hold("admin", "admin"))
    await asyncio.sleep(0)
    assert entered == ["flood-0", "admin"]
    release.set()
    await asyncio.gather(*flood, admin)
    assert entered == ["flood-0", "admin", "flood-1", "flood-2"]
