"""Running one script: the queue of scripts, the budgets, and each tool call through the /execute path.

A tool call of a script is `Executor.execute` with the caller's identity and the script's run id, exactly what
POST /execute calls, after one rate-limit token: permissions, approvals, validation, timeouts, result budgets
and the execution log all apply. A destructive call without a matching approval stops the script with
`approval_required`; the rerun passes the granted ids (`approval_ids`), each matched to its call by tool and
argument digest. When the wall-clock budget ends, the engine is killed and the calls in flight are cancelled.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select

from service.catalog.lookup import few_suggestions
from service.db.models import Approval
from service.errors import (
    ApprovalRequired,
    BadRequest,
    InvalidArguments,
    InvalidRequest,
    NotFound,
    RateLimited,
    ToolscoutError,
    Unavailable,
    body_pointer,
    counted,
    unexpected_error,
    verb,
)
from service.execution.executor import status_of
from service.execution.results import measure
from service.execution.runtime import get_gateway
from service.policy.approvals import arguments_digest
from service.policy.callers import Caller
from service.policy.keys import key_resolver
from service.policy.service import usable_names
from service.resources import Resources
from service.search.service import log_search, result_view, search_tools
from service.security.request_body import NUL_REASON

from .run_state import NO_RETURN, CallRecord, ScriptRun, failure, script_error, undefined_name_hint, value_of
from .sandbox import Sandbox


class CodeMode:
    """The scripts of one service: at most `max_concurrent` run at once, the others wait in turn."""

    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self.slots = asyncio.Semaphore(max(1, resources.settings.code_mode.max_concurrent))
        self.running = 0
        self.waiting = 0
        self.peak_running = 0
        self.in_flight: Counter[str] = Counter()  # per caller: its scripts running or waiting

    async def run(
        self,
        caller: Caller,
        script: str,
        approval_ids: Sequence[str] = (),
        timeout_seconds: float | None = None,
    ) -> dict[str, Any]:
        """Run a script to its end or its budget; every outcome is a response, errors included."""
        settings = self.resources.settings.code_mode
        if not settings.enabled:
            raise NotFound("Code mode is turned off (code_mode.enabled)")
        if len(script) > settings.max_script_chars:
            reason = f"at most {settings.max_script_chars} characters"
            raise InvalidRequest(
                f"A script holds {reason}", errors=[{"pointer": body_pointer("script"), "reason": reason}]
            )
        budget = min(timeout_seconds or settings.timeout_seconds, settings.timeout_seconds)
        run = ScriptRun(str(uuid.uuid4()), caller, await self._approvals(caller, approval_ids))
        if (held := self.in_flight[caller.id]) >= settings.max_per_caller:
            raise RateLimited(
                f"{counted(held, 'script')} of this caller {verb(held, 'runs or waits', 'run or wait')} already "
                "(code_mode.max_per_caller); try again when one has ended",
                retry_after=1.0,
                limit="code_mode.max_per_caller",
            )
        if self.slots.locked() and self.waiting >= settings.max_queued:
            raise Unavailable(
                f"Code mode is busy: {counted(self.running, 'script')} {verb(self.running, 'runs', 'run')} and "
                f"{self.waiting} {verb(self.waiting, 'waits its', 'wait their')} turn "
                f"(code_mode.max_concurrent, code_mode.max_queued); try again later",
                limit="code_mode.max_queued",
            )
        queued = time.perf_counter()
        self.in_flight[caller.id] += 1
        try:
            self.waiting += 1
            try:
                await self.slots.acquire()
            finally:
                self.waiting -= 1
            started = time.perf_counter()
            self.running += 1
            self.peak_running = max(self.peak_running, self.running)
            try:
                with few_suggestions():
                    outcome = await self._execute(run, script, budget)
            finally:
                self.running -= 1
                self.slots.release()
        finally:
            self.in_flight[caller.id] -= 1
            if not self.in_flight[caller.id]:
                del self.in_flight[caller.id]
        finished = time.perf_counter()
        response = await self._response(run, outcome)
        response["queued_ms"] = round((started - queued) * 1000, 3)
        response["duration_ms"] = round((finished - started) * 1000, 3)
        return response

    async def _execute(self, run: ScriptRun, script: str, budget: float) -> dict[str, Any]:
        settings = self.resources.settings.code_mode
        config = {
            "script": script,
            "tools": usable_names(self.resources, run.caller),
            "memory_bytes": settings.memory_mib * 1024 * 1024,
            "process_memory_bytes": settings.process_memory_mib * 1024 * 1024,
            "cpu_seconds": budget,
            "niceness": settings.niceness,
            "max_log_lines": settings.max_log_lines,
            "max_log_chars": settings.max_log_line_chars,
            "max_value_chars": settings.max_value_chars,
        }
        sandbox = await Sandbox.start(config, run.caller.key_id or run.caller.id)
        try:
            async with asyncio.timeout(budget):
                return await self._converse(run, sandbox)
        except TimeoutError:
            return failure(
                "timeout",
                f"the script ran out of its {budget:g} s wall-clock budget: look for a loop that never ends, or ask "
                "for less with timeout_seconds; its calls' statuses are in `calls`",
            )
        finally:
            await sandbox.close()
            await self._cancel_calls(run)

    async def _converse(self, run: ScriptRun, sandbox: Sandbox) -> dict[str, Any]:
        reader = asyncio.create_task(self._read(run, sandbox))
        stopper = asyncio.create_task(run.stop.wait())
        try:
            done, _ = await asyncio.wait({reader, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if reader in done:
                return reader.result()
            return {"ok": False, "error": run.error}
        finally:
            for task in (reader, stopper):
                task.cancel()
            await asyncio.gather(reader, stopper, return_exceptions=True)

    async def _read(self, run: ScriptRun, sandbox: Sandbox) -> dict[str, Any]:
        while True:
            try:
                message = await sandbox.receive()
            except (ValueError, asyncio.LimitOverrunError) as exc:
                return failure("engine_error", f"the engine sent a message that could not be read: {exc}")
            if message is None:
                return failure("engine_error", f"the engine stopped ({await sandbox.diagnostics()})")
            op = message.get("op")
            if op == "done":
                outcome: dict[str, Any] = message.get("outcome") or {}
                return outcome
            if op == "log":
                run.logs.append(str(message.get("text", "")))
            elif op == "call":
                self._start_call(run, sandbox, message)

    def _start_call(self, run: ScriptRun, sandbox: Sandbox, message: dict[str, Any]) -> None:
        limit = self.resources.settings.code_mode.max_tool_calls
        record = CallRecord(int(message["id"]), str(message["kind"]), str(message["name"]), message.get("line"))
        run.calls.append(record)
        if len(run.calls) > limit:
            record.status = "refused"
            made = f"the script made more than {counted(limit, 'call')}"
            run.halt(script_error("call_limit", made, record.line, call=record.index))
            return
        arguments = message.get("arguments")
        task = asyncio.create_task(self._call(run, sandbox, record, arguments if isinstance(arguments, dict) else {}))
        run.tasks.add(task)
        task.add_done_callback(run.tasks.discard)

    async def _call(self, run: ScriptRun, sandbox: Sandbox, record: CallRecord, arguments: dict[str, Any]) -> None:
        started = time.perf_counter()
        try:
            if record.kind == "search":
                value, ok = await self._search(run, arguments), True
                record.status = "ok"
            else:
                value, ok = await self._tool(run, record, arguments)
        except ApprovalRequired as exc:
            record.status, record.error = "approval_required", exc.problem()
            record.execution_id = exc.extensions.get("execution_id")
            run.halt(
                script_error(
                    "approval_required",
                    exc.detail,
                    record.line,
                    call=record.index,
                    approval_id=exc.extensions.get("approval_id"),
                    approval=exc.extensions.get("approval"),
                )
            )
            return
        except Exception as exc:  # noqa: BLE001 - every call must answer the script, which waits for it
            error = exc if isinstance(exc, ToolscoutError) else unexpected_error(exc, f"run {run.run_id}")
            # A hidden tool is logged as denied but the script sees what a missing tool gets (least knowledge).
            record.status = (
                "rate_limited"
                if isinstance(error, RateLimited)
                else "not_found"
                if isinstance(error, NotFound)
                else "invalid_arguments"
                if isinstance(error, BadRequest)  # a search's query past its limit: the script's to fix
                else status_of(error)
            )
            record.error = error.problem()
            record.execution_id = error.extensions.get("execution_id")
            message = error.detail
            if record.status == "not_found" and record.kind == "tool":  # the same words for a hidden tool
                message += ": `await search_tools(\"what it should do\")` lists the tools this key may call"
            value, ok = {"message": message, "status": record.status, "problem": record.error}, False
        finally:
            record.duration_ms = round((time.perf_counter() - started) * 1000, 3)
        if not ok:
            value |= {"tool": record.name, "call": record.index}
        await sandbox.send({"id": record.index, "ok": ok, "value": value})

    async def _tool(self, run: ScriptRun, record: CallRecord, arguments: dict[str, Any]) -> tuple[Any, bool]:
        await self._charge(run.caller)
        if "\x00" in record.name:  # refused as POST /execute refuses it (no tool has one; SQL text cannot)
            raise InvalidArguments(f"A tool name {NUL_REASON}", errors=[{"pointer": "/name", "reason": NUL_REASON}])
        # The digest walks the arguments on the event loop (90 ms for 180,000 small objects): only when it may match.
        approved = any(tool == record.name for tool, _ in run.approvals)
        waiting = run.approvals.get((record.name, arguments_digest(arguments))) if approved else None
        approval_id = waiting.pop(0) if waiting else None
        executor = get_gateway(self.resources).executor
        result = await executor.execute(run.caller, record.name, arguments, approval_id=approval_id, run_id=run.run_id)
        record.execution_id, record.status = result.execution_id, result.status
        record.warnings = result.warnings
        if result.is_error:
            text = value_of(result)
            message = text if isinstance(text, str) and text else json.dumps(text, ensure_ascii=False)
            record.error = {"detail": message[:2000]}
            return {"message": message, "status": result.status}, False
        return value_of(result), True

    async def _search(self, run: ScriptRun, arguments: dict[str, Any]) -> list[dict[str, Any]]:
        await self._charge(run.caller)
        query, k = arguments.get("query"), arguments.get("k")
        if not isinstance(query, str) or not query.strip():
            raise InvalidArguments("search_tools(query, k) needs a query string", errors=[{"pointer": "/query"}])
        if "\x00" in query:
            raise InvalidArguments(f"The query {NUL_REASON}", errors=[{"pointer": "/query", "reason": NUL_REASON}])
        default_k = self.resources.settings.search.default_k
        # Past search.max_k search_tools refuses it (naming the limit): clamped, a script got fewer tools than asked.
        k = max(1, int(k)) if isinstance(k, int | float) and not isinstance(k, bool) else default_k
        search_id, outcome = await search_tools(self.resources, run.caller, query, k=k)
        await log_search(self.resources, search_id, run.caller, query, k, outcome)
        keys = ("name", "server", "description", "input_schema", "annotations", "score")
        said = ("available", "unavailable_reason")  # false, and why, when the tool cannot be called now
        views = [result_view(result) for result in outcome.results]
        run.found.update(str(v["name"]) for v in views)
        return [{key: v[key] for key in keys} | {k: v[k] for k in said if v[k] is not None} for v in views]

    async def _charge(self, caller: Caller) -> None:
        """One rate-limit token per call, from the caller's bucket, as a request to /execute takes; none once the
        caller's key is revoked (a script runs for up to code_mode.timeout_seconds)."""
        await (resolver := key_resolver(self.resources)).require_active(caller)
        limiter = resolver.limiter
        wait = await limiter.acquire_async(caller.key_id or caller.id)
        if wait > 0:
            rate = counted(limiter.rate * 60, "request")
            raise RateLimited(f"Rate limit of {rate} per minute exceeded", retry_after=wait)

    async def _cancel_calls(self, run: ScriptRun) -> None:
        tasks = list(run.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for record in run.calls:
            if record.status == "running":
                record.status = "cancelled"

    async def _approvals(self, caller: Caller, approval_ids: Sequence[str]) -> dict[tuple[str, str], list[str]]:
        """The caller's approvals among these ids, by (tool, argument digest)."""
        found: dict[tuple[str, str], list[str]] = {}
        if not approval_ids:
            return found
        async with self.resources.session() as session:
            rows = (
                await session.scalars(
                    select(Approval).where(Approval.id.in_(list(approval_ids)), Approval.caller == caller.id)
                )
            ).all()
        for row in rows:
            found.setdefault((row.tool, row.arguments_digest), []).append(row.id)
        return found

    async def _response(self, run: ScriptRun, outcome: dict[str, Any]) -> dict[str, Any]:
        calls = {record.index: record for record in run.calls}
        error = undefined_name_hint(outcome["error"]) if not outcome.get("ok") and outcome.get("error") else None
        if error is not None and isinstance(error.get("call"), int) and error["call"] in calls:
            record = calls[error["call"]]
            error["call"] = record.as_dict()
            error["line"] = error.get("line") or record.line
        result = await self._bounded(run, outcome.get("value")) if outcome.get("ok") else None
        return {
            "run_id": run.run_id,
            "result": result,
            "logs": run.logs,
            "logs_dropped": max(0, int(outcome.get("log_lines", len(run.logs))) - len(run.logs)),
            "calls": [record.as_dict() for record in run.calls],
            "error": error,
            "memory_bytes": int(outcome.get("memory_bytes") or 0),
            "notes": [NO_RETURN] if outcome.get("ok") and outcome.get("undefined") else [],
        }

    async def _bounded(self, run: ScriptRun, value: Any) -> Any:
        """The return value, or its first part and a result id when it is over the result token budget."""
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        cut = await measure(text, self.resources.settings.execution.result_token_budget)
        if not cut.truncated:
            return value
        held = [r.name for r in run.calls if r.kind == "tool" and r.status in ("ok", "tool_error")] + sorted(run.found)
        result_id = await get_gateway(self.resources).results.save_run(run.caller, text, cut.total_tokens, held)
        return {
            "truncated": True,
            "text": cut.head,
            "result_id": result_id,
            "returned_tokens": cut.head_tokens,
            "total_tokens": cut.total_tokens,
        }


def code_mode(resources: Resources) -> CodeMode:
    """The service's code mode, created on first use."""
    if resources.code_mode is None:
        resources.code_mode = CodeMode(resources)
    return resources.code_mode
