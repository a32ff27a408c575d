"""Counts a person reads say one thing in the singular (service/errors.py: counted, verb)."""

from __future__ import annotations

from service.errors import counted, verb


def test_a_count_of_one_takes_the_singular_and_any_other_the_plural() -> None:
    assert [counted(n, "tool") for n in (0, 1, 2)] == ["0 tools", "1 tool", "2 tools"]
    assert counted(1, "query", "queries") == "1 query" and counted(3, "query", "queries") == "3 queries"
    assert f"{counted(1, 'query', 'queries')} {verb(1, 'has', 'have')}" == "1 query has"
    # A rate per minute computed from a rate per second: 1/60 * 60 reads as 1.
    assert counted(1 / 60 * 60, "request") == "1 request" and counted(0.5, "request") == "0.5 requests"
