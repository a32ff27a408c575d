"""The regular expressions that read a caller's request and an upstream's tool texts take time linear in the text.

Each had a quantifier that a run of whitespace (or of quotes) made quadratic, and Python's regex engine holds the GIL
for the whole match, worker thread or not: one dev search of two words 7,998 spaces apart held the service 9.4 s,
and one tool whose parameter description was 120,000 quote or space characters held it 54-65 s at its registration
(an upstream server's tools/list carries up to 5,000 of them). Each pattern is also checked to match exactly as the
quadratic one did."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from typing import Any

import pytest

from indexer.documents import _QUOTED_EXAMPLES
from indexer.intents import _SENTENCE_SPLIT, split_intents
from indexer.names import _PLEASE, without_framing
from tests.security.conftest import bearer

# The patterns as they were (the reference for what each must still match).
QUADRATIC_SENTENCE_SPLIT = re.compile(
    r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])"
    r"|\s*;\s*"
    r"|\s*\n+\s*"
    r"|\s+(?:and then|after that|afterwards|then|finally|also|next|additionally),?\s+"
    r"|\s*(?:^|\s)\(?\d{1,2}[.)]\s+",
    re.IGNORECASE,
)
QUADRATIC_PLEASE = re.compile(r",?\s*\bplease\b", re.IGNORECASE)
QUADRATIC_EXAMPLES = re.compile(
    r"\s*\((?:e\.g\.|for example|such as|ex\.|example:?)[^()]*['\"`][^()]*\)", re.IGNORECASE
)
# Before: 5.8-7.5 s (split_intents), 1.2 s (without_framing), 4.4-4.8 s (60,000 characters of examples).
BOUND_SECONDS = 0.25
RUNS = {"spaces": " ", "tabs": "\t", "ideographic spaces": "\u3000"}
# Single characters, then longer pieces.
QUERY_PIECES = [*" \n\t\r;.!?Ab1)(,'\"\u3000\x85", "   ", " ; ", "12", "then", " and then ", "Finally,", "word"]
QUERY_PIECES += [" 3. ", "(4) ", "please", "Please", "pleased"]
SCHEMA_PIECES = [*" \n()'\"`x,\u3000", "  ", "e.g.", "E.G.", "for example", "such as", "ex.", "example:"]


def seconds(work: Callable[[], Any]) -> float:
    began = time.perf_counter()
    work()
    return time.perf_counter() - began


@pytest.mark.parametrize("run", RUNS.values(), ids=RUNS.keys())
def test_a_request_with_a_long_run_of_whitespace_is_read_in_linear_time(run: str) -> None:
    query = "a" + run * 7_998 + "b"
    assert seconds(lambda: split_intents(query)) < BOUND_SECONDS
    assert seconds(lambda: without_framing(query)) < BOUND_SECONDS
    assert split_intents(query) == [] and without_framing(query) == query


@pytest.mark.parametrize("text", ["(e.g. " + "'" * 120_000, "a" + " " * 120_000 + "b"], ids=["quotes", "spaces"])
def test_a_long_parameter_description_is_read_in_linear_time(text: str) -> None:
    assert seconds(lambda: _QUOTED_EXAMPLES.sub("", text)) < BOUND_SECONDS


def test_the_linear_patterns_match_what_the_quadratic_ones_did() -> None:
    rng = random.Random(13)
    for _ in range(50_000):
        query = "".join(rng.choices(QUERY_PIECES, k=rng.randint(0, 30)))
        assert _SENTENCE_SPLIT.split(query) == QUADRATIC_SENTENCE_SPLIT.split(query), query
        assert _PLEASE.sub("", query) == QUADRATIC_PLEASE.sub("", query), query
        text = "".join(rng.choices(SCHEMA_PIECES, k=rng.randint(0, 30)))
        assert _QUOTED_EXAMPLES.sub("", text) == QUADRATIC_EXAMPLES.sub("", text), text


async def test_a_dev_search_spread_over_whitespace_costs_what_a_short_one_does(world: dict[str, Any]) -> None:
    """Measured in process: 9,424 ms before, 13 ms after (a search of "a b" about 5 ms)."""
    http, dev = world["http"], world["dev"]
    spread = {"query": "weather" + " " * 7_980 + "city", "k": 5}
    began = time.perf_counter()
    answer = await http.post("/search", json=spread, headers=bearer(dev))
    took = time.perf_counter() - began
    assert answer.status_code == 200 and took < 1.0, (answer.status_code, took)
    assert answer.json()["results"][0]["name"] == "public__get_weather"


async def test_a_tool_with_a_long_parameter_description_registers_in_linear_time(world: dict[str, Any]) -> None:
    """Measured in process: 64.9 s (quotes) and 54.2 s (spaces) a tool before, 62 and 35 ms after."""
    http, admin = world["http"], world["admin"]
    for name, text in (("quotes", "(e.g. " + "'" * 120_000), ("spaces", "a" + " " * 120_000 + "b")):
        schema = {"type": "object", "properties": {"when": {"type": "string", "description": text}}}
        tool = {"server": "upstream", "name": name, "description": "Tell the time", "input_schema": schema}
        began = time.perf_counter()
        answer = await http.post("/tools", json={"tools": [tool]}, headers=bearer(admin))
        took = time.perf_counter() - began
        assert answer.status_code == 200 and answer.json()["tools"] == [f"upstream__{name}"], answer.text
        assert took < 2.0, (name, took)
