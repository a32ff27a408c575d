"""The JSON Schema keywords of an argument check, bounded: the ones that would run Python's re on argument strings
(backtracking without end on a pattern such as `^(a|aa)+$`), divide big integers into floats or compare every pair
of array items are replaced by bounded, exact and linear ones, and every keyword charges a CPU meter that gives up
after the check's budget (arguments.py sets it)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from fractions import Fraction
from functools import lru_cache
from typing import Any

import jsonschema._utils
import jsonschema_rs
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import extend, validator_for

_STEPS_BETWEEN_CLOCK_READS = 16  # keyword evaluations cost microseconds; reading the thread's clock ~0.7 us


class Unmatchable(Exception):
    """A `pattern` of an input schema that is not a regular expression."""


class TooCostly(Exception):
    """Checking the arguments took more than the budget of its Meter (arguments.MAX_CHECK_CPU_SECONDS)."""


class Meter:
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
            raise TooCostly


METER: ContextVar[Meter | None] = ContextVar("argument_check_meter", default=None)
# Compiled patterns kept: one may hold up to ~7 MB (`[\w\W]{5000}` is 12 characters; the engine's programs go up to
# 10 MB), and 4,096 of them, one per distinct pattern of the tools any caller called, could hold 28 GB (measured:
# 100 such patterns of a hostile server's schemas, 3.6 MB each). Missing here costs a compile: tens of microseconds
# for an ordinary pattern.
COMPILED_PATTERNS = 64


@lru_cache(maxsize=COMPILED_PATTERNS)
def _regex(pattern: str) -> Any:
    """`pattern` compiled by jsonschema-rs: ECMA 262 as JSON Schema says, linear time or a bounded backtracking
    search, where Python's re backtracks without end on `^(a|aa)+$` (one call held the event loop for minutes)."""
    try:
        return jsonschema_rs.validator_for({"pattern": pattern})
    except (jsonschema_rs.ValidationError, ValueError) as exc:
        raise Unmatchable(pattern) from exc


def _search(pattern: str, text: str) -> bool:
    found = bool(_regex(pattern).is_valid(text))
    meter = METER.get()
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
    meter = METER.get()
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


def checking_class(schema: dict[str, Any]) -> Any:
    """The jsonschema validator class of the schema's dialect, hardened, every keyword metered."""
    cls = validator_for(schema, default=Draft202012Validator)
    keywords = {**cls.VALIDATORS, **_HARDENED}
    return extend(cls, {name: _metered(keyword) for name, keyword in keywords.items()})
