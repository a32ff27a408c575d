"""A request's text as the search reads it: one normalisation at the entry, so the dense fields, BM25, the name
match, the intent split and the verbs all see the same words however the caller wrote them. Pure."""

from __future__ import annotations

import re
import unicodedata

# Curly and low quotes that NFKC keeps: the framing's "I'd like to" and a quoted name read them as ASCII.
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'",
                         "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"'})
# Invisible characters (zero-width spaces and joiners, the byte order mark, soft hyphens: Unicode's format
# category) split a word in two for BM25 and the verbs; pictographs (emoji, their skin tones and variation
# selectors) carry no request and, ahead of it, hid its framing ("🔍 show me ...").
_INVISIBLE = frozenset({"Cf", "Co", "Cs"})
PICTOGRAPHS_FROM = 0x2100  # other symbols (category So) from the letterlike block on; `°` and `©` stay
_MODIFIERS = re.compile(r"[\ufe00-\ufe0f\U0001f3fb-\U0001f3ff]")
_FENCE = re.compile(r"^\s*(?:```|~~~)[\w+-]*\s*$", re.MULTILINE)
_LIST_MARK = re.compile(r"^[ \t]*(?:[-*+•>]|#{1,6})[ \t]+", re.MULTILINE)
# Emphasis as a pair of marks around words (`**bold**`, `*this*`), never a product's `5 * 3` nor `A* search`.
# (A pair within 200 characters: an 8,000-character line of marks is read in 14 ms, not scanned quadratically.)
_EMPHASIS = re.compile(r"(?<![\w*])(\*{1,3})(?=[^\s*])([^\n]{0,200}?[^\s*])\1(?![\w*])")
# A line break inside a sentence (after no end mark, before a lower-case word) is a hard wrap, not a new task: the
# intent split read each wrapped line as a part. A list of tasks keeps its breaks when its lines are marked,
# numbered or capitalised; an unmarked lower-case list reads as one sentence.
_SOFT_BREAK = re.compile(r"(?<=[^\s.!?:;])[^\S\n]*\n[^\S\n]*(?=[a-z(])")
_SPACES = re.compile(r"[^\S\n]+")
_LINE_EDGES = re.compile(r" ?\n[\n ]*")
# A greeting before the request and thanks after it name no task, and the dense fields read every word.
_GREETING = re.compile(r"^(?:(?:hi|hello|hey|greetings)(?: there)?[!,.]+|(?:hi|hello|hey) there)\s+", re.IGNORECASE)
_THANKS = re.compile(
    r"\s*[,;-]?\s*\b(?:thanks|thank you|thx|ty|cheers|tia)(?: (?:so|very) much| a lot| in advance)?"
    r"(?: for (?:your|the|all your) (?:help|assistance|time))?[\s!.:)]*$",
    re.IGNORECASE,
)
_REPEATED_MARKS = re.compile(r"([!?.])[!?]+|([!?])\.+")  # "??", "?!!", "!!!", "?..": the first mark
# Cheap tests of whether a pattern can match at all: most requests are one line with no thanks, and the full
# patterns cost 35 µs of a short request's 44 (on the event loop) when run on every text.
_MAYBE_REPEATED = re.compile(r"[!?.][!?]|[!?]\.")
_MAYBE_THANKS = re.compile(r"\b(?:thank|thx|ty\b|tia\b|cheers)", re.IGNORECASE)
_WRAPPING_QUOTES = re.compile(r"""^(["'])(.+)\1$""", re.DOTALL)


def _kept(char: str) -> bool:
    if char.isascii():
        return True
    category = unicodedata.category(char)
    return category not in _INVISIBLE and not (category == "So" and ord(char) >= PICTOGRAPHS_FROM)


def plain_characters(text: str) -> str:
    """The characters of a text as the search reads them: NFKC, ASCII quotes, no invisible characters nor
    pictographs. A tool's name is read so too (indexer/documents.py, normalize_name_key), so that the request that
    spells it finds it first whatever compatibility forms the name was written in (`ＡＢＣ`, a decomposed accent)."""
    plain = unicodedata.normalize("NFKC", text).translate(_QUOTES)
    return plain if plain.isascii() else "".join(filter(_kept, _MODIFIERS.sub("", plain)))


