"""Client transports to upstream MCP servers: a stdio child process we can observe, and streamable HTTP (over the
SDK's HTTP client for trusted servers, and for servers added over the API one that connects only to checked
addresses: upstream/checked_http.py).

The SDK's `stdio_client` hides the child: we need its pid (health, and the crash tests), the tail of its
stderr (the reason a server failed to start is almost always there) and the moment it exits (a crash is
noticed at once, not at the next call). The framing and shutdown sequence follow the SDK and the MCP
lifecycle: close stdin, wait, terminate the process group, kill it."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import AnyStr, Generic

import anyio
import anyio.abc
import anyio.to_thread
import httpx2
import mcp_types as types
from anyio.streams.text import TextReceiveStream
from mcp.client._transport import TransportStreams
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from service.security.json_body import collector_paused
from service.security.scrub import REDACTED, Scrubber
from service.upstream.children import ChildRegistry, wrap_command
from service.upstream.health import exit_reason, said
from service.upstream.result_bounds import (
    MAX_RESULT_BLOCKS,
    TOO_MANY_BLOCKS,
    blocks_bounded,
    bounded_reads,
    refused_unparsed,
)
from service.upstream.stray_lines import StrayLines, may_be_message

logger = logging.getLogger(__name__)

STDIN_CLOSE_GRACE = 2.0
TERMINATE_GRACE = 2.0
EXIT_POLL_SECONDS = 0.1
STDERR_TAIL_LINES = 40
STDERR_LINE_CHARS = 500  # of each stderr line, kept for /servers and the log
DEFAULT_MAX_MESSAGE_BYTES = 16_000_000  # execution.max_message_bytes
PARSER_MAX_DEPTH = 200  # arrays and objects the SDK's JSON parser (pydantic-core's jiter) reads into, at most


@dataclass
class ChildProcess:
    """What we know about a running stdio server."""

    pid: int | None = None
    returncode: int | None = None
    stderr: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_TAIL_LINES))

    def stderr_tail(self, lines: int = 5) -> str:
        return " | ".join(list(self.stderr)[-lines:])


class MessageTooLarge(ValueError):
    """A line longer than the splitter's limit: read no further."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the server sent a message of more than {limit} bytes (execution.max_message_bytes)")


class LineSplitter(Generic[AnyStr]):
    """The lines of a stream read in chunks (str or bytes), in linear time: the part of a line not yet ended is
    kept as its chunks, joined once it ends (joining it to each chunk copied the whole line again: a 50 MB line held
    the event loop for 18 s in all), and only its first `keep` items when `keep` is set (a stderr progress bar that
    never writes a newline grew without bound). A line longer than `limit` raises MessageTooLarge as soon as it
    passes it, not when (or if) it ends."""

    def __init__(self, keep: int | None = None, limit: int | None = None) -> None:
        self._keep = keep
        self._limit = limit
        self._pieces: list[AnyStr] = []
        self._size = 0

    def feed(self, chunk: AnyStr) -> list[AnyStr]:
        """The lines this chunk ends, without their newline."""
        *ended, rest = chunk.split(b"\n" if isinstance(chunk, bytes) else "\n")
        lines = []
        for part in ended:
            self._add(part)
            lines.append(self._joined(part))
            self._pieces, self._size = [], 0
        self._add(rest)
        return lines

    def rest(self) -> str:
        """What was read of the line not yet ended (of a text stream)."""
        return "".join(self._pieces)

    def _joined(self, like: AnyStr) -> AnyStr:
        return like[:0].join(self._pieces)

    def _add(self, piece: AnyStr) -> None:
        if self._limit is not None and self._size + len(piece) > self._limit:
            self._pieces, self._size = [], 0
            raise MessageTooLarge(self._limit)
        if self._keep is not None:
            piece = piece[: max(0, self._keep - self._size)]
        if piece:
            self._pieces.append(piece)
            self._size += len(piece)


def unreadable(text: str) -> str:
    """Why a message from a server could not be read, from its parser's error (ours, or the SDK's HTTP client's,
    which also says why it read no further than it did)."""
    if "recursion limit exceeded" in text:
        return (
            f"it nests arrays and objects more than {PARSER_MAX_DEPTH} levels deep "
            "(the limit of the MCP client's JSON parser)"
        )
    if (invalid := re.search(r"Invalid JSON: (.*?) \[type=", text)) is not None:
        return f"it is not JSON the MCP client's parser reads: {said(invalid[1])}"
    if text.startswith(TOO_MANY_BLOCKS):
        return text
    if "validation error" in text:
        return "it is not a JSON-RPC response (its result must be an object; its error, a code and a message)"
    return said(" ".join(text.split()))


def _response_id(line: str) -> types.RequestId | None:
    """The id of a line that is a JSON-RPC response or error by its keys (Python's parser reads nesting the SDK's
    refuses, up to the interpreter's recursion limit), else None."""
    if not line.lstrip().startswith("{"):  # a log line, or a 16 MB array: no response, and not parsed again
        return None
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or "method" in message or not ("result" in message or "error" in message):
        return None
    ident = message.get("id")
    return ident if isinstance(ident, int | str) and not isinstance(ident, bool) else None


