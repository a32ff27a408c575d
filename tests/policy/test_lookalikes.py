"""Deny and destructive patterns against names spelled with lookalike letters: Cyrillic or Greek letters that pass
for Latin ones, fullwidth forms, digits that pass for letters. The qualified name of such a tool keeps no letter
that is not ASCII (`dеlete_file` becomes `fs__d_lete_file-<hash>`), so the patterns read the name as the upstream
listed it too, both folded to a skeleton; allow patterns stay exact."""

from __future__ import annotations

import pytest

from indexer.tools import qualify
from service.policy.permissions import fold_spelling, parse_permissions, skeleton

CYRILLIC_E = "d\u0435lete_file"  # CYRILLIC SMALL LETTER IE
FULLWIDTH = "\uff44\uff45\uff4c\uff45\uff54\uff45"  # ｄｅｌｅｔｅ
GREEK_OMICRON = "dr\u03bfp_table"  # GREEK SMALL LETTER OMICRON
PERMISSIONS = parse_permissions(
    {
        "roles": {
            "dev": {"allow": ["server:fs", "server:db"], "deny": ["*delete*"]},
            "tester": {"allow": ["fs__delete_*", "db__drop_table"]},
        },
        "destructive": ["db__drop_*"],
    }
)


@pytest.mark.parametrize(
    ("text", "looks_like"),
    [
        (CYRILLIC_E, "delete_file"),
        (FULLWIDTH, "delete"),
        (GREEK_OMICRON, "drop_table"),
        ("D\u0415L\u0415T\u0415", "delete"),  # Cyrillic capital IE
        ("\u0434\u043b", "\u0434\u043b"),  # Cyrillic д and л pass for no Latin letter: left as they are
        ("\u039d\u039f", "no"),  # Greek capitals pass for N and O (their small forms for v and o)
        ("\U0001d41d\U0001d41e\U0001d425", "del"),  # mathematical bold, NFKC
        ("de1ete", "delete"),  # a digit that passes for a letter
        ("rem0ve", "rernove"),  # m passes for rn: names and patterns fold alike
        ("Delete_Repo", "delete_repo"),
    ],
)
def test_skeleton(text: str, looks_like: str) -> None:
    assert skeleton(text) == looks_like


def test_the_qualified_names_lose_the_lookalike_letters() -> None:
    assert qualify("fs", CYRILLIC_E).startswith("fs__d_lete_file-")
    assert qualify("fs", FULLWIDTH).startswith("fs__x-")


@pytest.mark.parametrize("listed", [CYRILLIC_E, FULLWIDTH, "d\u0435l\u0435t\u0435", "de1ete_file", "ＤＥＬＥＴＥ_x"])
def test_deny_catches_a_lookalike_name(listed: str) -> None:
    qualified = qualify("fs", listed)
    assert not PERMISSIONS.permits({"dev"}, qualified, "fs", listed)
    assert PERMISSIONS.permits({"dev"}, "fs__read_file", "fs", "read_file")


def test_without_the_listed_name_only_an_ascii_lookalike_is_caught() -> None:
    assert PERMISSIONS.permits({"dev"}, qualify("fs", CYRILLIC_E), "fs")
    assert not PERMISSIONS.permits({"dev"}, "fs__de1ete_file", "fs")


def test_allow_patterns_stay_exact() -> None:
    """Folding never widens what is allowed: `fs__delete_*` admits no lookalike of a delete tool."""
    assert PERMISSIONS.permits({"tester"}, "fs__delete_file", "fs", "delete_file")
    for listed in (CYRILLIC_E, FULLWIDTH, "de1ete_file", "Delete_file"):
        assert not PERMISSIONS.permits({"tester"}, qualify("fs", listed), "fs", listed), listed
    assert not PERMISSIONS.permits({"tester"}, qualify("db", GREEK_OMICRON), "db", GREEK_OMICRON)


def test_destructive_patterns_catch_a_lookalike_name() -> None:
    qualified = qualify("db", GREEK_OMICRON)
    assert PERMISSIONS.needs_approval(qualified, "db", {}, GREEK_OMICRON)
    assert PERMISSIONS.needs_approval(qualify("db", "DR\u039fP_x"), "db", {}, "DR\u039fP_x")  # Greek capital omicron
    assert not PERMISSIONS.needs_approval("db__select_rows", "db", {}, "select_rows")


def test_a_glob_keeps_its_wildcards_and_classes() -> None:
    assert fold_spelling("*dеlete*") == "*delete*"
    assert fold_spelling("fs__[a-z]m?_*") == "fs[a-z]rn?*"
    rules = parse_permissions({"roles": {"r": {"allow": ["*"], "deny": ["fs__[dD]elete_*"]}}})
    assert not rules.permits({"r"}, qualify("fs", "D\u0435lete_x"), "fs", "D\u0435lete_x")
    assert rules.permits({"r"}, "fs__create_x", "fs", "create_x")
