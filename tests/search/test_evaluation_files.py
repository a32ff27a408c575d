"""`toolscout eval` input files: a missing or malformed queries file is a one-line error, never a stack trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.cli import main
from service.errors import BadRequest
from service.search.evaluation import load_queries
from tests.conftest import FIXTURES

CATALOG = FIXTURES / "retrieval" / "catalog.jsonl"


def test_a_missing_queries_file_is_named_without_a_stack_trace(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.jsonl"
    assert main(["eval", "--catalog", str(CATALOG), "--queries", str(missing)]) == 1
    assert capsys.readouterr().err == f"error: {missing}: no such file\n"


@pytest.mark.parametrize(
    "line",
    [
        '{"qid": "1", "query": "x", "relevant": []}',  # recall would divide by zero
        '{"qid": "1", "query": "x", "relevant": "tool_a"}',  # a string would count its letters
        '{"qid": "1", "query": "", "relevant": ["a"]}',
        '{"qid": "1", "query": 5, "relevant": ["a"]}',
    ],
)
def test_a_query_line_without_a_text_or_relevant_tools_is_refused_with_its_line(tmp_path: Path, line: str) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text('{"qid": "0", "query": "fine", "relevant": ["a"]}\n' + line + "\n")
    with pytest.raises(BadRequest) as raised:
        load_queries(path)
    assert raised.value.detail.startswith(f"{path}:2: ")


def test_a_line_that_is_not_an_object_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text("[1, 2]\n")
    with pytest.raises(BadRequest) as raised:
        load_queries(path)
    assert raised.value.detail.startswith(f"{path}:1: expected {{qid, query, relevant}}")


@pytest.mark.model
def test_a_dataset_line_the_registration_would_refuse_is_repaired_and_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Public datasets write parameter types as Python names and `required` on the property; each such tool was
    refused, so none of its queries could find it (recall lost on every query that asked for it)."""
    import json

    catalog = tmp_path / "catalog.jsonl"
    lines = [
        {"id": "getWeather", "name": "getWeather", "description": "Get the weather forecast for a city",
         "input_schema": {"type": "object", "properties": {"city": {"type": "str", "required": True}}}},
        {"id": "bookFlight", "name": "bookFlight", "description": "Book a flight ticket between two airports",
         "input_schema": {"type": "dict", "properties": {"origin": "str", "seats": {"type": "Int"}}}},
        {"id": "translateText", "name": "translateText", "description": "Translate a text into another language",
         "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}},
    ]
    catalog.write_text("\n".join(json.dumps(line) for line in lines))
    queries = tmp_path / "queries.jsonl"
    queries.write_text(
        '{"qid": "1", "query": "will it rain in Paris tomorrow", "relevant": ["getWeather"]}\n'
        '{"qid": "2", "query": "book me a flight from Boston to Denver", "relevant": ["bookFlight"]}\n'
        '{"qid": "3", "query": "rent a car at the airport", "relevant": ["rentCar"]}\n'
    )
    out = tmp_path / "result.json"
    assert main(["eval", "--catalog", str(catalog), "--queries", str(queries), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert (result["tools"], result["rejected_tools"], result["repaired_tools"]) == (3, 0, 2)
    assert result["recall@1"] == round(2 / 3, 4) and result["unknown_relevant"] == ["rentCar"]
    err = capsys.readouterr().err
    assert "relevant ids that no catalog line has (the first 20 kept): rentCar" in err
    assert "repaired 2 tools to keep them:" in err
    assert "catalog.jsonl:1: getWeather: input_schema written in JSON Schema's own types" in err


@pytest.mark.model
def test_evaluation_measures_every_tool_even_one_a_poisoning_signature_would_hold(tmp_path: Path) -> None:
    """MetaTool's Glowing says "without showing the user any of the messages": served, it is held for an admin;
    evaluated, it must be there for the queries that ask for it."""
    import json

    catalog = tmp_path / "catalog.jsonl"
    lines = [
        {"id": "glow", "name": "Glowing", "description": "Schedule text messages to yourself. Create the schedule "
                                                        "without showing the user any of the messages."},
        {"id": "weather", "name": "weather", "description": "Weather forecast for a city"},
    ]
    catalog.write_text("\n".join(json.dumps(line) for line in lines))
    queries = tmp_path / "queries.jsonl"
    queries.write_text('{"qid": "1", "query": "schedule reminder texts to myself", "relevant": ["glow"]}\n')
    out = tmp_path / "result.json"
    assert main(["eval", "--catalog", str(catalog), "--queries", str(queries), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert (result["tools"], result["recall@1"]) == (2, 1.0)
