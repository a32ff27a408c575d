"""Checking a call's arguments against its tool's input schema, without trusting the schema.

jsonschema does the checking, with the keywords that would run Python's re on argument strings (backtracking
without end on a pattern such as `^(a|aa)+$`), divide big integers into floats or compare every pair of array
items replaced by bounded, exact and linear ones, and with `$ref` resolved within the schema only.

The work is bounded too, and kept off the event loop: a check runs in a worker thread and gives up after
MAX_CHECK_CPU_SECONDS of that thread's CPU. A schema's cost is not its size: a 2 KB schema whose `$defs` each
`allOf` two references to the next one evaluates every argument 2**30 times (hours; the event loop was held
for as long), and an `enum` of 18,000 values or an `anyOf` of 4,000 branches over a few KB of arguments held it
for 10-20 s."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from fractions import Fraction
from functools import lru_cache
from typing import Any

import anyio
import jsonschema._utils
import jsonschema_rs
import referencing
import referencing.exceptions
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import extend, validator_for

from service.db.models import Tool
from service.errors import InvalidArguments, InvalidTool, UpstreamError, json_pointer

logger = logging.getLogger(__name__)

MAX_REPORTED_ERRORS = 20
# Deeper arguments cannot reach a tool: the MCP client's JSON encoder stops near 255 levels (it was a 500).
MAX_ARGUMENT_DEPTH = 100
MAX_REASON_CHARS = 300  # jsonschema's messages repeat the value: a 5 MB bad string made a 5 MB problem body
_VALIDATOR_CACHE_SIZE = 4096
# CPU time of the worker thread one check may take (a `$ref` fan-out, a huge `enum` times many arguments).
MAX_CHECK_CPU_SECONDS = 1.0
_STEPS_BETWEEN_CLOCK_READS = 16  # keyword evaluations cost microseconds; reading the thread's clock ~0.7 us
CHECK_THREADS = 2  # checks running at once; the others wait their turn


class _Unmatchable(Exception):
    """A `pattern` of an input schema that is not a regular expression."""


class _TooCostly(Exception):
    """Checking the arguments took more than MAX_CHECK_CPU_SECONDS."""


class _Meter:
    """The CPU budget of one check, read every few keyword evaluations and after every regex search."""

    __slots__ = ("deadline", "steps")

    def __init__(self, seconds: float) -> None:
        self.deadline = time.thread_time() + seconds
        self.steps = 0

    def charge(self, steps: int) -> None:
        self.steps += steps
        if self.steps >= _STEPS_BETWEEN_CLOCK_READS:
            self.steps = 0
            self.check_clock()

    def check_clock(self) -> None:
        if time.thread_time() > self.deadline:
            raise _TooCostly


_METER: ContextVar[_Meter | None] = ContextVar("argument_check_meter", default=None)


@lru_cache(maxsize=4096)
def _regex(pattern: str) -> Any:
    """`pattern` compiled by jsonschema-rs: ECMA 262 as JSON Schema says, linear time or a bounded backtracking
    search, where Python's re backtracks without end on `^(a|aa)+$` (one call held the event loop for minutes)."""
    try:
        return jsonschema_rs.validator_for({"pattern": pattern})
    except (jsonschema_rs.ValidationError, ValueError) as exc:
        raise _Unmatchable(pattern) from exc


def _search(pattern: str, text: str) -> bool:
    found = bool(_regex(pattern).is_valid(text))
    meter = _METER.get()
    if meter is not None:  # one search may backtrack up to the engine's limit: tens of ms with a backreference
        meter.check_clock()
    return found


