"""What an upstream says about its tools, checked before any agent reads it. Pure functions.

Two checks of every string of a tool (name, description, annotations, tags, and every key and string value of the
input schema):

- `hidden_character`: characters a human reviewer does not see but a model reads. Refused at registration.
- `instruction`: the signatures of published tool-poisoning attacks (text addressed to the model rather than
  describing the tool). A matching tool is held for an admin's review (service/catalog/holds.py).

Both are heuristics over the text a tool is registered with; README ("What an upstream says about its tools")
says what they catch and what they do not.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from indexer.json_pointer import pointer_token

# --------------------------------------------------------------------------------------------- hidden characters

# Format and control characters that render as nothing (or reorder what is around them), by kind. Unicode's Cf
# category covers most; the rest render as blank letters or marks. ZWJ and ZWNJ are judged by their neighbours,
# variation selectors by how many follow one base character, tags by the emoji flag sequence they may spell.
_NAMED = {
    0x00AD: "soft hyphen",
    0x034F: "combining grapheme joiner",
    0x061C: "bidirectional control",
    0x115F: "Hangul filler",
    0x1160: "Hangul filler",
    0x17B4: "invisible Khmer vowel",
    0x17B5: "invisible Khmer vowel",
    0x180E: "Mongolian vowel separator",
    0x200B: "zero-width space",
    0x200C: "zero-width non-joiner",
    0x200D: "zero-width joiner",
    0x200E: "bidirectional control",
    0x200F: "bidirectional control",
    0x3164: "Hangul filler",
    0xFEFF: "zero-width no-break space",
    0xFFA0: "Hangul filler",
}
_ALLOWED_CONTROLS = {0x09, 0x0A, 0x0D}  # tab, newline, carriage return
_PICTOGRAPHIC = ((0x2190, 0x21FF), (0x2300, 0x23FF), (0x2600, 0x27BF), (0x2B00, 0x2BFF), (0x1F000, 0x1FAFF))
_TAG_FLAG = re.compile("\U0001f3f4[\U000e0030-\U000e0039\U000e0061-\U000e007a]{1,6}\U000e007f")
_VARIATION = re.compile("[\ufe00-\ufe0f\U000e0100-\U000e01ef]")


def _kind(code: int) -> str | None:
    """What kind of invisible character this code point is, or None for a visible one (context aside)."""
    if code in _NAMED:
        return _NAMED[code]
    if 0xE0000 <= code <= 0xE007F:
        return "Unicode tag"
    if 0x202A <= code <= 0x202E or 0x2066 <= code <= 0x2069:
        return "bidirectional control"
    if code < 0x20 or 0x7F <= code <= 0x9F:
        return None if code in _ALLOWED_CONTROLS else "control character"
    if unicodedata.category(chr(code)) == "Cf":
        return "invisible format character"
    return None


def _pictographic(char: str) -> bool:
    code = ord(char)
    return char == "\ufe0f" or any(low <= code <= high for low, high in _PICTOGRAPHIC)


def _joins_letters(char: str) -> bool:
    """A letter or mark outside ASCII: where ZWJ and ZWNJ shape Indic and Arabic-script words."""
    return ord(char) > 0x7F and unicodedata.category(char)[0] in "LM"


def _joiner_allowed(text: str, position: int) -> bool:
    """ZWJ between two emoji (a family, a profession: one glyph) or, like ZWNJ, between two letters of a script
    that uses it (Persian, Devanagari); alone anywhere else, or in a run, it can only hide something."""
    if position == 0 or position + 1 >= len(text):
        return False
    before, after = text[position - 1], text[position + 1]
    if text[position] == "\u200d" and _pictographic(before) and _pictographic(after):
        return True
    return _joins_letters(before) and _joins_letters(after)


@dataclass(frozen=True)
class HiddenCharacter:
    code: int
    kind: str
    position: int  # in code points, counted from 0

    def describe(self, what: str) -> str:
        return f"{what} holds an invisible character U+{self.code:04X} ({self.kind}) at character {self.position}"


@functools.cache
def candidate_characters() -> re.Pattern[str]:
    """Every code point _kind() may name, and the variation selectors, as one character class: the search runs in C
    and the context rules run at its hits only (a Python loop over each character took 1.6 us a character)."""
    codes = [c for c in range(0x110000) if _kind(c) is not None and not 0xD800 <= c <= 0xDFFF]
    ranges, start = [], codes[0]
    for previous, code in zip(codes, [*codes[1:], -1], strict=True):
        if code != previous + 1:
            ranges.append(re.escape(chr(start)) + ("-" + re.escape(chr(previous)) if previous > start else ""))
            start = code
    return re.compile("[" + "".join(ranges) + "\ufe00-\ufe0f\U000e0100-\U000e01ef]")


def hidden_characters(text: str, controls: bool = True) -> Iterator[HiddenCharacter]:
    """The characters of `text` that a reader does not see, in order; without the control characters (but for
    those Unicode's Cf category holds) when `controls` is false."""
    if text.isascii() and text.isprintable():  # the common case, at C speed
        return
    flags: list[tuple[int, int]] | None = None
    for found in candidate_characters().finditer(text):
        position, char = found.start(), found.group()
        code = ord(char)
        if _VARIATION.match(char):
            # One selector picks a glyph's variant (emoji or text style, a CJK form); a run of them encodes bytes.
            if position == 0 or _VARIATION.match(text[position - 1]):
                yield HiddenCharacter(code, "variation selector run", position)
            continue
        if code in (0x200C, 0x200D) and _joiner_allowed(text, position):
            continue
        kind = _kind(code)
        if kind == "control character" and not controls:
            continue
        if kind == "Unicode tag":
            if flags is None:  # England, Scotland, Wales: U+1F3F4, tag letters, the cancel tag
                flags = [m.span() for m in _TAG_FLAG.finditer(text)]
            if any(start <= position < end for start, end in flags):
                continue
        yield HiddenCharacter(code, kind or "?", position)


def hidden_character(text: str) -> HiddenCharacter | None:
    """The first character of `text` that a reader does not see, or None."""
    return next(hidden_characters(text), None)


def without_hidden(text: str, controls: bool = True) -> tuple[str, list[HiddenCharacter]]:
    """`text` without the characters a reader does not see (`controls`: as hidden_characters), and those
    characters. The verdict on each is taken on the original text (a selector that follows a removed one still
    counts as part of its run)."""
    hidden = list(hidden_characters(text, controls))
    if not hidden:
        return text, hidden
    kept, start = [], 0
    for char in hidden:
        kept.append(text[start : char.position])
        start = char.position + 1
    kept.append(text[start:])
    return "".join(kept), hidden


# ------------------------------------------------------------------------------------------- what a tool says


def strings(value: Any, pointer: str = "") -> Iterator[tuple[str, str, bool]]:
    """Every string inside a JSON value, keys included, with its JSON pointer and whether it is a key (a key's
    pointer is that of its value). Iterative: schemas are bounded in depth but not in breadth."""
    stack: list[tuple[str, Any]] = [(pointer, value)]
    while stack:
        at, item = stack.pop()
        if isinstance(item, str):
            yield at, item, False
        elif isinstance(item, Mapping):
            children = []
            for key, child in item.items():
                child_at = f"{at}/{pointer_token(key)}"
                yield child_at, str(key), True
                children.append((child_at, child))
            stack.extend(reversed(children))
        elif isinstance(item, list):
            stack.extend(reversed([(f"{at}/{i}", child) for i, child in enumerate(item)]))


def tool_texts(fields: Mapping[str, Any]) -> Iterator[tuple[str, str, str, bool]]:
    """(field, pointer inside the field, text, is a key) of every string of a tool's registration."""
    for field, value in fields.items():
        if isinstance(value, str):
            yield field, "", value, False
        elif isinstance(value, Mapping | list | tuple):
            for at, text, is_key in strings(list(value) if isinstance(value, tuple) else value):
                yield field, at, text, is_key


@dataclass(frozen=True)
class Finding:
    """Where a check found something in a tool: the field, the JSON pointer inside it and why."""

    field: str
    at: str
    reason: str
    matched: str = ""


def find_hidden(fields: Mapping[str, Any]) -> Finding | None:
    """The first invisible character in a tool's strings (`fields`: name -> value as registered)."""
    for field, at, text, is_key in tool_texts(fields):
        found = hidden_character(text)
        if found is not None:
            what = f"{field} property name" if is_key else (f"{field} at {at}" if at else field)
            return Finding(field, at, found.describe(what))
    return None


# ------------------------------------------------------------------------------- instructions to the model

_CREDENTIALS = (
    r"~/\.ssh(?:/[\w.-]+)?|\.ssh/[\w.-]*|\bid_(?:rsa|dsa|ecdsa|ed25519)\b|\.cursor/mcp\.json|\bmcp\.json\b|claude_desktop_config"
    r"|\.aws/credentials|/etc/passwd|/etc/shadow|\.netrc\b|\.git-credentials|\.kube/config|\.npmrc\b|\.pypirc\b"
    r"|\.docker/config\.json|\.gnupg/"
)
_HANDLE = r"\b(?:read|cat|open|load|include|pass|send|attach|upload|provide|share|copy|forward|contents?)\b"
_USER = r"(?:the |your )?(?:user|human)s?\b"
_TELL = r"(?:tell|mention|inform|notify|alert|reveal|disclose|show|warn|let)(?:ing)?"

# name -> (prefilter, pattern, what it is the signature of), matched on the NFKC, case-folded, whitespace-collapsed
# text. The pattern runs only where its prefilter (words it cannot match without) finds something, within 160
# characters of each hit (no match is longer): text repeating a pattern's first word 3,000 times took 27 ms.
PATTERNS: dict[str, tuple[re.Pattern[str], re.Pattern[str], str]] = {
    "pseudo_tag": (
        re.compile(r"[<\[]"),
        re.compile(
            r"<\s*/?\s*(?:important|system|system[-_ ]?(?:prompt|message|reminder|instructions?)|admin[-_ ]?"
            r"instructions?)\s*>|<\|\s*(?:im_start|im_end|system|endoftext)\s*\|>|\[/?inst\]|<<\s*/?sys\s*>>"
        ),
        "a tag that poses as the system or marks text the model must obey (<IMPORTANT>, <system>, [INST])",
    ),
    "override": (
        re.compile(r"ignore|disregard|forget|override|bypass"),
        re.compile(
            r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:all\s+|any\s+|the\s+|your\s+)*"
            r"(?:previous|prior|above|earlier|preceding|former|system|original|other)\s+"
            r"(?:instructions?|prompts?|directions?|directives?|rules|guidelines|messages?)"
        ),
        "an instruction to set aside the model's other instructions",
    ),
    "conceal": (
        re.compile(r"user|human"),
        re.compile(
            rf"\b(?:do\s+not|don'?t|never|without)\s+{_TELL}\s+(?:\w+\s+){{0,3}}?(?:to\s+)?{_USER}"
            rf"|\b(?:hide|conceal|keep)\s+(?:\w+\s+){{0,4}}?from\s+{_USER}"
            rf"|\b{_USER}\s+(?:must|should|need)\s*(?:not|never)\s+(?:know|notice|see|find\s+out|be\s+told)"
        ),
        "an instruction to keep something from the user",
    ),
    "secret_file": (
        re.compile(_CREDENTIALS),
        re.compile(rf"{_HANDLE}[^.\n]{{0,80}}(?:{_CREDENTIALS})|(?:{_CREDENTIALS})[^.\n]{{0,80}}{_HANDLE}"),
        "a request to read or pass on a credential or client configuration file (~/.ssh, mcp.json)",
    ),
    "shadowing": (
        re.compile(r"this tool|@"),
        re.compile(
            r"\bwhen\s+this\s+tool\s+is\s+(?:available|present|loaded|installed)"
            r"|\bthis\s+tool\s+has\s+(?:a\s+)?(?:very\s+)?important\s+side\s+effects?"
            r"|\b(?:send|forward|copy|bcc|cc)\s+(?:a\s+copy\s+of\s+)?(?:all|every|each)\s+[^.\n]{0,60}?"
            r"\bto\s+[\w.+-]+@[\w-]+\.[\w.]+"
        ),
        "an instruction about other tools' behaviour, or to copy data to a fixed address",
    ),
    "history": (
        re.compile(r"history|log|transcript|system prompt"),
        re.compile(
            r"\b(?:include|pass|send|add|append|attach|put)\s+(?:\w+\s+){0,3}?"
            r"(?:conversation|chat)\s+(?:history|log|transcript)|\b(?:system\s+prompt)\s+(?:as|in|into)\s+the\b"
        ),
        "a request to pass the conversation or the system prompt into an argument",
    ),
}
REACH = 160  # characters around a prefilter's hit that a pattern's match can span
# Strings a pattern cannot match without, checked first with `in` (memchr speed): the credential files'
# alternation, as a prefilter, read a megabyte of tool output in 117 ms without a hit.
ANCHORS = {
    "secret_file": tuple(
        ".ssh id_rsa id_dsa id_ecdsa id_ed25519 mcp.json claude_desktop_config .aws/credentials /etc/passwd /etc/shadow"
        " .netrc .git-credentials .kube/config .npmrc .pypirc .docker/config.json .gnupg/".split()
    ),
}


