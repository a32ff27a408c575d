"""Executing a tool: resolve -> policy -> validate -> upstream call (with timeout) -> shape -> log.

Every call leaves exactly one row in the execution log, whatever happens, with one of these statuses:
ok, tool_error (the tool ran and reported an error), invalid_arguments, not_found, denied, timeout,
upstream_error, cancelled (the caller went away) and internal_error.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from service.catalog.lookup import few_suggestions, find_tool, tool_not_found
from service.db.models import Tool, utcnow
from service.errors import (
    HiddenTool,
    InvalidArguments,
    NotFound,
    PermissionDenied,
    RateLimited,
    ToolscoutError,
    Unauthorized,
    UpstreamError,
    UpstreamTimeout,
    counted,
    unexpected_error,
)
from service.execution.arguments import ArgumentValidator
from service.execution.log import ExecutionLog
from service.execution.redaction import redact_arguments
from service.execution.results import ResultStore, count_tokens_async, measure_result
from service.execution.screening import MAX_WARNINGS, clean_result, flag_answer
from service.observability import observe_execution, span
from service.policy.approvals import arguments_digest
from service.policy.callers import Caller
from service.policy.keys import key_resolver
from service.policy.service import authorize_call, may_use, policy_state, visible_names
from service.resources import Resources
from service.upstream.pool import UpstreamPool
from service.usage.signal import scope_key

logger = logging.getLogger(__name__)
DETAIL_CHARS = 2000  # of an error detail in the execution log


def status_of(error: BaseException) -> str:
    """The execution-log status of an error."""
    if isinstance(error, InvalidArguments):
        return "invalid_arguments"
    if isinstance(error, HiddenTool):
        return "denied"
    if isinstance(error, NotFound):
        return "not_found"
    if isinstance(error, PermissionDenied | RateLimited | Unauthorized):
        return "denied"
    if isinstance(error, UpstreamTimeout):
        return "timeout"
    if isinstance(error, UpstreamError):
        return "upstream_error"
    if isinstance(error, asyncio.CancelledError):
        return "cancelled"
    return "internal_error"


class ToolCache:
    """Recently resolved catalog rows, so the hot path makes no query. Syncs of upstream servers invalidate
    their entries at once; the TTL bounds how long a change made through another path (the /tools API) can
    go unseen."""

    def __init__(self, ttl_seconds: float) -> None:
        self.ttl_seconds = ttl_seconds
        self._entries: dict[str, tuple[float, Tool]] = {}

    def get(self, name: str) -> Tool | None:
        entry = self._entries.get(name)
        if entry is None:
            return None
        if time.monotonic() - entry[0] > self.ttl_seconds:
            self._entries.pop(name, None)
            return None
        return entry[1]

    def put(self, tool: Tool) -> Tool:
        if self.ttl_seconds > 0:
            self._entries[tool.qualified_name] = (time.monotonic(), tool)
        return tool

    def invalidate_server(self, server_id: str) -> None:
        for name in [n for n, (_, tool) in self._entries.items() if tool.server_id == server_id]:
            self._entries.pop(name, None)


@dataclass
class ExecutionResult:
    """What /execute returns for a call that reached the tool."""

    execution_id: str
    name: str
    server: str
    status: str
    content: list[dict[str, Any]]
    structured_content: dict[str, Any] | None
    is_error: bool
    result_id: str | None
    truncated: bool
    total_tokens: int
    returned_tokens: int
    duration_ms: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)
    # Structured content the answer left out for only repeating its text (results.measure_result): a script's
    # call still returns it (code mode), never over the budget, as the text it repeats fits.
    left_out: dict[str, Any] | None = None
    # What screening found in the result (policy.screen_results, execution/screening.py): [{pointer, reason}].
    warnings: list[dict[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "execution_id": self.execution_id,
            "name": self.name,
            "server": self.server,
            "status": self.status,
            "content": self.content,
            "structured_content": self.structured_content,
            "is_error": self.is_error,
            "result_id": self.result_id,
            "truncated": self.truncated,
            "total_tokens": self.total_tokens,
            "returned_tokens": self.returned_tokens,
            "duration_ms": self.duration_ms,
            "warnings": self.warnings,
        }


class Executor:
    """Runs calls on the upstream pool and logs each one; counts calls in flight so shutdown drains them."""

    def __init__(self, resources: Resources, pool: UpstreamPool, log: ExecutionLog, results: ResultStore) -> None:
        self.resources = resources
        self.pool = pool
        self.log = log
        self.results = results
        self.validator = ArgumentValidator()
        self.tools = ToolCache(resources.settings.execution.tool_cache_seconds)
        self.in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    async def execute(
        self,
        caller: Caller,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        search_id: str | None = None,
        approval_id: str | None = None,
        run_id: str | None = None,
    ) -> ExecutionResult:
        """Run one call; raises the service's errors (each logged first). `run_id` names the code-mode
        script that makes the call."""
        arguments = arguments or {}
        settings = self.resources.settings.execution
        execution_id = str(uuid.uuid4())
        started_at, started = utcnow(), time.perf_counter()
        row: dict[str, Any] = {
            "id": execution_id,
            "caller": caller.id,
            "tool": name,
            "server_id": None,
            "search_id": search_id,
            "arguments_digest": None,  # found off the event loop with the check (_run), else by _record
            "arguments": arguments if settings.log_raw_arguments else None,
            "status": "internal_error",
            "error_class": None,
            "error_detail": None,
            "input_tokens": 0,
            "output_tokens": 0,
            "result_id": None,
            "started_at": started_at,
            "run_id": run_id,
            "scope": scope_key(caller.roles),
        }
        self.in_flight += 1
        self._idle.clear()
        try:
            result = await self._run(caller, name, arguments, approval_id, execution_id, row)
            result.duration_ms = round((time.perf_counter() - started) * 1000, 3)
            row.update(status=result.status, output_tokens=result.total_tokens, result_id=result.result_id)
            durable = self._record(row, started, arguments)
            if durable is not None:
                # Commit mode: answer once the row is committed (or fsync'd to the spill file).
                await asyncio.shield(durable)
            return result
        except ToolscoutError as exc:
            if isinstance(exc, InvalidArguments) and exc.logged_detail and not settings.log_raw_arguments:
                # Places and keywords, no values: nothing to redact (looking took 30 ms of 1.5 MB of arguments).
                detail = exc.logged_detail[:DETAIL_CHARS]
            else:
                detail = self._logged(exc.detail, arguments)
            row.update(status=status_of(exc), error_class=type(exc).__name__, error_detail=detail)
            exc.extensions.setdefault("execution_id", execution_id)
            self._record(row, started, arguments)
            raise
        except BaseException as exc:
            if "finished_at" not in row:
                detail = self._logged(str(exc), arguments) or None
                row.update(status=status_of(exc), error_class=type(exc).__name__, error_detail=detail)
                self._record(row, started, arguments)
            raise
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._idle.set()

    def _logged(self, detail: str, arguments: dict[str, Any]) -> str:
        """An error's detail as the log keeps it: cut, and without the argument values it quotes (an upstream's
        message often does) unless the raw arguments are logged too."""
        if self.resources.settings.execution.log_raw_arguments:
            return detail[:DETAIL_CHARS]
        return redact_arguments(detail, arguments, DETAIL_CHARS)

    def _record(self, row: dict[str, Any], started: float, arguments: dict[str, Any]) -> asyncio.Future[None] | None:
        """Hand the finished row to the log (once); in commit mode, the future to await before answering."""
        if row["arguments_digest"] is None:  # the call ended before its arguments were checked
            row["arguments_digest"] = arguments_digest(arguments)
        row["duration_ms"] = round((time.perf_counter() - started) * 1000, 3)
        row["finished_at"] = utcnow()
        observe_execution(self.resources, row)
        return self.log.record(row)

    async def _run(
        self,
        caller: Caller,
        name: str,
        arguments: dict[str, Any],
        approval_id: str | None,
        execution_id: str,
        row: dict[str, Any],
    ) -> ExecutionResult:
        # Calls may outlive the request that resolved their key (a batch's wait their turn, a script's run for up
        # to a minute): none starts once it is revoked. The key's resolution is cached: no query on /execute.
        await key_resolver(self.resources).require_active(caller)
        # The session connects only if used: a cached tool and a policy decided in memory cost no query.
        async with self.resources.session() as session:
            visible = visible_names(self.resources, caller)
            if visible is not None and name not in visible:
                # Decided in memory for hidden and missing names alike: a catalog query for the missing ones only
                # would time them apart. The policy snapshot tells the log which of the two it was.
                hidden = name in policy_state(self.resources).servers
                raise tool_not_found(name, self.resources, visible, hidden=hidden)
            tool = self.tools.get(name)
            if tool is None:
                tool = self.tools.put(await find_tool(session, name, self.resources, visible))
            row["server_id"] = tool.server_id
            with span("policy.authorize", tool=tool.qualified_name):
                if not may_use(self.resources, caller, tool.qualified_name, tool.server_id, tool.name):
                    raise tool_not_found(name, self.resources, visible, hidden=True)  # the same 404 as a missing tool
                await authorize_call(self.resources, session, caller, tool, arguments, approval_id)
            if session.in_transaction():
                await session.commit()

        # Checked before counted: counting 1.5 MB of invalid arguments took 1.1 s of CPU, a flood's largest cost.
        # The digest, and the JSON of valid arguments to count, are made in the check's thread and turn: 46 ms and
        # 12 ms of 1.5 MB, which held the event loop.
        def digest() -> None:
            row["arguments_digest"] = arguments_digest(arguments)

        encoded: list[str] = []

        def encode() -> None:
            encoded.append(json.dumps(arguments, ensure_ascii=False, separators=(",", ":")))

        await self.validator.check(tool, arguments, caller.id, before=digest, after=encode)
        row["input_tokens"] = await count_tokens_async(encoded[0])
        connection = self.pool.get(tool.server_id)
        if connection is None:
            raise UpstreamError(
                f"{tool.qualified_name} belongs to {tool.server_id!r}, a server registered without a "
                "connection; add it as an upstream server (POST /servers) to execute its tools",
                server=tool.server_id,
            )
        timeout = connection.spec.timeout_seconds or self.resources.settings.execution.timeout_seconds
        with span("upstream.call", server=tool.server_id, tool=tool.name):
            try:
                result = await connection.call_tool(tool.name, arguments, timeout_seconds=timeout)
            except UpstreamError as exc:
                if exc.caller_detail is not None and not caller.is_admin:
                    exc.detail = exc.caller_detail
                raise
        if not result.is_error:
            schema = connection.output_schemas.get(tool.name)
            await self.validator.check_result(tool, schema, result.structured_content, tool.server_id, caller.id)
        content = [block.model_dump(by_alias=True, mode="json", exclude_none=True) for block in result.content]
        given, warnings, screening = result.structured_content, [], self.resources.settings.policy.screen_results
        if screening:
            cleaned = await clean_result(content, given)
            content, given, warnings = cleaned.content, cleaned.structured, cleaned.warnings
        budget = self.resources.settings.execution.result_token_budget
        text, cut, structured = await measure_result(content, given, budget)
        result_id = None
        if cut.truncated:
            result_id = await self.results.save(caller.id, tool.qualified_name, text, cut.total_tokens)
            content = [
                {"type": "text", "text": cut.head},
                {
                    "type": "text",
                    "text": f"[truncated: {cut.head_tokens} of {cut.total_tokens} tokens shown; "
                    f"GET /results/{result_id}?offset={cut.head_tokens} returns the rest]",
                },
            ]
        if screening:
            warnings = (warnings + await flag_answer(content, structured))[:MAX_WARNINGS]
            if warnings:
                logger.warning("%s: result screened: %s", tool.qualified_name, warnings[0]["reason"][:200])
        return ExecutionResult(
            execution_id=execution_id,
            name=tool.qualified_name,
            server=tool.server_id,
            status="tool_error" if result.is_error else "ok",
            content=content,
            structured_content=structured,
            is_error=bool(result.is_error),
            result_id=result_id,
            truncated=cut.truncated,
            total_tokens=cut.total_tokens,
            returned_tokens=cut.head_tokens,
            left_out=given if structured is None and not cut.truncated else None,
            warnings=warnings,
        )

    async def execute_batch(
        self, caller: Caller, calls: list[dict[str, Any]], concurrency: int
    ) -> list[dict[str, Any]]:
        """Run calls in parallel (at most `concurrency` at once); results in request order, each its own
        success or problem, so one failure does not fail the others."""
        limiter = asyncio.Semaphore(max(1, concurrency))

        async def one(index: int, call: dict[str, Any]) -> dict[str, Any]:
            async with limiter:
                try:
                    result = await self.execute(
                        caller,
                        call["name"],
                        call.get("arguments") or {},
                        search_id=call.get("search_id"),
                        approval_id=call.get("approval_id"),
                    )
                except ToolscoutError as exc:
                    return _failed_item(index, exc)
                except Exception as exc:  # noqa: BLE001 - one call's bug must not orphan its siblings
                    return _failed_item(index, unexpected_error(exc, f"batch call {index} of {call['name']!r}"))
                return {"index": index, "ok": True, "status": 200, "result": result.as_dict(), "error": None}

        with few_suggestions():
            return list(await asyncio.gather(*(one(i, call) for i, call in enumerate(calls))))

    async def drain(self, grace_seconds: float) -> bool:
        """Wait for the calls in flight to finish; False if some still run after the grace period."""
        try:
            await asyncio.wait_for(self._idle.wait(), grace_seconds)
        except TimeoutError:
            logger.warning("shutdown: %s still in flight after %g s", counted(self.in_flight, "call"), grace_seconds)
            return False
        return True


def _failed_item(index: int, error: ToolscoutError) -> dict[str, Any]:
    return {"index": index, "ok": False, "status": error.status, "result": None, "error": error.problem()}
