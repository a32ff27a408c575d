"""BM25 sparse vectors for the `lexical` signal. Documents carry only the term-frequency part of BM25 and queries
each distinct term once with weight 1; the index weighs them by their IDF in the caller's scope
(indexer/index/term_counts.py)."""

from __future__ import annotations

import re
import unicodedata
import zlib
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain

import snowballstemmer

from indexer.documents import joined_words, split_identifier

_WORD = re.compile(r"\w+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
# Scripts written without spaces between words (Thai, Lao, Myanmar, Khmer): a whole sentence is one run of letters,
# read as its bi- and trigrams (a letter alone, unlike an ideograph, says little: each request's letters were in
# every tool's text). Before, `\w` cut such a run at each vowel sign and BM25 matched stray letter pairs.
_UNSPACED = re.compile(r"[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff]")

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


@lru_cache(maxsize=1)
def _marked_word() -> re.Pattern[str]:
    """A word that keeps its combining marks (Unicode category M): `\\w` has none, so a Devanagari or Thai vowel
    sign, or a decomposed accent, cut the word there (`भेजें`: `भ`, `ज`, both dropped as one letter each). The marks
    of the Basic Multilingual Plane, gathered once (20 ms) when a first text that is not ASCII comes."""
    marks = [chr(c) for c in range(0x300, 0x10000) if unicodedata.category(chr(c)).startswith("M")]
    return re.compile(rf"[\w{re.escape(''.join(marks))}]+")


def words_of(text: str) -> list[str]:
    """The words of a text as BM25 reads them (a request and a tool's texts come in NFKC: indexer/query_text.py,
    indexer/documents.py)."""
    return _WORD.findall(text) if text.isascii() else _marked_word().findall(text)


def tokenize(text: str) -> list[str]:
    """Lower-cased, identifier-split (a camel-case word joined as well), stop-word-free, stemmed terms (runs of
    CJK and of the scripts without spaces become uni- and bigrams)."""
    terms: list[str] = []
    for raw in words_of(text):
        terms.extend(_word_terms(raw) if len(raw) <= CACHED_WORD_CHARS else _split_terms(raw))
    return terms


def _split_terms(raw: str) -> tuple[str, ...]:
    """The terms of one word of a text: its split words, and a camel-case word's joined form too, so that
    `GitHub`, `github` and `GITHUB` in a request or a document meet."""
    if _CJK.search(raw) or _UNSPACED.search(raw):
        # Each part of an identifier on its own (`check_テスト`: `check`, and the katakana's letters, no `_` in them).
        return tuple(chain.from_iterable(map(_letter_terms, raw.split("_")))) if "_" in raw else _letter_terms(raw)
    return tuple(
        _stem(word) if word.isascii() else word
        for word in (*split_identifier(raw).split(), *joined_words(raw))
        if len(word) >= 2 and word not in STOPWORDS
    )


def _letter_terms(part: str) -> tuple[str, ...]:
    if _CJK.search(part):
        return tuple(_cjk_terms(part))
    if _UNSPACED.search(part):
        return (*(part[i : i + 2] for i in range(len(part) - 1)), *(part[i : i + 3] for i in range(len(part) - 2)))
    return _split_terms(part)


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
