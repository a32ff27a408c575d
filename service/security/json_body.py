"""JSON request bodies, read by one strict parser: every route's body (each router that takes one sets
`route_class=StrictJsonBodyRoute`), catalog files and the messages of a code-mode script's engine alike. FastAPI's
own reader kept the last of a key given twice on the other routes: `{"script": "return 1", "script": "..."}` ran
the second program on /run while a proxy or a log reading the first saw the first
(tests/security/test_strict_bodies.py).

The standard library's reader, with what JSON does not have refused: NaN, Infinity and numbers past the floats
(the stdlib would let them through; an MCP client then sends them as null), and a key given twice in one object
(`{"arguments": {...}, "arguments": {}}` would call a tool with none). Integers of any size stay exact: arguments
pass on as sent, and a tool definition holding one the index cannot keep is refused at that value
(indexer/json_values.py, INTEGER_RANGE) instead of stored rounded.

orjson read /tools bodies before: it made integers past 64 bits floats (a schema's `maximum` of 2**64 + 1 became
1.8446744073709552e+19 and refused the value it allows), kept the last of a key given twice, and said "number is
infinity" of 10**400. The price, measured here: a registration of the most tools one takes (5,000, 2.6 MB,
`bench load`'s catalog) reads in 36 ms instead of 8 ms; a registration then embeds for seconds.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import re
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any
from weakref import WeakKeyDictionary

import anyio
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from service.errors import json_pointer
from service.security.turns import Turns

# Longer bodies are parsed in a worker thread, one at a time, where the parser's hooks let the event loop in every
# few ms: on the loop, each 1.5 MB body of a flood held it for 34 ms (an admin's /execute waited behind eight).
INLINE_BYTES = 64_000
# A \\uD800-\\uDFFF escape: the only way a lone surrogate gets into a string (UTF-8 bytes cannot hold one).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text[:40]} is beyond the range of a number")
    return number


def _without_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"the key {key[:80]!r} appears twice in one object")
        found[key] = value
    return found


def _lone_surrogate(value: Any) -> str | None:
    """The JSON pointer of the first string (or key) holding a lone surrogate, None when there is none."""
    stack: list[tuple[list[Any], Any]] = [([], value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode()
            except UnicodeEncodeError:
                return json_pointer(path)
        elif isinstance(item, dict):  # pushed last first: popped in document order, a key before its value
            for key, child in reversed(item.items()):
                stack.append(([*path, key], child))
                stack.append((path, key))
        elif isinstance(item, list):
            stack.extend(reversed([([*path, index], child) for index, child in enumerate(item)]))
    return None


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off for one synchronous step whose objects all survive it (a message read, or copied,
    whole): each collection they set off would walk them, and what they copy, for nothing."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def strict_json(body: bytes | str) -> Any:
    """A JSON text as the standard library reads it, NaN, Infinity, overflowing numbers, a key given twice in one
    object and a lone surrogate (`"\\ud800"`: no character, it cannot be hashed, stored or sent on as UTF-8, a
    500 on PostgreSQL) refused (ValueError); integers stay exact (past 4,300 digits, a ValueError too)."""
    collecting = gc.isenabled()
    # Every object the parser makes survives, so each collection it triggers walks the growing value for nothing:
    # a 1.5 MB /execute body (two more alive, as in a flood) took 32 ms with collections, 15 ms without. Not
    # collector_paused(): leaving its generator allocates, which starts the collection the parse owes inside
    # strict_json instead of after it returns.
    gc.disable()
    try:
        value = json.loads(
            body, parse_constant=_refuse_constant, parse_float=_finite, object_pairs_hook=_without_duplicate_keys
        )
    finally:
        if collecting:
            gc.enable()
    escape = _SURROGATE_ESCAPE if isinstance(body, str) else _SURROGATE_ESCAPE_BYTES
    if escape.search(body) and (where := _lone_surrogate(value)) is not None:  # type: ignore[arg-type]
        raise ValueError(
            f"a string or key at {where or '/'} holds a lone surrogate (a \\uD800-\\uDFFF escape not in a"
            " high-low pair), which is no Unicode character"
        )
    return value


# Whose turn it is at the parse thread: the key of the request's caller, which its key check (run before the body
# is read) leaves in the request's scope; requests without one (no key yet) share one turn.
PARSE_TURN = "toolscout.parse_turn"
# What a body sent without Content-Length (chunked) costs is charged once it has arrived, before it is parsed: the
# key check leaves here an awaitable of the body's size that raises when the caller cannot pay for it
# (service/policy/service.py, charge_body).
BODY_CHARGE = "toolscout.body_charge"
_parse_turns: WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[Turns, anyio.CapacityLimiter]] = WeakKeyDictionary()


def _parse_thread() -> tuple[Turns, anyio.CapacityLimiter]:
    """One long body parsed at a time (per event loop): eight at once left the loop an eighth of the GIL. Callers
    take the thread in turn: first come, first served, one key's 1.9 MB bodies (each a token of its rate limit)
    held every other caller's long body behind all of its own (an admin's 120 KB /execute at 4.5 s, p50)."""
    loop = asyncio.get_running_loop()
    held = _parse_turns.get(loop)
    if held is None:
        held = _parse_turns[loop] = (Turns(1), anyio.CapacityLimiter(1))
    return held


async def read_json(body: bytes, turn: str = "") -> Any:
    """`strict_json` of a body or message, a long one in the worker thread, in `turn`'s turn (ValueError when it
    is no JSON)."""
    if len(body) > INLINE_BYTES:
        turns, thread = _parse_thread()
        async with turns.turn(turn):
            return await anyio.to_thread.run_sync(strict_json, body, limiter=thread)
    return strict_json(body)


class StrictJsonRequest(Request):
    """A request whose JSON body is read by `strict_json`."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = await read_json(await self.body(), str(self.scope.get(PARSE_TURN, "")))
        return self._json


BEFORE_BODY = "_runs_before_body"


def before_body(guard: Callable[[Request], Awaitable[Any]]) -> Callable[[Request], Awaitable[Any]]:
    """Mark a route dependency that takes only the request (a key or role check) to run before the route reads
    its body: FastAPI reads and parses a body before it solves any dependency, so a client without a key had 12 MB
    of JSON parsed (+330 MB) before its 401. The guard runs again as a dependency, so it must answer a second call
    of one request from what the first left (tests/security/test_key_before_body.py)."""
    setattr(guard, BEFORE_BODY, True)
    return guard


class StrictJsonBodyRoute(APIRoute):
    """A route whose JSON body is read by `strict_json`, after its `before_body` guards."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handler = super().get_route_handler()
        guards = [
            d.call for d in self.dependant.dependencies if d.call is not None and getattr(d.call, BEFORE_BODY, False)
        ]

        async def route(request: Request) -> Response:
            strict = StrictJsonRequest(request.scope, request.receive)
            for guard in guards:
                await guard(strict)
            if (charge := strict.scope.pop(BODY_CHARGE, None)) is not None:  # here: FastAPI's reader makes a 400
                await charge(len(await strict.body()))  # of what `json()` raises
            return await handler(strict)

        return route