def _pattern(validator: Validator, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Validator, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Validator, extra: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    known, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    extras = [k for k in instance if k not in known and not any(_search(p, k) for p in patterns)]
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and extras:
        listed = ", ".join(repr(key) for key in sorted(extras))
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            yield ValidationError(
                f"{listed} {verb} not match any of the regexes: {', '.join(map(repr, sorted(patterns)))}"
            )
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(f"Additional properties are not allowed ({listed} {verb} unexpected)")


def _multiple_of(validator: Validator, factor: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "number") or not validator.is_type(factor, "number") or not factor:
        return
    try:
        if isinstance(factor, float):
            quotient = instance / factor
            failed = int(quotient) != quotient
        else:
            failed = bool(instance % factor)
    except OverflowError:  # an integer of hundreds of digits, or a quotient past the floats: exact arithmetic
        failed = (Fraction(instance) / Fraction(str(factor))).denominator != 1
    if failed:
        yield ValidationError(f"{instance!r} is not a multiple of {factor}")


def _frozen(value: Any) -> Any:
    """A hashable value equal to another one's exactly when JSON Schema calls the two values equal (1 and 1.0
    are, true and 1 are not; objects whatever their key order)."""
    if isinstance(value, dict):
        return ("object", frozenset((key, _frozen(item)) for key, item in value.items()))
    if isinstance(value, list):
        return ("array", tuple(_frozen(item) for item in value))
    if isinstance(value, bool) or value is None:
        return ("constant", value)
    return ("number" if isinstance(value, int | float) else "string", value)


def _unique_items(validator: Validator, unique: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """uniqueItems in linear time: jsonschema compared every pair of items that do not sort (objects, or numbers
    mixed with strings): 8,000 items, 55 KB, took 5 s."""
    if not unique or not validator.is_type(instance, "array"):
        return
    _charge(len(instance))
    if len({_frozen(item) for item in instance}) < len(instance):
        yield ValidationError(f"{instance!r} has non-unique elements")


def _charge(steps: int) -> None:
    meter = _METER.get()
    if meter is not None:
        meter.charge(steps)


def _metered(keyword: Callable[..., Any]) -> Callable[..., Any]:
    """A keyword that charges the check's meter: one step, plus one per member of a list or object value (an
    `enum` compares the argument with each, `properties` and `anyOf` go through each)."""

    def evaluate(validator: Validator, value: Any, instance: Any, schema: Any) -> Any:
        _charge(1 + len(value) if isinstance(value, dict | list) else 1)
        return keyword(validator, value, instance, schema)

    return evaluate


class _BoundedRe:
    """Python's `re` for jsonschema's helper module, but `search` on the bounded engine: `unevaluatedProperties`
    matches `patternProperties` there (`find_evaluated_property_keys_by_schema`), not through a keyword that
    _HARDENED could replace, and `^(a|aa)+$` held the event loop for seconds that way."""

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)

    @staticmethod
    def search(pattern: str, text: str, flags: int = 0) -> bool | None:
        return True if _search(pattern, text) else None


jsonschema._utils.re = _BoundedRe()  # type: ignore[assignment]


# Keywords whose jsonschema implementation runs Python's re on argument strings, or divides big integers into
# floats: replaced by bounded, exact ones.
_HARDENED = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "multipleOf": _multiple_of,
    "uniqueItems": _unique_items,
}


