"""The close-name index gives the rules' closest names over every name (indexer/closest.py's close_names), found
among a few candidates: misspellings of the bundled catalogs' names and of a synthetic catalog, and names removed
or renamed since they were indexed."""

from __future__ import annotations

import random

from bench.closest_names import directory_of, misspelt, real_tools, synthetic_tools
from indexer.closest import close_names
from service.search.retrieval import NameDirectory


def every_name(directory: NameDirectory, name: str) -> list[str]:
    return close_names(name, {q: str(directory.listed_name(q)) for q in directory.names()})


def test_misspelt_names_get_the_closest_names_of_the_rules_over_every_name() -> None:
    rng = random.Random(7)
    directory = directory_of(real_tools() + synthetic_tools(3_000, rng))
    names = directory.names()
    asked = [misspelt(rng.choice(names), rng) for _ in range(300)] + ["x", "nope__x", "", "__", "a__b__c"]
    differing = [name for name in asked if directory.closest(name) != every_name(directory, name)]
    assert differing == []
    assert sum(bool(directory.closest(name)) for name in asked) > 200


def test_removed_and_renamed_names_are_suggested_as_they_are_now() -> None:
    directory = directory_of([("git", "create_branch"), ("git", "delete_branch"), ("web", "fetch_page")])
    for i in range(600):  # past CLOSEST_POOL: the index answers
        directory.add(f"pad__tool_{i}", f"tool_{i}", "pad", [])
    directory.remove("git__delete_branch")
    directory.add("git__create_branch", "make_branch", "git", [])
    directory.add("web__fetch_page", "fetch_page", "web", [])  # the same again: indexed once
    assert directory.closest("git__delete_branch") == every_name(directory, "git__delete_branch")
    assert "git__delete_branch" not in directory.closest("git__delete_branc")
    assert directory.closest("web__fetch_pag") == ["web__fetch_page"]
    for i in range(0, 600, 2):  # enough removed to rebuild the index
        directory.remove(f"pad__tool_{i}")
    assert directory.closest("pad__tool_11") == every_name(directory, "pad__tool_11")
    assert directory.closest("pad__tool_10")[0] != "pad__tool_10"
    allowed = frozenset(directory.names()[:550])
    assert directory.closest("pad__tool_13", allowed=allowed) == close_names(
        "pad__tool_13", {q: str(directory.listed_name(q)) for q in allowed}
    )