def normalize_query(text: str) -> str:
    """The request in NFKC (full-width letters, non-breaking spaces and decomposed accents as their plain forms),
    with ASCII quotes, without invisible characters, pictographs or markdown (code fences, list marks, headings,
    bold, backticks), a hard-wrapped line joined to the one before, each line's spaces collapsed, repeated marks as
    one (`?!!`: `?`), without a greeting before it or thanks after it, stripped; a request wrapped whole in quotes
    is unwrapped (`"get_current_time"` names the tool). Empty when nothing else was there."""
    if text.isascii() and text.isprintable() and "`" not in text and "*" not in text:
        plain = text  # the common case: only spaces, list marks and quotes to look at
    else:
        plain = plain_characters(text)
    plain = _FENCE.sub("", plain)
    if "\n" in plain:
        plain = _LIST_MARK.sub("", _SOFT_BREAK.sub(" ", plain))
    else:
        plain = _LIST_MARK.sub("", plain, count=1)  # one line: a mark only at its start
    if "*" in plain:
        plain = _EMPHASIS.sub(r"\2", plain)
    plain = _SPACES.sub(" ", plain.replace("`", ""))
    plain = (_LINE_EDGES.sub("\n", plain) if "\n" in plain else plain).strip()
    if _MAYBE_REPEATED.search(plain):
        plain = _REPEATED_MARKS.sub(lambda m: m.group(1) or m.group(2), plain)
    # Unwrapped first: a request quoted whole is read as written bare, its greeting and thanks too.
    if unwrapped := _WRAPPING_QUOTES.match(plain):
        plain = unwrapped.group(2).strip()
    polite = _GREETING.sub("", plain)
    if _MAYBE_THANKS.search(polite):
        polite = _THANKS.sub("", polite)
    return polite if polite.strip(" ,.!?") else plain  # "Thanks!" alone stays a request


# Chat shorthand for the things tools act on, which tool texts spell out: "list open PRs" met `memory__open_nodes`
# by its name verb and no text that says "pull request"; "DM bob" met nothing of Slack's `post_message`. Whole
# words, any case; a name that holds one (`pr_number`, `get_dm`) is left alone.
_SHORTHAND = {
    "pr": "pull request",
    "prs": "pull requests",
    "dm": "direct message",
    "dms": "direct messages",
    "repo": "repository",
    "repos": "repositories",
}
_SHORTHAND_WORD = re.compile(r"(?<![\w./-])(?:" + "|".join(_SHORTHAND) + r")(?![\w/-]|\.\w)", re.IGNORECASE)


def expand_shorthand(text: str) -> str:
    """The request with its chat shorthand spelled out (`PR` as "pull request", `DM` as "direct message", `repo`
    as "repository"), as the dense fields, BM25, the split and the verbs read it; the exact name reads the
    request as written."""
    return _SHORTHAND_WORD.sub(lambda m: _SHORTHAND[m.group(0).lower()], text)


# A file name's words are not the task: "the first 20 lines of server.log" put git_log first by its `log`, "when was
# report.pdf last modified?" too. Read as "the file server.log", the request says what it acts on. Not a host name
# (a URL's, or a bare `example.com`), nor a name already said to be a file.
_WEB_SUFFIXES = frozenset({"com", "org", "net", "io", "dev", "ai", "app", "co", "edu", "gov", "info", "me", "us"})
_FILE_NAME = re.compile(
    r"(?<![\w./:@-])(?<!\bfile )(?<!\bfiles )([\w-]+(?:\.[\w-]+)*\.([A-Za-z][A-Za-z0-9]{1,4}))(?![\w/-]|\.\w)"
)


def name_files(text: str) -> str:
    """The request with each bare file name said to be one (`server.log` as "file server.log")."""
    if "." not in text:
        return text
    return _FILE_NAME.sub(lambda m: m.group(0) if m.group(2).lower() in _WEB_SUFFIXES else "file " + m.group(0), text)


# A quoted key of inline JSON or a dict (`{"time": "16:00"}`: the `time` before its colon) names a parameter, which says
# which tool; its value is what to pass.
_QUOTED = re.compile(r"""(?<!\w)(['"])[^'"\n]{1,200}\1(?!\w)(?!\s*:)""")


def without_quoted(text: str) -> str:
    """The request with its quoted values emptied (`send 'deploy done' to #ops` as `send '' to #ops`)."""
    return _QUOTED.sub(lambda m: m.group(1) * 2, text) if ("'" in text or '"' in text) else text


def read_request(text: str) -> str:
    """A request (as `normalize_query` writes it) as every signal after the exact name reads it: chat shorthand
    spelled out, each bare file name said to be one. The dense fields then read it `without_quoted`."""
    return name_files(expand_shorthand(text))