def normalized(text: str) -> str:
    """The form patterns match: compatibility forms folded (fullwidth letters), case folded, spaces collapsed."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def _windows(prefilter: re.Pattern[str], text: str) -> Iterator[tuple[int, int]]:
    """The spans of `text` within REACH of the prefilter's hits, overlapping ones merged."""
    start = end = -1
    for hit in prefilter.finditer(text):
        low, high = max(0, hit.start() - REACH), hit.end() + REACH
        if low > end:
            if end >= 0:
                yield start, end
            start = low
        end = high
    if end >= 0:
        yield start, end


def instruction(text: str) -> tuple[str, str] | None:
    """(pattern name, matched text) of the first poisoning signature in `text`, or None."""
    if len(text) < 6:
        return None
    folded = normalized(text)
    for name, (prefilter, pattern, _) in PATTERNS.items():
        anchors = ANCHORS.get(name)
        if anchors is not None and not any(anchor in folded for anchor in anchors):
            continue
        if prefilter.search(folded) is None:  # most texts: one search in C a pattern
            continue
        for start, end in _windows(prefilter, folded):
            found = pattern.search(folded, start, end)
            if found is not None:
                return name, found.group(0)[:200]
    return None


def find_instruction(fields: Mapping[str, Any]) -> Finding | None:
    """The first string of a tool that carries instructions to the model (`fields` as for find_hidden)."""
    for field, at, text, _ in tool_texts(fields):
        found = instruction(text)
        if found is not None:
            name, matched = found
            where = f"{field} at {at}" if at else field
            return Finding(field, at, f"{where} holds {PATTERNS[name][2]}: {matched!r}", matched)
    return None


def definition_hash(description: str, input_schema: Any, annotations: Any) -> str:
    """SHA-256 of what an upstream says a tool does (not its tags, server or the index's document format): a
    change of it after the first listing is what holds the tool for review."""
    canonical = json.dumps(
        {"description": description, "input_schema": input_schema, "annotations": annotations},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode(errors="surrogatepass")).hexdigest()
