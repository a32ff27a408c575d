"""Checking a call's arguments against its tool's input schema, without trusting the schema.

jsonschema does the checking, with the keywords that would run Python's re on argument strings (backtracking
without end on a pattern such as `^(a|aa)+$`), divide big integers into floats or compare every pair of array
items replaced by bounded, exact and linear ones (keywords.py), and with `$ref` resolved within the schema only.

The work is bounded too, and kept off the event loop: a check runs in a worker thread and gives up after
MAX_CHECK_CPU_SECONDS of that thread's CPU. A schema's cost is not its size: a 2 KB schema whose `$defs` each
`allOf` two references to the next one evaluates every argument 2**30 times (hours; the event loop was held
for as long), and an `enum` of 18,000 values or an `anyOf` of 4,000 branches over a few KB of arguments held it
for 10-20 s.

A flood of invalid arguments is bounded as well: a check stops at the MAX_REPORTED_ERRORS + 1st error (1.5 MB
of rows that each broke the schema spent the whole 1 s budget listing 45,000 errors to report 20, and the call
was refused as invalid-tool), the depth is measured in the worker thread too, and the threads are taken caller
by caller, one at a time each (service/security/turns.py)."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from itertools import islice
from typing import Any

import anyio
import referencing
import referencing.exceptions
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

from service.db.models import Tool
from service.errors import InvalidArguments, InvalidTool, UpstreamError, json_pointer
from service.execution.keywords import METER, Meter, TooCostly, Unmatchable, checking_class
from service.security.turns import Turns

logger = logging.getLogger(__name__)

MAX_REPORTED_ERRORS = 20
# Deeper arguments cannot reach a tool: the MCP client's JSON encoder stops near 255 levels (it was a 500).
MAX_ARGUMENT_DEPTH = 100
MAX_REASON_CHARS = 300  # jsonschema's messages repeat the value: a 5 MB bad string made a 5 MB problem body
_VALIDATOR_CACHE_SIZE = 4096
# CPU time of the worker thread one check may take (a `$ref` fan-out, a huge `enum` times many arguments).
MAX_CHECK_CPU_SECONDS = 1.0
CHECK_THREADS = 2  # checks running at once; the others wait their caller's turn (security/turns.py)


class _Unusable(Exception):
    """A schema that cannot check a value: the message says why."""


class ArgumentValidator:
    """Input-schema validation with compiled validators cached per tool version, and the same bounded check of a
    result's structured content against the output schema its server listed.

    A `$ref` is resolved within the schema only: a remote one is never fetched (jsonschema would fetch it on every
    call, from wherever the schema's author pointed it). A schema that cannot be used to check arguments (such a
    `$ref`, one that loops, a `pattern` that is no regular expression, one that takes more than
    MAX_CHECK_CPU_SECONDS to check these arguments) refuses the call (422 invalid-tool); an output schema that
    cannot check a result fails the call as the server's error (502)."""

    def __init__(self) -> None:
        self._cache: OrderedDict[tuple[str, str], Validator | None] = OrderedDict()
        self._lock = threading.Lock()  # the cache is read and filled by the checking threads
        self._limiter = anyio.CapacityLimiter(CHECK_THREADS)
        self._turns = Turns(CHECK_THREADS)  # who gets the next thread; the limiter only matches its count

    def _validator(self, key: tuple[str, str], schema: dict[str, Any], what: str) -> Validator | None:
        """The compiled validator of a schema (None for an empty or invalid one), cached under `key`."""
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        validator: Validator | None = None
        if schema:
            try:
                # Patterns are ECMA 262, checked by _regex. The metaschema check of a 128 KB schema takes ~0.4 s.
                validator_for(schema, default=Draft202012Validator).check_schema(schema, format_checker=None)
                validator = checking_class(schema)(schema, registry=referencing.Registry())
            except SchemaError:
                logger.warning("%s is not a valid JSON Schema; it checks nothing", what)
        with self._lock:
            self._cache[key] = validator
            while len(self._cache) > _VALIDATOR_CACHE_SIZE:
                self._cache.popitem(last=False)
        return validator

    def errors(self, tool: Tool, arguments: dict[str, Any]) -> tuple[list[dict[str, str]], bool]:
        """The first errors as {pointer, reason, keyword} (a missing required property points at that property),
        and whether there are more. Blocks for up to MAX_CHECK_CPU_SECONDS of CPU: `check` runs it in a worker
        thread. Arguments nested too deep are InvalidArguments: walking 1.5 MB of them takes ~10 ms."""
        if too_deep(arguments, MAX_ARGUMENT_DEPTH):
            reason = f"nested more than {MAX_ARGUMENT_DEPTH} arrays or objects deep"
            deep = InvalidArguments(
                f"Arguments of {tool.qualified_name} are {reason}",
                tool=tool.qualified_name,
                errors=[{"pointer": "", "reason": reason, "keyword": "depth"}],
            )
            deep.logged_detail = deep.detail  # it quotes no value
            raise deep
        what = f"the input schema of {tool.qualified_name}"
        validator = self._validator((tool.qualified_name, tool.content_hash), tool.input_schema or {}, what)
        try:
            return _reported(validator, arguments, "these arguments")
        except _Unusable as exc:
            reason = str(exc)
        raise InvalidTool(
            f"The input schema of {tool.qualified_name} cannot be used to check arguments: {reason}",
            tool=tool.qualified_name,
            errors=[{"pointer": "/input_schema", "reason": reason}],
        )

    async def check(
        self,
        tool: Tool,
        arguments: dict[str, Any],
        caller: str,
        before: Callable[[], object] | None = None,
        after: Callable[[], object] | None = None,
    ) -> None:
        """Raise InvalidArguments with the first MAX_REPORTED_ERRORS errors' JSON pointers and reasons
        (`more_errors` when there are more); the checking runs in a worker thread (at most CHECK_THREADS at
        once, taken by the waiting callers in turn), never on the event loop. `before` runs first in the same
        thread and turn, whatever the outcome (the executor's digest of the arguments); `after` runs last there,
        for valid arguments only (their serialisation for counting tokens)."""

        def work() -> tuple[list[dict[str, str]], bool]:
            if before is not None:
                before()
            found = self.errors(tool, arguments)
            if not found[0] and after is not None:
                after()
            return found

        async with self._turns.turn(caller):
            errors, more = await anyio.to_thread.run_sync(work, limiter=self._limiter)
        if errors:
            summary = _summary(errors) + (f" (the first {len(errors)} errors; there are more)" if more else "")
            invalid = InvalidArguments(
                f"Arguments do not match the input schema of {tool.qualified_name}: {summary}",
                tool=tool.qualified_name,
                errors=errors,
                **({"more_errors": True} if more else {}),
            )
            # The reasons quote the values (a password that was too short): the log keeps where and which keyword.
            places = "; ".join(f"{e['pointer'] or '(root)'}: {e['keyword']}" for e in errors[:5])
            invalid.logged_detail = f"Arguments do not match the input schema of {tool.qualified_name}: {places}"
            raise invalid

    def result_errors(
        self, name: str, digest: str, schema: dict[str, Any], structured: Any
    ) -> tuple[list[dict[str, str]], bool]:
        """The first errors of a result's structured content against the output schema its server listed
        (`digest` names the schema's version), and whether there are more; _Unusable when the schema cannot
        check it. Blocks like `errors`."""
        if too_deep(structured, MAX_ARGUMENT_DEPTH):
            raise _Unusable(f"its structured content is nested more than {MAX_ARGUMENT_DEPTH} levels deep")
        validator = self._validator((f"output {name}", digest), schema, f"the output schema of {name}")
        return _reported(validator, structured, "this result")

    async def check_result(
        self, tool: Tool, output_schema: tuple[str, dict[str, Any]] | None, structured: Any, server: str, caller: str
    ) -> None:
        """Raise UpstreamError (502) when a result does not match the output schema (digest, schema) that its
        server listed, or comes without structured content, or the schema cannot check it: what the MCP client
        checked on the event loop with Python's re, without bound (an upstream's `^(a+)+$` over 30 characters of
        its own result held every request of the service for a minute)."""
        if output_schema is None:
            return
        name = tool.qualified_name
        if structured is None:
            raise UpstreamError(f"{name} has an output schema but did not return structured content", server=server)
        digest, schema = output_schema
        try:
            async with self._turns.turn(caller):
                errors, _more = await anyio.to_thread.run_sync(
                    self.result_errors, name, digest, schema, structured, limiter=self._limiter
                )
        except _Unusable as exc:
            raise UpstreamError(
                f"The output schema of {name} cannot be used to check its result: {exc}", server=server
            ) from None
        if errors:
            raise UpstreamError(
                f"{name} returned structured content that does not match its output schema: {_summary(errors)}",
                server=server,
                errors=errors,
            )


