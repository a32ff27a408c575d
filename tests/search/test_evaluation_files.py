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
