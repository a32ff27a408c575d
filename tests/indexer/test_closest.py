"""Which names an unknown tool name is close to (indexer/closest.py), on the catalogs of real MCP servers."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from indexer.closest import close_names, edit_distance

CATALOGS = Path(__file__).resolve().parents[1] / "fixtures" / "mcp_catalogs"


@pytest.fixture(scope="module")
def catalog() -> dict[str, str]:
    """qualified name -> the name its server listed, for the nine servers' 97 tools."""
    names = {}
    for path in sorted(CATALOGS.glob("*.json")):
        for tool in json.loads(path.read_text())["tools"]:
            names[f"{path.stem}__{tool['name']}"] = tool["name"]
    return names


@pytest.mark.parametrize(
    ("name", "closest"),
    [
        ("nope__x", []),
        ("time__now", []),
        ("filesystem__mkdir", []),
        ("github__get_pr", []),
        ("memory__open_node", ["memory__open_nodes"]),  # a typo
        ("github__list_issue", ["github__list_issues"]),
        ("gh__create_issue", ["github__create_issue"]),  # another server's prefix: the exact-name tier
        ("create_issue", ["github__create_issue"]),  # no prefix
        ("slack__post_message", ["slack__slack_post_message"]),
        ("everything__get_sum", ["everything__get-sum"]),
        ("memory__delete_entity", ["memory__delete_entities"]),  # the same words, stemmed
        ("git__commit", ["git__git_commit", "github__list_commits"]),  # the named server's first
    ],
)
def test_close_names_of_real_catalogs(catalog: dict[str, str], name: str, closest: list[str]) -> None:
    assert close_names(name, catalog) == closest


def test_at_most_n_closest_first() -> None:
    names = {f"s__read_{w}": f"read_{w}" for w in ("file", "files", "filed", "fine", "fire", "fil")}
    assert close_names("s__read_file", names, n=3) == ["s__read_file", "s__read_fil", "s__read_filed"]


def optimal_string_alignment(a: str, b: str) -> int:
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[-1][-1]


def test_the_banded_edit_distance_is_the_full_one_within_its_limit() -> None:
    rng = random.Random(3)
    for _ in range(5000):
        a, b = ("".join(rng.choice("abc") for _ in range(rng.randint(0, 8))) for _ in range(2))
        limit, full = rng.randint(0, 3), optimal_string_alignment(a, b)
        assert edit_distance(a, b, limit) == (full if full <= limit else limit + 1), (a, b, limit)
