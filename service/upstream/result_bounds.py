"""A tool result of too many content blocks is refused by the transport, before the MCP SDK validates it.

An upstream's 8 MB result of 300,000 one-character blocks (under `execution.max_message_bytes`) held the event loop
3.9-5.1 s: the SDK's validation of the call result 2.9 s, the executor's conversion of the blocks 0.5 s. The largest
results of the demo servers hold a handful of blocks (a page of resource links, an image and its caption):
MAX_RESULT_BLOCKS leaves orders of magnitude of room, and a result at it holds the event loop about 0.15 s
(tests/security/test_result_blocks.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage

from service.security.json_body import collector_paused

MAX_RESULT_BLOCKS = 10_000
TOO_MANY_BLOCKS = f"it holds more than {MAX_RESULT_BLOCKS} content blocks (Toolscout's limit of one result)"


def _refusal(ident: types.RequestId, blocks: int) -> SessionMessage:
    error = types.ErrorData(code=types.PARSE_ERROR, message=f"{TOO_MANY_BLOCKS}: {blocks:,} blocks")
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=ident, error=error))


def _too_many(message: Any) -> SessionMessage | None:
    result = message.get("result") if isinstance(message, dict) and "method" not in message else None
    content = result.get("content") if isinstance(result, dict) else None
    ident = message.get("id") if isinstance(message, dict) else None
    if not isinstance(content, list) or len(content) <= MAX_RESULT_BLOCKS:
        return None
    if not isinstance(ident, int | str) or isinstance(ident, bool):
        return None  # no request to answer: the SDK's parser says what is wrong with it
    return _refusal(ident, len(content))


def refused_unparsed(line: str | bytes) -> SessionMessage | None:
    """The refusal of a message read whole, a response of more than MAX_RESULT_BLOCKS content blocks, found before
    the SDK's parser reads it: each block is an object, so only a message of more `{` is parsed here, with
    Python's parser (0.15 s for 300,000 blocks, the SDK's took 0.9 s and its validation of the result 2.9 s)."""
    if line.count(b"{" if isinstance(line, bytes) else "{") <= MAX_RESULT_BLOCKS:
        return None
    try:
        with collector_paused():
            message = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return _too_many(message)


def blocks_bounded(item: SessionMessage | Exception) -> SessionMessage | Exception:
    """The item, or for a response whose result holds more than MAX_RESULT_BLOCKS content blocks a parse error
    answering its request (the call fails at once with a 502 naming the limit; the session stays up)."""
    if not isinstance(item, SessionMessage) or not isinstance(item.message, types.JSONRPCResponse):
        return item
    content = item.message.result.get("content")
    if not isinstance(content, list) or len(content) <= MAX_RESULT_BLOCKS:
        return item
    return _refusal(item.message.id, len(content))


@asynccontextmanager
async def bounded_reads(streams: TransportStreams) -> AsyncIterator[TransportStreams]:
    """The transport's streams, what it reads passed through blocks_bounded: the SDK's HTTP client parses the
    events of an SSE stream itself (a JSON body is refused unparsed as it is read: transport.py's _CappedBody)."""
    read, write = streams
    sender, receiver = anyio.create_memory_object_stream[SessionMessage | Exception](0)

    async def forward() -> None:
        try:
            async with sender:
                async for item in read:
                    await sender.send(blocks_bounded(item))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    async with anyio.create_task_group() as tg:
        tg.start_soon(forward)
        try:
            yield receiver, write
        finally:
            await receiver.aclose()
            tg.cancel_scope.cancel()