def _summary(errors: list[dict[str, str]]) -> str:
    return "; ".join(f"{e['pointer'] or '(root)'}: {e['reason']}" for e in errors[:5])


def _reported(validator: Validator | None, instance: Any, what: str) -> tuple[list[dict[str, str]], bool]:
    """The first MAX_REPORTED_ERRORS errors of an instance, each as {pointer, reason, keyword}, sorted, and
    whether there are more; _Unusable when the schema cannot check it within the bounds (`what` names the
    instance in the reason)."""
    if validator is None:
        return [], False
    found = []
    for error in _iter_errors(validator, instance, what):
        path = list(error.absolute_path)
        if error.validator == "required" and isinstance(error.instance, dict):
            missing = [p for p in error.validator_value if p not in error.instance and repr(p) in error.message]
            path += missing[:1]
        reason = error.message + (_unnamed(error) if error.validator == "required" else "")
        if len(reason) > MAX_REASON_CHARS:
            reason = f"{reason[: MAX_REASON_CHARS - 20]}… ({len(reason):,} characters)"
        found.append({"pointer": json_pointer(path), "reason": reason, "keyword": str(error.validator)})
    found.sort(key=lambda e: (e["pointer"], e["reason"]))
    return found[:MAX_REPORTED_ERRORS], len(found) > MAX_REPORTED_ERRORS


