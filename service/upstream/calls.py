"""Tool calls on an upstream session, and the translation of their failures into the service's errors.

A call waits for a ready session, carries its own timeout (sent upstream as a cancellation) and maps what
goes wrong to UpstreamTimeout (504) or UpstreamError (502), marking the session lost where it is broken."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Coroutine, Generator
from types import coroutine as types_coroutine
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, PARSE_ERROR, REQUEST_TIMEOUT
from pydantic import ValidationError

from service.errors import UpstreamError, UpstreamTimeout
from service.security.json_body import collector_paused
from service.upstream.config import ServerSpec
from service.upstream.health import ServerHealth, describe, said
from service.upstream.transport import unreadable

CLOSED_PING_SECONDS = 5.0  # after a CONNECTION_CLOSED error: does the session still answer?
T = TypeVar("T")
OutputSchema = tuple[str, dict[str, Any]]  # a listed output schema's digest (its version) and the schema


def output_schemas_of(tools: list[dict[str, Any]]) -> dict[str, OutputSchema]:
    """The output schema each listed tool declares, by the server's name of the tool."""
    found: dict[str, OutputSchema] = {}
    for tool in tools:
        schema = tool.get("outputSchema")
        if isinstance(schema, dict) and isinstance(tool.get("name"), str):
            text = json.dumps(schema, sort_keys=True, separators=(",", ":"))
            found[tool["name"]] = (hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(), schema)
    return found


def task_only_tools(tools: list[dict[str, Any]]) -> frozenset[str]:
    """The listed tools the server runs only as tasks (`execution.taskSupport: "required"`): the gateway calls tools
    without task augmentation, so every call of one fails (a search says so: service/search/availability.py)."""
    return frozenset(
        tool["name"]
        for tool in tools
        if isinstance(tool.get("name"), str)
        and isinstance(tool.get("execution"), dict)
        and tool["execution"].get("taskSupport") == "required"
    )


async def _unchecked(name: str, result: types.CallToolResult) -> None:
    """The MCP client's check of a result against the tool's output schema, left to the executor: the client
    runs jsonschema on the event loop with Python's re and no bound on its work, over a schema and a result the
    server both chose (and it lists the tools again for a name it has not seen)."""


def leave_results_to_the_executor(client: Client) -> None:
    """Turn off the client's own output-schema check (see _unchecked) on this session."""
    client.session.validate_tool_result = _unchecked  # type: ignore[method-assign]


@types_coroutine
def first_step_uncollected(coroutine: Coroutine[Any, Any, T]) -> Generator[Any, Any, T]:
    """Await `coroutine`, its first step (up to where it first waits) with the cyclic collector paused.

    The MCP client copies a call's arguments into its request (pydantic's model_dump) in that step, before anything
    is sent: every object it makes survives the step, so each collection it triggers walks the growing copy, and
    the arguments, for nothing. 180,000 small objects (1.9 MB of valid arguments) held the event loop 0.4-0.7 s a
    call, of which the collections took nine tenths; the objects left behind are collected once after the step."""
    try:
        with collector_paused():
            signal = coroutine.send(None)
    except StopIteration as stop:
        return cast(T, stop.value)
    while True:  # the rest delegated as `await` would (PEP 380)
        try:
            sent = yield signal
        except GeneratorExit:
            coroutine.close()
            raise
        except BaseException as exc:  # noqa: BLE001 - a cancellation or error thrown in goes on to the coroutine
            try:
                signal = coroutine.throw(exc)
            except StopIteration as stop:
                return cast(T, stop.value)
        else:
            try:
                signal = coroutine.send(sent)
            except StopIteration as stop:
                return cast(T, stop.value)


