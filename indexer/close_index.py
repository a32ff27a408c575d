"""The tool names close to an unknown one by indexer/closest.py's rules, found without comparing it with every name:
one 404 of a broad caller compared up to 500 names in Python (55 ms at 50k tools) and missed close names past those
500. The index offers a superset of the names each rule calls close; the rules then rank those alone.

- The same name spelt another way: the name directory's normalised keys (passed in as `by_key`).
- A typo (edits within k of the asked name, adjacent transpositions counting one): each edit spoils at most three
  of the bigrams of a name padded at both ends and moves the others by one place at most, so a name within k edits
  is within k of its length and holds all but 3k of its bigrams within k places of where they are: postings of
  bigrams by length and place.
- The same words for the most part (tier 2, ranked after every typo): a listed name sharing m words of three
  characters or more with the asked one (of a words) is close only when it has b < 4m - a words; it then holds at
  least (a + b) // 4 + 1 of the asked words. Postings by (word, b) count m for every such name; only when the
  typos leave room among the n closest are they counted, and ranked best first until no other can come before.

Postings are lists: a removed or renamed tool's entries stay until a compaction (every candidate is checked against
the names as they are now), and are rebuilt once there are as many stale entries as live ones."""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Container, Mapping, Set

from indexer.closest import MIN_WORD_CHARS, SEPARATOR, Ranked, _words, allowed_edits, ranking
from indexer.documents import normalize_name_key

EDGE_START, EDGE_END = "\x02", "\x03"
SPOILED_PER_EDIT = 3  # a transposition spoils the bigrams before, across and after it
COUNTED_POSTINGS = 40_000  # postings counted past the fewest places a typo's hit must be among


def _placed_bigrams(text: str) -> list[str]:
    """The bigrams of the text padded at both ends, each with its position (a character after the pair)."""
    padded = EDGE_START + text + EDGE_END
    return [padded[i : i + 2] + chr(i) for i in range(len(padded) - 1)]


class _Spellings:
    """Qualified names by the length and the placed bigrams of one of their spellings (lower case)."""

    def __init__(self) -> None:
        self.grams: dict[int, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
        self.lengths: dict[int, list[str]] = defaultdict(list)

    def add(self, text: str, qualified: str) -> None:
        self.lengths[len(text)].append(qualified)
        postings = self.grams[len(text)]
        for placed in _placed_bigrams(text):
            postings[placed].append(qualified)

    def within_edits(self, asked: str) -> list[str]:
        """A superset of the names spelt within allowed_edits(asked) of `asked`: an unspoilt bigram of `asked` at
        position i is one of theirs at a position within i +- k, so they hold at least len(asked) + 1 - 3k of them
        (a hit for each position of `asked`)."""
        limit = allowed_edits(asked)
        if limit == 0:
            return []  # the same spelling: the directory's keys find it
        need = len(asked) + 1 - SPOILED_PER_EDIT * limit
        lengths = range(len(asked) - limit, len(asked) + limit + 1)
        if need <= 0:
            return [q for length in lengths for q in self.lengths.get(length, ())]
        padded = EDGE_START + asked + EDGE_END
        by_length = [postings for length in lengths if (postings := self.grams.get(length)) is not None]
        places: list[tuple[int, list[list[str]]]] = []
        for i in range(len(padded) - 1):
            gram = padded[i : i + 2]
            found = [
                p
                for postings in by_length
                for j in range(max(0, i - limit), i + limit + 1)
                if (p := postings.get(gram + chr(j)))
            ]
            places.append((sum(map(len, found)), found))
        # Counted at the rarest places only (the server's prefix is shared by all its names): a name within k
        # edits still has a hit at all but 3k of any places counted.
        places.sort(key=lambda place: place[0])
        counted, total = 0, 0
        hits = Counter[str]()
        for size, found in places:
            if counted > SPOILED_PER_EDIT * limit and total + size > COUNTED_POSTINGS:
                break
            counted, total = counted + 1, total + size
            for names in found:
                hits.update(names)
        return [q for q, count in hits.items() if count >= counted - SPOILED_PER_EDIT * limit]


class CloseNameIndex:
    """indexer/closest.py's close_names over every indexed name, kept as the name directory changes."""

    def __init__(self) -> None:
        self._listed: dict[str, str] = {}  # qualified name -> the name its server listed
        self._stale = self._entries = 0
        self._clear()

    def _clear(self) -> None:
        self._by_qualified, self._by_listed = _Spellings(), _Spellings()
        self._words: dict[tuple[str, int], list[str]] = defaultdict(list)  # (word, the name's word count) -> names

    def add(self, qualified: str, listed: str) -> None:
        if self._listed.get(qualified) == listed:
            return
        self._stale += qualified in self._listed
        self._listed[qualified] = listed
        self._index(qualified, listed)

    def _index(self, qualified: str, listed: str) -> None:
        self._entries += 1
        self._by_qualified.add(qualified.lower(), qualified)
        self._by_listed.add(listed.lower(), qualified)
        words = _words(listed)
        for word in words:
            if len(word) >= MIN_WORD_CHARS:
                self._words[word, len(words)].append(qualified)

    def discard(self, qualified: str) -> None:
        if self._listed.pop(qualified, None) is not None:
            self._stale += 1
            if self._stale * 2 > self._entries:
                self._clear()
                self._stale = self._entries = 0
                for name, listed in self._listed.items():
                    self._index(name, listed)

    def closest(self, name: str, by_key: Mapping[str, Set[str]], allowed: Container[str] | None, n: int) -> list[str]:
        """close_names(name, {every indexed name of `allowed`: its listed name}, n). `by_key`: the qualified names
        by the normalised keys of their qualified and listed names."""
        tool = name.partition(SEPARATOR)[2] or name
        found = set(by_key.get(normalize_name_key(name), ())) | set(by_key.get(normalize_name_key(tool), ()))
        found.update(self._by_qualified.within_edits(name.lower()))
        found.update(self._by_listed.within_edits(tool.lower()))
        ranked = sorted(
            entry
            for q in found
            if q in self._listed and (allowed is None or q in allowed) and (entry := ranking(name, q, self._listed[q]))
        )
        if sum(entry[0] < 2 for entry in ranked) < n:  # those found so far ranked by their words may be passed
            self._add_same_words(name, tool, found, allowed, ranked, n)
        return [entry[-1] for entry in ranked[:n]]

    def _add_same_words(
        self, name: str, tool: str, typos: set[str], allowed: Container[str] | None, ranked: list[Ranked], n: int
    ) -> None:
        """Into `ranked` (sorted), the closest names by their words: each is counted its shared words (a stale entry
        counts more, never fewer), then checked by the rules in that order until none left can come before the
        n-th."""
        asked = len(_words(tool))
        long_words = [word for word in _words(tool) if len(word) >= MIN_WORD_CHARS]
        server, separator, _ = name.lower().partition(SEPARATOR)
        hopeful: list[Ranked] = []
        for count in range(1, 4 * len(long_words) - asked):
            shared = Counter[str]()
            for word in long_words:
                shared.update(self._words.get((word, count), ()))
            for q, hits in shared.items():
                overlap = 2 * hits / (asked + count)
                if overlap > 0.5 and q not in typos and q in self._listed and (allowed is None or q in allowed):
                    elsewhere = not (separator and q.lower().startswith(server + SEPARATOR))
                    hopeful.append((2, elsewhere, -overlap, q))
        for bound in sorted(hopeful):
            if len(ranked) >= n and ranked[n - 1] < bound:
                return
            if (entry := ranking(name, bound[-1], self._listed[bound[-1]])) is not None:
                bisect.insort(ranked, entry)
