"""`among(column, values)`: `column IN values` for any number of values, on SQLite and PostgreSQL alike.

A plain IN list binds one parameter per value, and catalogs of 100k tools pass SQLite's 32,766 and
PostgreSQL's 65,535 parameter limits. Long lists are bound as ONE parameter instead: a JSON array read with
`json_each` on SQLite, an array compared with `= ANY(...)` on PostgreSQL. Short lists stay plain IN lists."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Boolean, String, bindparam
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement

PLAIN_IN_MAX = 500


class _Among(ColumnElement[bool]):
    """`column` is one of `values` (a string column), bound as a single parameter."""

    inherit_cache = False  # the values are part of the element, not of a cacheable statement shape
    type = Boolean()

    def __init__(self, column: ColumnElement[Any], values: list[str]) -> None:
        self.column = column
        self.values = values


@compiles(_Among)
def _json_each(element: _Among, compiler: Any, **kw: Any) -> str:
    column = compiler.process(element.column, **kw)
    values = compiler.process(bindparam(None, json.dumps(element.values), type_=String), **kw)
    return f"{column} IN (SELECT value FROM json_each({values}))"


@compiles(_Among, "postgresql")
def _any_array(element: _Among, compiler: Any, **kw: Any) -> str:
    column = compiler.process(element.column, **kw)
    values = compiler.process(bindparam(None, element.values, type_=ARRAY(String)), **kw)
    return f"{column} = ANY({values})"


def among(column: Any, values: Iterable[str]) -> ColumnElement[bool]:
    """A condition `column IN values` that works for any number of values."""
    ordered = sorted(set(values))
    if len(ordered) <= PLAIN_IN_MAX:
        return column.in_(ordered)  # type: ignore[no-any-return]
    return _Among(column, ordered)
