"""Which tool names an unknown name is close to, for the "closest" of a 404. Pure.

A name is close when it is the same name spelt another way (letter case, `_ - .` and spaces, or with another
server's prefix or none: the exact-name tier of search), a typo away (edits within 1 for up to 5 characters, 2
beyond, one more per 8 characters past 16), or made of the same words for the most part (the Dice overlap of
their stemmed words over a half: `read` and `read_file`, not `get_sum` and `get-env`). The tools of the server
the name starts with come first. Anything else is no suggestion: `nope__x` is close to no tool, and naming tools
at random (difflib's ratio put `memory__open_nodes` first for `nope__x`) helps nobody.
"""

from __future__ import annotations

from collections.abc import Mapping

from indexer.documents import normalize_name_key, split_identifier
from indexer.lexical import _stem

SEPARATOR = "__"
MIN_WORD_CHARS = 3


def allowed_edits(text: str) -> int:
    """How many single-character edits still spell the same name (Elasticsearch's AUTO fuzziness, widened for
    long names)."""
    if len(text) <= 2:
        return 0
    if len(text) <= 5:
        return 1
    return 2 + max(0, len(text) - 16) // 8


def edit_distance(a: str, b: str, limit: int) -> int:
    """Levenshtein distance with adjacent transpositions counting as one edit, or limit + 1 once it is past
    limit (only the band of width 2 * limit + 1 around the diagonal is computed)."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    far = limit + 1
    before: list[int] | None = None
    previous = [j if j <= limit else far for j in range(len(b) + 1)]
    for i in range(1, len(a) + 1):
        current = [far] * (len(b) + 1)
        current[0] = i if i <= limit else far
        for j in range(max(1, i - limit), min(len(b), i + limit) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            value = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if before is not None and i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                value = min(value, before[j - 2] + 1)
            current[j] = min(value, far)
        if min(current) > limit:
            return far
        before, previous = previous, current
    return previous[len(b)]


def _words(text: str) -> frozenset[str]:
    return frozenset(_stem(word) for word in split_identifier(text).split())


def closeness(name: str, qualified: str, listed: str) -> tuple[int, float] | None:
    """How close `name` is to the tool `qualified` (listed by its server as `listed`), smaller is closer, or None
    when it is not close: (0, 0) the same name spelt another way, (1, edits) a typo, (2, -overlap) the same words."""
    tool = name.partition(SEPARATOR)[2] or name
    if normalize_name_key(name) in {normalize_name_key(qualified), normalize_name_key(listed)}:
        return 0, 0.0
    if normalize_name_key(tool) == normalize_name_key(listed):
        return 0, 0.0
    typos = [
        edits
        for asked, offered in ((name.lower(), qualified.lower()), (tool.lower(), listed.lower()))
        if (edits := edit_distance(asked, offered, allowed_edits(asked))) <= allowed_edits(asked)
    ]
    if typos:
        return 1, float(min(typos))
    asked, offered = _words(tool), _words(listed)
    if not asked or not offered:
        return None
    shared = [word for word in asked & offered if len(word) >= MIN_WORD_CHARS]  # `x` of `nope__x` says nothing
    overlap = 2 * len(shared) / (len(asked) + len(offered))
    return (2, -overlap) if overlap > 0.5 else None


Ranked = tuple[int, bool, float, str]


def ranking(name: str, qualified: str, listed: str) -> Ranked | None:
    """Where the tool `qualified` (listed as `listed`) comes among the names close to `name`, smaller first: its
    closeness, those of the server `name` starts with first, then by name; None when it is not close."""
    rank = closeness(name, qualified, listed)
    if rank is None:
        return None
    server, separator, _ = name.lower().partition(SEPARATOR)
    elsewhere = not (separator and qualified.lower().startswith(server + SEPARATOR))
    return rank[0], elsewhere, rank[1], qualified


def close_names(name: str, candidates: Mapping[str, str], n: int = 5) -> list[str]:
    """The at most n candidates (qualified name -> the name its server listed) close to `name`: the closest first,
    of each closeness those of the server `name` starts with first."""
    ranked = [entry for qualified, listed in candidates.items() if (entry := ranking(name, qualified, listed))]
    return [entry[-1] for entry in sorted(ranked)[:n]]