async def _refused_response(line: str, exc: ValueError, on_lost: Callable[[str], None]) -> SessionMessage | Exception:
    """What the session gets for a stdout line the SDK's parser refuses. A response (nested past the parser's
    depth, or not of JSON-RPC's shape) becomes an error answer to its request, which fails now and not at its
    timeout; a line too deep to find its request in breaks the session (its calls fail now, and it restarts);
    anything else (a log line on stdout) stays an exception, which the session only logs."""
    ident = await anyio.to_thread.run_sync(_response_id, line)
    if ident is not None:
        error = types.ErrorData(code=types.PARSE_ERROR, message=f"Failed to parse a message on stdout: {exc}")
        return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=ident, error=error))
    if "recursion limit exceeded" in str(exc):
        on_lost(f"the server sent a message that cannot be read: {unreadable(str(exc))}")
    return exc


@asynccontextmanager
async def stdio_transport(
    command: str,
    args: list[str],
    env: dict[str, str],
    cwd: str | None,
    child: ChildProcess,
    on_lost: Callable[[str], None],
    log_name: str,
    children: ChildRegistry | None = None,
    max_message_bytes: int | None = None,
    hidden: Sequence[str] = (),
) -> AsyncIterator[TransportStreams]:
    """Spawn the server in its own process group, dying with us (service/upstream/children.py), and exchange
    newline-delimited JSON-RPC on its pipes. `on_lost(reason)` is told when the session is broken: the child
    exited, or sent a message over `max_message_bytes` (then its stdout is read no further and closed, which fails
    the requests waiting on it). `hidden`: Toolscout's secrets in the child's environment (its egress proxy
    password), replaced by `***` in everything it sends, results and errors alike: the demo everything server's
    get-env, open to the default role, handed a caller the proxy's credentials."""
    full_env = get_default_environment() | env
    argv = wrap_command(command, args, full_env.get("PATH"), cwd)
    process = await anyio.open_process(argv, env=full_env, cwd=cwd, start_new_session=True)
    child.pid, child.returncode = process.pid, None
    if children is not None:
        children.add(process.pid)
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    server_log = logging.getLogger(f"{__name__}.{log_name}")
    scrub = Scrubber(env.values())  # a child that prints its token must not put it in our logs or /servers
    strays = StrayLines()

    async def read_stdout() -> None:
        assert process.stdout is not None
        splitter = LineSplitter[bytes](limit=max_message_bytes)
        try:
            async with read_writer:
                async for chunk in process.stdout:
                    for raw in splitter.feed(chunk):
                        line = raw.decode(errors="replace")
                        if not line.strip():
                            continue
                        for secret in hidden:  # verbatim in JSON: the proxy's password is URL-safe ASCII
                            line = line.replace(secret, REDACTED)
                        if not may_be_message(line):
                            await stray(line, None)
                            continue
                        if (refusal := refused_unparsed(line)) is not None:
                            await read_writer.send(refusal)
                            continue
                        try:
                            # A result of 300,000 small objects (3.3 MB) read in 0.6-1.0 s, 0.2 s with it paused.
                            with collector_paused():
                                message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                            item: SessionMessage | Exception = blocks_bounded(SessionMessage(message))
                        except ValueError as exc:
                            item = await _refused_response(line, exc, on_lost)
                            if isinstance(item, Exception):  # answers no request: stray
                                await stray(line, item)
                                continue
                            server_log.warning("a response on stdout that is not JSON-RPC: %.200s", scrub(line))
                        await read_writer.send(item)
        except MessageTooLarge as exc:
            server_log.warning("%s", exc)
            on_lost(str(exc))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        finally:
            if strays.left_out:
                server_log.warning("%s more lines on stdout that are not JSON-RPC were not logged", strays.left_out)

    async def stray(line: str, error: Exception | None) -> None:
        """A stdout line that is no message: logged, and handed to the session (which logs it too), within the
        server's budget of stray lines."""
        logged, left_out = strays.admit()
        if left_out:
            server_log.warning("%s more lines on stdout that are not JSON-RPC were not logged", left_out)
        if logged:
            server_log.warning("not a JSON-RPC message on stdout: %.200s", scrub(line))
            await read_writer.send(error or ValueError(f"not a JSON-RPC message: {scrub(line[:200])}"))

    stderr_done = anyio.Event()

    async def read_stderr() -> None:
        assert process.stderr is not None
        # Kept past STDERR_LINE_CHARS by the longest secret, so that one cut there is still scrubbed whole.
        splitter = LineSplitter(STDERR_LINE_CHARS + max(map(len, env.values()), default=0))
        try:
            async for chunk in TextReceiveStream(process.stderr, errors="replace"):
                for line in splitter.feed(chunk):
                    if line.strip():
                        clean = scrub(line.rstrip())
                        child.stderr.append(clean[:STDERR_LINE_CHARS])
                        server_log.debug("%s", clean)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        finally:
            if (rest := splitter.rest()).strip():
                child.stderr.append(scrub(rest.rstrip())[:STDERR_LINE_CHARS])
            stderr_done.set()

    async def write_stdin() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await process.stdin.send(data.encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()

    async def watch_exit() -> None:
        # Polling returncode, not wait(): a grandchild holding the pipes would make wait() hang.
        while process.returncode is None:  # noqa: ASYNC110 - a return code has no event to wait on
            await anyio.sleep(EXIT_POLL_SECONDS)
        child.returncode = process.returncode
        on_lost(exit_reason(process.returncode))

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_stdout)
        tg.start_soon(read_stderr)
        tg.start_soon(write_stdin)
        tg.start_soon(watch_exit)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await write_stream.aclose()
                await _stop(process)
                if children is not None:
                    children.discard(process.pid)
                child.returncode = process.returncode
                # The last words of a dying server explain why: read its stderr to the end (bounded).
                with anyio.move_on_after(0.5):
                    await stderr_done.wait()
                await _close_pipes(process)
                await read_stream.aclose()
            tg.cancel_scope.cancel()


