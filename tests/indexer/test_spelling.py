"""A request's misspelt words read as the catalog's words (indexer/spelling.py): which words are taken as
misspelt, which word each is read as, and that a word no tool of the scope holds is never what one is read as."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from indexer.spelling import correct_spelling, one_edit, unknown_words, within_one_edit

# How many tools of a scope hold each word (a stand-in for the index's `term_holders`).
CATALOG = {"commit": 1, "commits": 1, "list": 9, "directory": 5, "search": 3, "merge": 1, "request": 4, "slack": 8}


def held(catalog: dict[str, int]):  # type: ignore[no-untyped-def]
    def holders(words: Sequence[str]) -> list[int]:
        return [catalog.get(word, 0) for word in words]

    return holders


@pytest.mark.parametrize(
    ("word", "other", "near"),
    [
        ("comit", "commit", True),  # a letter dropped
        ("commmit", "commit", True),  # one added
        ("serch", "search", True),
        ("lsit", "list", True),  # neighbours swapped
        ("list", "lsit", True),
        ("lsti", "list", False),  # two changes
        ("seach", "search", True),
        ("list", "list", False),  # the same word is no edit
        ("ab", "abcd", False),
    ],
)
def test_one_edit_is_a_letter_dropped_added_changed_or_two_neighbours_swapped(
    word: str, other: str, near: bool
) -> None:
    assert within_one_edit(word, other) is near


def test_the_words_one_edit_away_are_the_vocabularys() -> None:
    assert "commit" in one_edit("comit")
    assert "directory" in one_edit("direcotry")
    assert one_edit("mrege") == ["merge"]
    assert one_edit("xqzvw") == []


@pytest.mark.parametrize(
    ("text", "unknown"),
    [
        ("comit my changes with mesage 'fix build'", ["comit", "mesage"]),
        ("lsit the direcotry contents of src", ["lsit", "direcotry"]),
        # English words the model's vocabulary lacks (cl100k's words, and stems: `head` of "headings").
        ("find trendy routers and headings", []),
        # Three letters, quoted values, paths, file names and identifiers are left alone.
        ("ls cwd tz", []),
        ("ask about 'teh plna'", []),
        ("open src/utlis/helpr.py and run get_lsit", []),
        # A capitalised word among lower-case ones is a name, and a word alone; a request all in capitals or with
        # every word capitalised is read as in lower case.
        ("trade on Binance and Xqzvw", []),
        ("Binance", []),
        ("TSLA", []),
        ("COMIT MY CHANGES", ["comit"]),
        ("Lsit The Direcotry", ["lsit", "direcotry"]),
    ],
)
def test_the_words_that_could_be_misspelt_are_no_english_words(text: str, unknown: list[str]) -> None:
    assert unknown_words(text) == unknown


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("comit my changes", "commit my changes"),
        ("lsit the direcotry contents of src", "list the directory contents of src"),
        ("mrege pull reqest 31", "merge pull request 31"),
        ("show slak history", "show slack history"),
        ("COMIT MY CHANGES", "commit MY CHANGES"),
        # No word of the scope one edit away: as written.
        ("maak een nieuwe map", "maak een nieuwe map"),
        ("", ""),
    ],
)
def test_a_misspelt_word_is_read_as_the_catalogs_word(text: str, read: str) -> None:
    assert correct_spelling(text, held(CATALOG)) == read


def test_the_word_the_most_tools_hold_is_chosen_and_a_held_word_is_kept() -> None:
    # "serch" is one edit from `search` and `perch`: the one the scope's tools hold.
    assert correct_spelling("serch files", held({"perch": 1, "search": 2})) == "search files"
    assert correct_spelling("serch files", held({"perch": 2, "search": 1})) == "perch files"
    # A word some tool holds (a product's name, an identifier's part) is no misspelling.
    assert correct_spelling("comit my changes", held({"comit": 1, "commit": 5})) == "comit my changes"


def test_a_word_no_tool_of_the_scope_holds_is_never_what_a_word_is_read_as() -> None:
    """Least knowledge: a request misspelt near a hidden tool's word is read as written."""
    assert correct_spelling("comit my changes", held({"list": 3})) == "comit my changes"
