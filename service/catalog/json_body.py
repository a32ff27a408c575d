"""JSON request bodies, read by one strict parser: POST /tools, /execute, /execute/batch and catalog files alike.

The standard library's reader, with what JSON does not have refused: NaN, Infinity and numbers past the floats
(the stdlib would let them through; an MCP client then sends them as null), and a key given twice in one object
(`{"arguments": {...}, "arguments": {}}` would call a tool with none). Integers of any size stay exact: arguments
pass on as sent, and a tool definition holding one the index cannot keep is refused at that value
(indexer/tools.py, INTEGER_RANGE) instead of stored rounded.

orjson read /tools bodies before: it made integers past 64 bits floats (a schema's `maximum` of 2**64 + 1 became
1.8446744073709552e+19 and refused the value it allows), kept the last of a key given twice, and said "number is
infinity" of 10**400. The price, measured here: a registration of the most tools one takes (5,000, 2.6 MB,
`bench load`'s catalog) reads in 36 ms instead of 8 ms; a registration then embeds for seconds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response


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


def strict_json(body: bytes | str) -> Any:
    """A JSON text as the standard library reads it, NaN, Infinity, overflowing numbers and a key given twice in
    one object refused (ValueError); integers stay exact (past 4,300 digits, a ValueError too)."""
    return json.loads(
        body, parse_constant=_refuse_constant, parse_float=_finite, object_pairs_hook=_without_duplicate_keys
    )


class StrictJsonRequest(Request):
    """A request whose JSON body is read by `strict_json`."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = strict_json(await self.body())
        return self._json


class StrictJsonBodyRoute(APIRoute):
    """A route whose JSON body is read by `strict_json`."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return route