class ToolCalls:
    """The call half of an UpstreamConnection (which provides the session state declared here)."""

    spec: ServerSpec
    health: ServerHealth
    output_schemas: dict[str, OutputSchema]  # by the server's tool name, from its latest listing
    task_only: frozenset[str] = frozenset()  # the tools of that listing that only run as tasks (task_only_tools)
    _client: Client | None
    _ready: asyncio.Event
    _lost: asyncio.Event
    _lost_reason: str | None

    if TYPE_CHECKING:

        @property
        def id(self) -> str: ...

        def _mark_lost(self, reason: str) -> None: ...

        async def wait_ready(self, wait_seconds: float) -> bool: ...

    def _not_connected(self) -> UpstreamError:
        text = f"MCP server {self.id!r} is not connected ({self.health.state})"
        reason = f"; last error: {self.health.last_error}" if self.health.last_error else ""
        error = UpstreamError(text + reason, server=self.id, state=self.health.state)
        # The last error holds the child's stderr and exit, or the address it was refused: what GET /servers shows
        # admins only. The executor tells other callers this instead.
        error.caller_detail = text + "; an admin sees why in GET /servers"
        return error

    async def call_tool(self, name: str, arguments: dict[str, Any], *, timeout_seconds: float) -> types.CallToolResult:
        """Call a tool on the session; the upstream call is cancelled when `timeout_seconds` run out."""
        deadline = anyio.current_time() + timeout_seconds
        self.health.in_flight += 1
        started = time.perf_counter()
        ok = False
        try:
            client = self._client if self._ready.is_set() else None
            if client is None:
                await self.wait_ready(timeout_seconds)
                client = self._client
                if client is None:
                    raise self._not_connected()
            remaining = max(0.001, deadline - anyio.current_time())
            result = await self._send(client, name, arguments, remaining, timeout_seconds)
            ok = True
            return result
        finally:
            self.health.in_flight -= 1
            self.health.calls += 1
            if ok:
                self.health.latencies_ms.append((time.perf_counter() - started) * 1000)
            else:
                self.health.failures += 1

    async def _send(
        self, client: Client, name: str, arguments: dict[str, Any], remaining: float, limit: float
    ) -> types.CallToolResult:
        where = f"{self.id}/{name}"
        try:
            # The request's read timeout sends notifications/cancelled upstream; fail_after is a backstop.
            with anyio.fail_after(remaining + 1.0):
                return await first_step_uncollected(
                    client.call_tool(name, arguments, read_timeout_seconds=remaining)
                )
        except TimeoutError as exc:
            raise self._timeout(where, limit) from exc
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise self._timeout(where, limit) from exc
            # -32000 is also JSON-RPC's generic server error: only a session that no longer answers is closed (any
            # caller of a tool answering it restarted the server under everyone's calls in flight).
            if exc.code == CONNECTION_CLOSED and await self._closed(client):
                if self.spec.transport == "stdio":
                    # The closed pipe is usually the first sign of a dead child; let the exit watcher name it.
                    with anyio.move_on_after(0.5):
                        await self._lost.wait()
                # The transport's own reason when it gave one (the SDK's closure says only "Connection closed").
                told = said(exc.message) if exc.message and exc.message != "Connection closed" else None
                reason = self._lost_reason or told or "the connection closed"
                self._mark_lost(reason)
                raise UpstreamError(
                    f"MCP server {self.id!r} failed during {name}: {reason}; it is being restarted",
                    server=self.id,
                    restarting=True,
                ) from exc
            if exc.code == PARSE_ERROR:  # the transport's answer for a response it could not read
                raise UpstreamError(
                    f"MCP server {self.id!r} sent a result for {name} that cannot be read: {unreadable(exc.message)}",
                    server=self.id,
                ) from exc
            raise UpstreamError(
                f"MCP server {self.id!r} answered {name} with error {exc.code}: {said(exc.message)}",
                server=self.id,
                upstream_code=exc.code,
            ) from exc
        except ValidationError as exc:
            self._mark_lost(f"protocol error in the result of {name}")
            raise UpstreamError(
                f"MCP server {self.id!r} sent a malformed result for {name}; it is being restarted: "
                f"{describe(exc)[:300]}",
                server=self.id,
                restarting=True,
            ) from exc
        except RuntimeError as exc:  # invalid structured content, an unexpected input_required or claim
            raise UpstreamError(f"MCP server {self.id!r}: {name} failed: {describe(exc)}", server=self.id) from exc
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError, httpx2.HTTPError) as exc:
            self._mark_lost(f"transport failure: {describe(exc)}")
            raise UpstreamError(
                f"MCP server {self.id!r} failed during {name}: {describe(exc)}; it is being restarted",
                server=self.id,
                restarting=True,
            ) from exc

    async def _closed(self, client: Client) -> bool:
        """Whether the session is gone: a ping fails at once on a closed one, and an open one answers it."""
        if self._lost.is_set():
            return True
        try:
            await client.session.send_request(
                types.PingRequest(), types.EmptyResult, request_read_timeout_seconds=CLOSED_PING_SECONDS
            )
        except (MCPError, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError, httpx2.HTTPError):
            return True
        return False

    def _timeout(self, where: str, timeout: float) -> UpstreamTimeout:
        self.health.timeouts += 1
        return UpstreamTimeout(
            f"{where} did not answer within {timeout:g} s; the upstream call was cancelled",
            server=self.id,
            timeout_seconds=timeout,
        )