def _checking_class(schema: dict[str, Any]) -> Any:
    """The jsonschema validator class of the schema's dialect, hardened, every keyword metered."""
    cls = validator_for(schema, default=Draft202012Validator)
    keywords = {**cls.VALIDATORS, **_HARDENED}
    return extend(cls, {name: _metered(keyword) for name, keyword in keywords.items()})


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
                validator = _checking_class(schema)(schema, registry=referencing.Registry())
            except SchemaError:
                logger.warning("%s is not a valid JSON Schema; it checks nothing", what)
        with self._lock:
            self._cache[key] = validator
            while len(self._cache) > _VALIDATOR_CACHE_SIZE:
                self._cache.popitem(last=False)
        return validator

    def errors(self, tool: Tool, arguments: dict[str, Any]) -> list[dict[str, str]]:
        """Each error as {pointer, reason, keyword}; a missing required property points at that property. Blocks
        for up to MAX_CHECK_CPU_SECONDS of CPU: `check` runs it in a worker thread."""
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

    async def check(self, tool: Tool, arguments: dict[str, Any]) -> None:
        """Raise InvalidArguments with every error's JSON pointer and reason; the checking runs in a worker
        thread (at most CHECK_THREADS at once), never on the event loop."""
        if too_deep(arguments, MAX_ARGUMENT_DEPTH):
            reason = f"nested more than {MAX_ARGUMENT_DEPTH} arrays or objects deep"
            raise InvalidArguments(
                f"Arguments of {tool.qualified_name} are {reason}",
                tool=tool.qualified_name,
                errors=[{"pointer": "", "reason": reason, "keyword": "depth"}],
            )
        errors = await anyio.to_thread.run_sync(self.errors, tool, arguments, limiter=self._limiter)
        if errors:
            summary = _summary(errors)
            invalid = InvalidArguments(
                f"Arguments do not match the input schema of {tool.qualified_name}: {summary}",
                tool=tool.qualified_name,
                errors=errors,
            )
            # The reasons quote the values (a password that was too short): the log keeps where and which keyword.
            places = "; ".join(f"{e['pointer'] or '(root)'}: {e['keyword']}" for e in errors[:5])
            invalid.logged_detail = f"Arguments do not match the input schema of {tool.qualified_name}: {places}"
            raise invalid

    def result_errors(self, name: str, digest: str, schema: dict[str, Any], structured: Any) -> list[dict[str, str]]:
        """The errors of a result's structured content against the output schema its server listed (`digest`
        names the schema's version); _Unusable when the schema cannot check it. Blocks like `errors`."""
        validator = self._validator((f"output {name}", digest), schema, f"the output schema of {name}")
        return _reported(validator, structured, "this result")

    async def check_result(
        self, tool: Tool, output_schema: tuple[str, dict[str, Any]] | None, structured: Any, server: str
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
            if too_deep(structured, MAX_ARGUMENT_DEPTH):
                raise _Unusable(f"its structured content is nested more than {MAX_ARGUMENT_DEPTH} levels deep")
            errors = await anyio.to_thread.run_sync(
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


def _reported(validator: Validator | None, instance: Any, what: str) -> list[dict[str, str]]:
    """The errors of an instance, each as {pointer, reason, keyword}, sorted and at most MAX_REPORTED_ERRORS;
    _Unusable when the schema cannot check it within the bounds (`what` names the instance in the reason)."""
    if validator is None:
        return []
    found = []
    for error in _iter_errors(validator, instance, what):
        path = list(error.absolute_path)
        if error.validator == "required" and isinstance(error.instance, dict):
            missing = [p for p in error.validator_value if p not in error.instance and repr(p) in error.message]
            path += missing[:1]
        reason = error.message
        if len(reason) > MAX_REASON_CHARS:
            reason = f"{reason[: MAX_REASON_CHARS - 20]}… ({len(reason):,} characters)"
        found.append({"pointer": json_pointer(path), "reason": reason, "keyword": str(error.validator)})
    found.sort(key=lambda e: (e["pointer"], e["reason"]))
    return found[:MAX_REPORTED_ERRORS]


def _iter_errors(validator: Validator, instance: Any, what: str) -> list[ValidationError]:
    token = _METER.set(_Meter(MAX_CHECK_CPU_SECONDS))
    try:
        return list(validator.iter_errors(instance))
    except referencing.exceptions.Unresolvable as exc:
        reason = f"$ref {exc.ref!r} does not resolve within the schema (remote references are never fetched)"
    except _Unmatchable as exc:
        reason = f"pattern {exc.args[0]!r} is not a valid regular expression"
    except RecursionError:
        reason = f"checking {what} recursed without end (a $ref loop, or a value nested too deeply)"
    except _TooCostly:
        reason = (
            f"checking {what} took more than {MAX_CHECK_CPU_SECONDS:g} s of CPU (MAX_CHECK_CPU_SECONDS):"
            " a schema whose references or branches multiply its work, or a value too large for it"
        )
    finally:
        _METER.reset(token)
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