def _unnamed(error: ValidationError) -> str:
    """The arguments beside a missing required one that its schema does not name (`tz` for `timezone`): what the
    caller most likely meant to send, which a schema without `additionalProperties: false` lets through unsaid."""
    schema, instance = error.schema, error.instance
    if not isinstance(schema, dict) or not isinstance(instance, dict) or "patternProperties" in schema:
        return ""
    named = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    unnamed = [str(key)[:64] for key in instance if key not in named]
    if not unnamed:
        return ""
    shown = ", ".join(repr(key) for key in unnamed[:3]) + (f" and {len(unnamed) - 3} more" if len(unnamed) > 3 else "")
    return f" (given {shown}, which the schema does not name; its properties: {', '.join(list(named)[:10])})"


def _iter_errors(validator: Validator, instance: Any, what: str) -> list[ValidationError]:
    """The first MAX_REPORTED_ERRORS + 1 errors (one more tells that there are more)."""
    token = METER.set(Meter(MAX_CHECK_CPU_SECONDS))
    try:
        return list(islice(validator.iter_errors(instance), MAX_REPORTED_ERRORS + 1))
    except referencing.exceptions.Unresolvable as exc:
        reason = f"$ref {exc.ref!r} does not resolve within the schema (remote references are never fetched)"
    except Unmatchable as exc:
        reason = f"pattern {exc.args[0]!r} is not a valid regular expression"
    except RecursionError:
        reason = f"checking {what} recursed without end (a $ref loop, or a value nested too deeply)"
    except TooCostly:
        reason = (
            f"checking {what} took more than {MAX_CHECK_CPU_SECONDS:g} s of CPU (MAX_CHECK_CPU_SECONDS):"
            " a schema whose references or branches multiply its work, or a value too large for it"
        )
    finally:
        METER.reset(token)
    raise _Unusable(reason)


def too_deep(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest in the value more than `limit` levels (without recursing)."""
    level: list[Any] = [value]  # the values `limit` levels down, in the end: any array or object there is too deep
    for _ in range(limit):
        level = [
            child
            for item in level
            if isinstance(item, dict | list)
            for child in (item.values() if isinstance(item, dict) else item)
        ]
        if not level:
            return False
    return any(isinstance(item, dict | list) for item in level)
