"""The caches of the lexical analysis are bounded in entries; a request's words are the caller's, so a word long
enough to weigh is not cached (each search of a new 8,000-character word kept ~20 KB)."""

from __future__ import annotations

import random
import string
from typing import Any

from indexer import lexical
from tests.security.conftest import bearer


def cached_words() -> tuple[int, int]:
    stems = getattr(lexical, "_cached_stem", lexical._stem)
    return lexical._word_terms.cache_info().currsize, stems.cache_info().currsize


async def test_searches_of_long_new_words_leave_nothing_in_the_word_caches(world: dict[str, Any]) -> None:
    """Measured before: 3,000 searches of one new 7,990-character word each grew the service by 122 MiB (6,102
    stems and 3,104 words cached); the caches hold 50,000 and 200,000 entries, some 1-2 GB of such words."""
    http, dev = world["http"], world["dev"]
    rng = random.Random(7)
    before = cached_words()
    for _ in range(7):  # within the rate limit's burst: 8 tokens each (one per 1,000 characters), 56 of 60
        word = "".join(rng.choices(string.ascii_lowercase, k=7_990))
        answer = await http.post("/search", json={"query": f"weather {word}"}, headers=bearer(dev))
        assert answer.status_code == 200, answer.text[:200]
    words, stems = cached_words()
    assert words - before[0] <= 2 and stems - before[1] <= 2, (before, (words, stems))
    found = await http.post("/search", json={"query": "weather forecast for a city", "k": 1}, headers=bearer(dev))
    assert found.json()["results"][0]["name"] == "public__get_weather"
