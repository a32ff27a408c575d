"""BM25 sparse vectors for the `lexical` signal. Documents carry only the term-frequency part of BM25 and queries
each distinct term once with weight 1; the index weighs them by their IDF in the caller's scope
(indexer/index/term_counts.py)."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from functools import lru_cache

import snowballstemmer

from indexer.documents import joined_words, split_identifier

_WORD = re.compile(r"\w+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")

STOPWORDS = frozenset(
    """a an and are as at be but by for if in into is it no not of on or such that the their then there these
    they this to was will with can could would should i me my you your we our us please want need some any
    do does did get from about which what who how when where all also just like using use""".split()
)


@dataclass(frozen=True)
class SparseVector:
    """Indices and values of a sparse vector, indices sorted and unique."""

    indices: list[int]
    values: list[float]


@lru_cache(maxsize=1)
def _stemmer() -> snowballstemmer.stemmer:
    return snowballstemmer.stemmer("english")


# Words longer than this are stemmed and split each time, not cached: the caches are bounded in entries, not in
# characters, and a request's words are the caller's (50,000 searches of one new 8,000-character word each would
# have held ~1 GB in them). Names are at most 64 characters: every word of a catalog is still cached.
CACHED_WORD_CHARS = 64


@lru_cache(maxsize=200_000)
def _cached_stem(word: str) -> str:
    return str(_stemmer().stemWord(word))


def _stem(word: str) -> str:
    return _cached_stem(word) if len(word) <= CACHED_WORD_CHARS else str(_stemmer().stemWord(word))


def _cjk_terms(run: str) -> list[str]:
    chars = list(run)
    return chars + [a + b for a, b in zip(chars, chars[1:], strict=False)]


def tokenize(text: str) -> list[str]:
    """Lower-cased, identifier-split (a camel-case word joined as well), stop-word-free, stemmed terms (CJK runs
    become uni- and bigrams)."""
    terms: list[str] = []
    for raw in _WORD.findall(text):
        terms.extend(_word_terms(raw) if len(raw) <= CACHED_WORD_CHARS else _split_terms(raw))
    return terms


def _split_terms(raw: str) -> tuple[str, ...]:
    """The terms of one word of a text: its split words, and a camel-case word's joined form too, so that
    `GitHub`, `github` and `GITHUB` in a request or a document meet."""
    if _CJK.search(raw):
        return tuple(_cjk_terms(raw))
    return tuple(
        _stem(word) if word.isascii() else word
        for word in (*split_identifier(raw).split(), *joined_words(raw))
        if len(word) >= 2 and word not in STOPWORDS
    )


# Words recur across requests and documents, and splitting and stemming them again cost a search 0.1-0.2 ms of
# event-loop time.
_word_terms = lru_cache(maxsize=50_000)(_split_terms)


def term_index(term: str) -> int:
    """A stable 31-bit index for a term, identical on every backend and every run."""
    return zlib.crc32(term.encode("utf-8")) & 0x7FFFFFFF


class Bm25Encoder:
    """Encodes documents and queries into sparse BM25 vectors."""

    def __init__(self, k1: float = 1.6, b: float = 0.75, avg_doc_len: float = 40.0) -> None:
        self.k1 = k1
        self.b = b
        self.avg_doc_len = avg_doc_len

    def encode_document(self, text: str) -> SparseVector:
        """BM25 term-frequency saturation per term; length normalised against a fixed average length so
        that adding a tool never changes the vectors of the others."""
        terms = tokenize(text)
        counts: dict[int, int] = {}
        for term in terms:
            idx = term_index(term)
            counts[idx] = counts.get(idx, 0) + 1
        norm = self.k1 * (1 - self.b + self.b * len(terms) / self.avg_doc_len)
        indices = sorted(counts)
        values = [counts[i] * (self.k1 + 1) / (counts[i] + norm) for i in indices]
        return SparseVector(indices, values)

    def encode_query(self, text: str) -> SparseVector:
        """Each distinct term once: long requests repeat words, and counting them again hurts."""
        indices = sorted({term_index(t) for t in tokenize(text)})
        return SparseVector(indices, [1.0] * len(indices))
