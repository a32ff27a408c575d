"""Checking a call's arguments against its tool's input schema, without trusting the schema.

jsonschema does the checking, with the keywords that would run Python's re on argument strings (backtracking
without end on a pattern such as `^(a|aa)+$`) or divide big integers into floats replaced by bounded and exact
ones, and with `$ref` resolved within the schema only."""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Iterator
from fractions import Fraction
from functools import lru_cache
from typing import Any

import jsonschema._utils
import jsonschema_rs
import referencing
import referencing.exceptions
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import extend, validator_for

from service.db.models import Tool
from service.errors import InvalidArguments, InvalidTool, json_pointer

logger = logging.getLogger(__name__)

MAX_REPORTED_ERRORS = 20
# Deeper arguments cannot reach a tool: the MCP client's JSON encoder stops near 255 levels (it was a 500).
MAX_ARGUMENT_DEPTH = 100
MAX_REASON_CHARS = 300  # jsonschema's messages repeat the value: a 5 MB bad string made a 5 MB problem body
_VALIDATOR_CACHE_SIZE = 4096


class _Unmatchable(Exception):
    """A `pattern` of an input schema that is not a regular expression."""


@lru_cache(maxsize=4096)
def _regex(pattern: str) -> Any:
    """`pattern` compiled by jsonschema-rs: ECMA 262 as JSON Schema says, linear time or a bounded backtracking
    search, where Python's re backtracks without end on `^(a|aa)+$` (one call held the event loop for minutes)."""
    try:
        return jsonschema_rs.validator_for({"pattern": pattern})
    except (jsonschema_rs.ValidationError, ValueError) as exc:
        raise _Unmatchable(pattern) from exc


def _search(pattern: str, text: str) -> bool:
    return bool(_regex(pattern).is_valid(text))


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
}


class ArgumentValidator:
    """Input-schema validation with compiled validators cached per tool version.

    A `$ref` is resolved within the schema only: a remote one is never fetched (jsonschema would fetch it on every
    call, from wherever the schema's author pointed it). A schema that cannot be used to check arguments (such a
    `$ref`, one that loops, a `pattern` that is no regular expression) refuses the call (422 invalid-tool)."""

    def __init__(self) -> None:
        self._cache: OrderedDict[tuple[str, str], Validator | None] = OrderedDict()

    def _validator(self, tool: Tool) -> Validator | None:
        key = (tool.qualified_name, tool.content_hash)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        schema = tool.input_schema or {}
        validator: Validator | None = None
        if schema:
            cls = validator_for(schema, default=Draft202012Validator)
            try:
                cls.check_schema(schema, format_checker=None)  # patterns are ECMA 262, checked by _regex
                validator = extend(cls, _HARDENED)(schema, registry=referencing.Registry())
            except SchemaError:
                logger.warning("tool %s has an invalid input schema; arguments are not validated", tool.qualified_name)
        self._cache[key] = validator
        while len(self._cache) > _VALIDATOR_CACHE_SIZE:
            self._cache.popitem(last=False)
        return validator

    def errors(self, tool: Tool, arguments: dict[str, Any]) -> list[dict[str, str]]:
        """Each error as {pointer, reason, keyword}; a missing required property points at that property."""
        validator = self._validator(tool)
        if validator is None:
            return []
        found = []
        for error in self._iter_errors(tool, validator, arguments):
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

    @staticmethod
    def _iter_errors(tool: Tool, validator: Validator, arguments: dict[str, Any]) -> list[ValidationError]:
        try:
            return list(validator.iter_errors(arguments))
        except referencing.exceptions.Unresolvable as exc:
            reason = f"$ref {exc.ref!r} does not resolve within the schema (remote references are never fetched)"
        except _Unmatchable as exc:
            reason = f"pattern {exc.args[0]!r} is not a valid regular expression"
        except RecursionError:
            reason = "checking these arguments recursed without end (a $ref loop, or arguments nested too deeply)"
        raise InvalidTool(
            f"The input schema of {tool.qualified_name} cannot be used to check arguments: {reason}",
            tool=tool.qualified_name,
            errors=[{"pointer": "/input_schema", "reason": reason}],
        )

    def check(self, tool: Tool, arguments: dict[str, Any]) -> None:
        """Raise InvalidArguments with every error's JSON pointer and reason."""
        if too_deep(arguments, MAX_ARGUMENT_DEPTH):
            reason = f"nested more than {MAX_ARGUMENT_DEPTH} arrays or objects deep"
            raise InvalidArguments(
                f"Arguments of {tool.qualified_name} are {reason}",
                tool=tool.qualified_name,
                errors=[{"pointer": "", "reason": reason, "keyword": "depth"}],
            )
        errors = self.errors(tool, arguments)
        if errors:
            summary = "; ".join(f"{e['pointer'] or '(root)'}: {e['reason']}" for e in errors[:5])
            raise InvalidArguments(
                f"Arguments do not match the input schema of {tool.qualified_name}: {summary}",
                tool=tool.qualified_name,
                errors=errors,
            )


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
