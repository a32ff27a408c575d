"""What a tool's name says about it: how closely a query spells it, and the action verb that leads it. Pure."""

from __future__ import annotations

from collections.abc import Iterable

from indexer.documents import split_identifier
from indexer.lexical import _stem

MIN_VERB_CHARS = 3


def spelling_tier(query: str, names: Iterable[str]) -> int:
    """0 when the query spells one of the names exactly, 1 when only letter case differs, 2 otherwise
    (an exact-name match that differs in separators: `math.gcd` for a query `math_gcd`)."""
    text = query.strip()
    names = list(names)
    if text in names:
        return 0
    if text.lower() in {n.lower() for n in names}:
        return 1
    return 2


def name_verb(name: str, server: str) -> str:
    """The stemmed first word of a tool name after the words it shares with its server (`git_commit` on `git`:
    `commit`); empty when the name has no such word."""
    words = split_identifier(name).split()
    server_words = set(split_identifier(server).split())
    while len(words) > 1 and words[0] in server_words:
        words = words[1:]
    verb = _stem(words[0]) if words else ""
    return verb if len(verb) >= MIN_VERB_CHARS else ""


def query_stems(query: str) -> frozenset[str]:
    """The stemmed words of a request, stop-words included (a verb like `get` or `find` is one)."""
    return frozenset(_stem(w) for w in split_identifier(query).split())
