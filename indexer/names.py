"""What a tool's name says about it: how closely a query spells it, and the action verb that leads it. Pure."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from indexer.documents import split_identifier
from indexer.lexical import STOPWORDS, _stem
from indexer.spelling import model_vocabulary

MIN_VERB_CHARS = 3
LEAD_CHARS = 200
# Request framing that carries no intent ("Can you please help me", "I'd like to"), at the start of a sentence,
# and "please" anywhere: what is left starts with the action when the request names one.
FRAMING = re.compile(
    r"(?:^|(?<=[.!?,;] ))(?:(?:hi|hello|hey)(?: there)?[!,.]*\s+"
    r"|(?:can|could|would|will) you(?: please)?(?: help me| assist me)?(?: to| with| in| by)?\s+"
    r"|please\s+|help me(?: to| with)?\s+|i(?:'d| would) like(?: you)? to\s+|i (?:want|need)(?: you)? to\s+"
    r"|(?:show|tell|give) me\s+|let me (?:know|see)\s+)+",
    re.IGNORECASE,
)
# Not from inside a run of whitespace, nor backing into one: 8,000 spaces took 1.2 s (see indexer/intents.py).
_PLEASE = re.compile(r"(?!(?<=\s)\s),?\s*+\bplease\b", re.IGNORECASE)
_PUNCTUATION = re.compile(r"[^\w\s]+")


def without_framing(text: str) -> str:
    """The request without its framing words (empty when nothing else is left)."""
    return _PLEASE.sub("", FRAMING.sub("", text)).strip()


def spelling_tier(query: str, names: Iterable[str], spelled: str | None = None) -> int:
    """0 when the query spells one of the names exactly, 1 when only letter case differs, 2 otherwise
    (an exact-name match that differs in separators: `math.gcd` for a query `math_gcd`).

    `spelled`: the request as the caller wrote it, when its reading (indexer/query_text.py) changed it. A name spelled
    so comes before all (0), the others a tier later: the request `ＡＢＣ` is read as `ABC`, and found `ABC` before
    the tool named `ＡＢＣ`."""
    names = list(names)
    if spelled is not None and spelled.strip() != query.strip():
        return 0 if spelled.strip() in names else 1 + spelling_tier(query, names)
    text = query.strip()
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


def _leading_word(text: str) -> str:
    """The lower-cased first word of a request once its framing is gone ("" when none), read from its first
    LEAD_CHARS characters: 0.03 ms, where a whole 8,000-character request took 4 ms."""
    return _lead_of(text[:LEAD_CHARS])


@lru_cache(maxsize=64)
def _lead_of(head: str) -> str:
    """`_leading_word` of a request's head. Kept for the last few heads: a search asks it twice a text (its lead
    verb, whether it asks a question), 0.05 ms each. Only the words up to the first that `split_identifier` keeps
    are split, as the first of all its words is that one's first (the same word, without splitting 200
    characters: 0.04 ms)."""
    for token in _PUNCTUATION.sub(" ", without_framing(head)).split():
        if words := split_identifier(token).split():
            return words[0]
    return ""


def lead_verb(text: str) -> str:
    """The stemmed word a request leads with once its framing is gone (`commit` in "Please commit my staged
    changes"), the action when it names one; empty for a stop-word ("what time is it").

    A tool whose name verb is the request's lead verb is the sibling that does what was asked: "commit my staged
    changes" is a commit, although git_diff_staged's description ("changes that are staged for commit") is the
    nearer text."""
    word = _leading_word(text)
    if not word or word in STOPWORDS:
        return ""
    verb = _stem(word)
    return verb if len(verb) >= MIN_VERB_CHARS else ""


# A request to remember something asks a tool to write it down: "remember that Alice works at Acme" is an add or a
# create, though no tool's name says "remember"; so does "store a fact about Bob" (a write for "store this in
# notes.txt"). Not "save": "save a note that Bob likes tea" lifted slack_add_reaction among the three best.
REMEMBER_VERBS = frozenset(_stem(verb) for verb in ("remember", "memorize", "memorise", "store"))
WRITE_VERBS = frozenset(
    _stem(verb) for verb in ("add", "create", "save", "store", "write", "record", "insert", "remember")
)


def wanted_verbs(text: str) -> frozenset[str]:
    """The name verbs a request asks for by the verb it leads with: that verb, and for a request to remember, the
    verbs that write (empty when it leads with none)."""
    verb = lead_verb(text)
    if not verb:
        return frozenset()
    return WRITE_VERBS | {verb} if verb in REMEMBER_VERBS else frozenset({verb})


# Verbs that make or add, and verbs that take away: a request that leads with one of a pair never wants the other
# first ("remove the relation between Alice and Acme" is delete_relations, not create_relations, which MiniLM and
# the shared words put nearer; "undo staging of all files" is not git_add). A gateway that runs tools must not put a
# tool that deletes first for a request to create, nor the reverse.
MAKE_VERBS = frozenset(
    _stem(verb)
    for verb in ("add", "create", "make", "new", "insert", "write", "save", "store", "record", "remember", "memorize",
                 "memorise", "stage")
)
TAKE_VERBS = frozenset(
    _stem(verb) for verb in ("delete", "remove", "erase", "drop", "destroy", "forget", "undo", "unstage", "clear")
)


def opposed_verbs(text: str) -> frozenset[str]:
    """The name verbs that undo what a request leads with: the verbs that take away for a request to make or add,
    and the reverse (empty for any other lead)."""
    verb = lead_verb(text)
    if verb in MAKE_VERBS:
        return TAKE_VERBS
    if verb in TAKE_VERBS:
        return MAKE_VERBS
    return frozenset()


QUESTION_WORDS = frozenset({"what", "which", "who", "when", "where", "how", "is", "are", "does", "do"})
# Name verbs of tools that read rather than act: what a question ("what time is it in Tokyo?") asks a tool to do.
READ_VERBS = frozenset(
    _stem(verb)
    for verb in ("get", "list", "read", "show", "find", "search", "fetch", "view", "query", "check", "describe")
)


def asks(text: str) -> bool:
    """Whether a request is a question (it leads with a question word once its framing is gone)."""
    return _leading_word(text) in QUESTION_WORDS


def past_tense(word: str) -> bool:
    """Whether a word is a verb's past form ("created", "added", "replied", "stopped": a vocabulary word with its
    ending taken off), which says what happened, not what is asked ("who replied in that thread"); not "embed",
    "need" or "proceed"."""
    if len(word) < 5 or word[-2:] != "ed" or word[-3] == "e":
        return False
    vocabulary = model_vocabulary()
    return (
        word[:-1] in vocabulary
        or word[:-2] in vocabulary
        or (word.endswith("ied") and word[:-3] + "y" in vocabulary)
        or (word[-3] == word[-4] and word[:-3] in vocabulary)
    )


def query_stems(query: str) -> frozenset[str]:
    """The stemmed words of a request once its framing is gone, stop-words included (a verb like `get` or `find`
    is one; the `show` of "show me ..." or the `help` of "help me ..." asks for nothing). Punctuation stays on its
    word ("commit?"): stripping it moved R@5 by -.0003 on both dev sets."""
    words = split_identifier(without_framing(query)).split()
    return frozenset(_stem(w) for w in words if not (w[-2:] == "ed" and past_tense(w)))
