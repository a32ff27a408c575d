"""The text of each indexed field of a tool, and its content hash. Pure functions."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from indexer.query_text import plain_characters

if TYPE_CHECKING:
    from indexer.tools import ToolDefinition

_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[_\-.\s/:]+")
_NAME_SEPARATORS = re.compile(r"[\s_\-.]+")
MAX_PARAM_DEPTH = 4
MAX_FIELD_CHARS = 4000
# Raised whenever build_document changes what is indexed: it is part of every content hash, so an index built
# from older documents is re-embedded by the next reconcile or registration instead of being kept.
DOCUMENT_FORMAT = 4  # 3: a camel-case word's joined form is a BM25 term too (`GitHub`: git, hub, github); 4: BM25
# reads a word with its combining marks, a tool's texts are in NFKC, Thai, Lao, Myanmar and Khmer as bi- and trigrams
# "(e.g., 'America/New_York', 'Europe/London')": quoted example values say what a valid argument looks like, not
# what the tool does, and a request that names one ("the time in Tokyo") would otherwise pull whichever sibling
# happens to list it. Unquoted examples ("e.g., DNA, fingerprints") describe the tool's domain and stay.
# Linear in the text (an upstream's schema holds 128 KB of descriptions): no match starts inside a run of
# whitespace, and no quantifier gives back what the next token cannot take (quadratic before: 4.8 s for one
# 60,000-character description, the GIL held).
_QUOTED_EXAMPLES = re.compile(
    r"(?!(?<=\s)\s)\s*+\((?:e\.g\.|for example|such as|ex\.|example:?)[^()'\"`]*+['\"`][^()]*+\)", re.IGNORECASE
)


def split_identifier(identifier: str) -> str:
    """`get_currentTime.v2-beta` -> `get current time v2 beta`."""
    words: list[str] = []
    for part in _SEPARATORS.split(identifier):
        if not part:
            continue
        lowered = part.lower()
        if lowered == part:  # no capital, so no camel-case boundary: a request's words, mostly (no regex a word)
            words.append(part)
        else:
            words.extend(w.lower() for w in _CAMEL_BOUNDARY.split(part) if w)
    return " ".join(words)


def joined_words(identifier: str) -> list[str]:
    """The lower-cased whole of each camel-case word `split_identifier` splits (`GitHub` -> `github`): a request
    that writes it in one case (`github`, `GITHUB`) has no boundary to split at, and meets the joined form."""
    return [
        part.lower()
        for part in _SEPARATORS.split(identifier)
        if part != part.lower() and len([w for w in _CAMEL_BOUNDARY.split(part) if w]) > 1
    ]


def normalize_name_key(text: str) -> str:
    """The key that exact-name matching compares: lower case, `_`, `-`, `.` and spaces removed, its characters as
    the search reads a request's (NFKC, no pictographs: indexer/query_text.py). Before, a tool named `ＡＢＣ` or
    `cafe\u0301` was not first for a request spelling its name, which the search reads as `ABC` and `café`."""
    return _NAME_SEPARATORS.sub("", text if text.isascii() else plain_characters(text)).lower()


def _param_lines(schema: Any, prefix: str = "", depth: int = 0) -> list[str]:
    if not isinstance(schema, dict) or depth > MAX_PARAM_DEPTH:
        return []
    lines: list[str] = []
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for key, spec in properties.items():
            label = split_identifier(f"{prefix} {key}" if prefix else str(key))
            parts = [label]
            if isinstance(spec, dict):
                if isinstance(spec.get("description"), str):
                    parts.append(_QUOTED_EXAMPLES.sub("", spec["description"]))
                if isinstance(spec.get("enum"), list):
                    parts.append("one of " + ", ".join(str(v) for v in spec["enum"][:20]))
                lines.append(": ".join(p for p in parts if p))
                lines.extend(_param_lines(spec, str(key), depth + 1))
                items = spec.get("items")
                if isinstance(items, dict):
                    lines.extend(_param_lines(items, str(key), depth + 1))
            else:
                lines.append(label)
    for combinator in ("anyOf", "oneOf", "allOf"):
        for option in schema.get(combinator) or []:
            lines.extend(_param_lines(option, prefix, depth + 1))
    return lines


def _nfkc(text: str) -> str:
    """A tool's text in NFKC, as the search reads a request (indexer/query_text.py): a description in full-width
    letters, half-width katakana or decomposed accents meets the request that writes them plainly, in BM25 and in
    the embedding (the model's tokenizer read a full-width `checksum` as no word: not in the top 10 for "compute
    checksum")."""
    return text if text.isascii() else unicodedata.normalize("NFKC", text)


@dataclass(frozen=True)
class ToolDocument:
    """The field texts embedded and encoded for one tool."""

    qualified_name: str
    name: str
    description: str
    params: str
    server: str
    lexical: str
    content_hash: str


def build_document(tool: ToolDefinition) -> ToolDocument:
    """The one place that decides the text indexed for a tool."""
    name = _nfkc(tool.name)
    name_words = split_identifier(name)
    server_words = split_identifier(tool.server)
    description = " ".join(_nfkc(tool.description).split())[:MAX_FIELD_CHARS]
    params = _nfkc("; ".join(_param_lines(tool.input_schema)))[:MAX_FIELD_CHARS]
    # The name as written, not its words: BM25 splits it the same way and keeps a camel-case word's joined form.
    lexical = " ".join(p for p in (name, description, params, " ".join(tool.tags)) if p)
    return ToolDocument(
        qualified_name=tool.qualified_name,
        name=name_words,
        description=description or name_words,
        params=params or name_words,
        server=server_words,
        lexical=lexical,
        content_hash=content_hash(tool),
    )


def content_hash(tool: ToolDefinition) -> str:
    """SHA-256 of everything that affects the index entry of a tool (computed once per tool object)."""
    return tool.content_hash