async def _wait_exit(process: anyio.abc.Process, wait_seconds: float) -> bool:
    with anyio.move_on_after(wait_seconds):
        while process.returncode is None:  # noqa: ASYNC110 - a return code has no event to wait on
            await anyio.sleep(0.02)
    return process.returncode is not None


async def _stop(process: anyio.abc.Process) -> None:
    """Close stdin, give the server a moment, then SIGTERM and SIGKILL its whole process group."""
    if process.stdin is not None:
        with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    if not await _wait_exit(process, STDIN_CLOSE_GRACE):
        _signal_group(process.pid, signal.SIGTERM)
        if not await _wait_exit(process, TERMINATE_GRACE):
            _signal_group(process.pid, signal.SIGKILL)
            await _wait_exit(process, TERMINATE_GRACE)
    else:
        # The server exited; its children (npx -> node) may not have.
        _signal_group(process.pid, signal.SIGTERM)


async def _close_pipes(process: anyio.abc.Process) -> None:
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await stream.aclose()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class BodyRefused(httpx2.StreamError):
    """An HTTP upstream's body not read: longer than the limit, or compressed (its size could not be bounded)."""


class _CappedBody(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int | None, encoding: str) -> None:
        self._inner, self._limit, self._encoding = inner, limit, encoding

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._encoding not in ("", "identity"):
            # Asked for identity; a compressed body would be inflated whole, chunk by chunk (a gzip bomb: x1000).
            raise BodyRefused(f"the server sent a body compressed with {self._encoding[:40]!r}, asked for identity")
        size, braces, held = 0, 0, list[bytes]()
        async for chunk in self._inner:
            size += len(chunk)
            if self._limit is not None and size > self._limit:
                raise BodyRefused(f"the server sent a message of more than {self._limit} bytes")
            if self._limit is None:  # an SSE stream: each event is bounded by result_bounds.bounded_reads
                yield chunk
                continue
            held.append(chunk)  # as the SDK does: a JSON body is one message, read whole
            braces += chunk.count(b"{")
        if held and braces > MAX_RESULT_BLOCKS and (refusal := refused_unparsed(b"".join(held))) is not None:
            raise BodyRefused(unreadable(refusal.message.error.message))  # type: ignore[union-attr]
        for chunk in held:
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def cap_bodies(http: httpx2.AsyncClient, limit: int) -> httpx2.AsyncClient:
    """The client asks for uncompressed bodies, refuses compressed ones and reads a JSON body (one message) only up
    to `limit` bytes; the SDK bounds each event of an SSE stream (`max_sse_event_size`), whose length is unbounded."""
    http.headers["Accept-Encoding"] = "identity"

    async def cap(response: httpx2.Response) -> None:
        encoding = response.headers.get("content-encoding", "").strip().lower()
        json_body = response.headers.get("content-type", "").lower().startswith("application/json")
        if isinstance(response.stream, httpx2.AsyncByteStream):
            response.stream = _CappedBody(response.stream, limit if json_body else None, encoding)

    http.event_hooks["response"].append(cap)
    return http


@asynccontextmanager
async def http_transport(
    url: str, http: httpx2.AsyncClient, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
) -> AsyncIterator[TransportStreams]:
    """Streamable HTTP over this client (closed with the transport), no message over `max_message_bytes`."""
    async with cap_bodies(http, max_message_bytes):
        async with streamable_http_client(url, http_client=http, max_sse_event_size=max_message_bytes) as streams:
            async with bounded_reads(streams) as bounded:
                yield bounded


__all__ = ["ChildProcess", "LineSplitter", "MessageTooLarge", "stdio_transport", "http_transport"]
