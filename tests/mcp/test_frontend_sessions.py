"""Streamable-HTTP sessions are bounded per client address and in all, so that one client cannot lock others out:
real uvicorn, clients on distinct loopback addresses, the SDK's own session table."""

from __future__ import annotations

import gc
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ToolsListChanged

from indexer.embedding import HashingEmbedder
from service.main import create_app
from service.mcp.http_sessions import HttpSession, SessionTable
from service.mcp.serve import http_app
from service.mcp.server import Frontend, create_frontend
from service.security.limits import BODY_GRACE_SECONDS
from service.settings import Settings
from tests.mcp.conftest import HEADERS, INITIALIZE, catalog_tools, register, serving, session_headers
from tests.processes import free_port

META = ["status", "search_tools", "call_tool", "fetch_result", "run_script"]


@pytest.fixture
async def front(settings: Settings) -> AsyncIterator[tuple[str, Frontend]]:
    """A dynamic-mode HTTP front end (5 sessions per client, 8 in all) over the REST service, both on real ports."""
    rest = create_app(settings, embedder=HashingEmbedder())
    async with serving(rest, free_port()) as api_url:
        await register(rest, catalog_tools())
        front_settings = settings.model_copy(deep=True)
        front_settings.frontend.api_url = api_url
        front_settings.frontend.http_max_sessions_per_client = 5
        front_settings.frontend.http_max_sessions = 8
        frontend = create_frontend(front_settings, mode="dynamic", transport="http")
        async with serving(http_app(frontend), free_port()) as url:
            yield f"{url}/mcp", frontend


def client_at(address: str) -> httpx.AsyncClient:
    """An HTTP client whose requests come from `address` (a loopback address of its own)."""
    return httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(local_address=address), headers=HEADERS, timeout=30)


async def open_session(http: httpx.AsyncClient, url: str) -> str:
    """Initialize a session, finish the handshake and list its tools (so the front end keeps state for it)."""
    opened = await http.post(url, json=INITIALIZE)
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    initialized = await http.post(
        url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session_headers(session)
    )
    assert initialized.status_code == 202, initialized.text
    assert (await list_tools(http, url, session)).status_code == 200
    return session


async def list_tools(http: httpx.AsyncClient, url: str, session: str) -> httpx.Response:
    with anyio.fail_after(10):
        return await http.post(
            url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=session_headers(session)
        )


def open_ids(frontend: Frontend) -> set[str]:
    """The sessions the SDK holds."""
    return set(frontend.server.session_manager._server_instances)


async def test_a_client_holds_at_most_its_bound_and_its_least_recently_used_idle_session_makes_room(
    front: tuple[str, Frontend],
) -> None:
    url, frontend = front
    async with client_at("127.0.0.2") as http:
        sessions = [await open_session(http, url) for _ in range(5)]
        assert (await list_tools(http, url, sessions[0])).status_code == 200  # now the most recently used
        first = weakref.ref(frontend.server.session_manager._server_instances[sessions[1]])
        sessions += [await open_session(http, url) for _ in range(3)]

        kept = [sessions[0], *sessions[4:]]
        assert open_ids(frontend) == set(kept)
        for closed in sessions[1:4]:
            gone = await list_tools(http, url, closed)
            assert gone.status_code == 404 and "Session not found" in gone.text
        for session in kept:
            assert (await list_tools(http, url, session)).status_code == 200
        # The closed sessions' memory is released: the SDK's transport, the dynamic-mode state, the notifier's entry.
        assert {key for key in frontend.sessions._sessions} == {f"http:{s}" for s in kept}
        assert frontend.notifier.connections == 5
        with anyio.fail_after(5):
            while first() is not None:
                gc.collect()
                await anyio.sleep(0.05)


async def test_a_client_whose_sessions_are_all_in_use_is_refused_a_new_one(front: tuple[str, Frontend]) -> None:
    url, frontend = front
    async with client_at("127.0.0.2") as http, AsyncExitStack() as streams:
        sessions = [await open_session(http, url) for _ in range(5)]
        for session in sessions:  # a GET stream keeps a request of each session in flight
            stream = await streams.enter_async_context(
                http.stream("GET", url, headers={**session_headers(session), "Accept": "text/event-stream"})
            )
            assert stream.status_code == 200
        refused = await http.post(url, json=INITIALIZE)
        assert refused.status_code == 429
        assert refused.headers["content-type"] == "application/problem+json"
        assert "http_max_sessions_per_client" in refused.json()["detail"]
        assert open_ids(frontend) == set(sessions)
        await streams.aclose()
        # Idle again (each as soon as the server sees its stream end): one of them makes room.
        opened = await http.post(url, json=INITIALIZE)
        assert opened.status_code == 200
        assert len(open_ids(frontend) & set(sessions)) == 4 and opened.headers["mcp-session-id"] in open_ids(frontend)


async def test_another_client_gets_in_after_others_filled_the_front_end(front: tuple[str, Frontend]) -> None:
    url, frontend = front
    async with client_at("127.0.0.2") as flood, client_at("127.0.0.3") as other:
        for _ in range(20):
            await open_session(flood, url)
        for _ in range(20):
            await open_session(other, url)
        assert len(open_ids(frontend)) == 8
        # A real client from a third address connects, lists and calls while the first one keeps opening sessions.
        http = httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(local_address="127.0.0.4"), timeout=30)
        async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            assert [t.name for t in (await client.list_tools()).tools] == META
            for _ in range(10):
                await open_session(flood, url)
            assert [t.name for t in (await client.list_tools()).tools] == META
            assert len(open_ids(frontend)) == 8


def test_at_the_global_bound_the_client_holding_the_most_gives_up_its_least_recently_used_idle_session() -> None:
    table = SessionTable(per_client=3, total=5)
    for client, session in [("a", "a1"), ("b", "b1"), ("b", "b2"), ("b", "b3"), ("c", "c1")]:
        assert table.admit(client) == []
        table.opened(client, HttpSession(session, client, {}))
        table.done(table.by_id[session])
    table.used(table.by_id["b1"])  # b1 in flight: b2 is b's least recently used idle session
    assert [victim.id for victim in table.admit("d")] == ["b2"]
    assert [victim.id for victim in table.admit("b")] == ["b3"]  # b still holds the most
    assert sorted(table.by_id) == ["a1", "b1", "c1"] and table.opening == {"d": 1, "b": 1}
    table.opened("d", None)  # refused by the SDK: the reservation is released
    assert table.opening == {"b": 1}


def modern_client_at(address: str) -> httpx2.AsyncClient:
    """An HTTP client for the SDK's Client whose requests come from `address`, with no bound on its connections."""
    limits = httpx2.Limits(max_connections=None, max_keepalive_connections=None)
    return httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(local_address=address, limits=limits), timeout=30)


async def settled(condition: Callable[[], bool]) -> None:
    """Wait until the condition holds (at most 20 s)."""
    with anyio.fail_after(20):
        while not condition():  # noqa: ASYNC110 - the SDK's listen handler offers no event to wait on
            await anyio.sleep(0.05)


async def test_listen_streams_are_bounded_per_client_and_in_all(front: tuple[str, Frontend]) -> None:
    # Measured before the bound: one address opened the SDK's 1,024 listen streams and every other client's listen
    # was refused ("Subscription limit reached") while they stayed open.
    url, frontend = front
    served = frontend.notifier._listen._streams  # the SDK handler's open streams
    ended = {"127.0.0.2": 0, "127.0.0.3": 0}

    async def hold(client: Client, address: str) -> None:
        async with client.listen(tools_list_changed=True) as subscription:
            async for _ in subscription:  # a graceful closure ends the loop
                pass
        ended[address] += 1

    flood_http, second_http, third_http = map(modern_client_at, ("127.0.0.2", "127.0.0.3", "127.0.0.4"))
    async with (
        flood_http,
        second_http,
        third_http,
        Client(streamable_http_client(url, http_client=flood_http), mode="auto") as flood,
        Client(streamable_http_client(url, http_client=second_http), mode="auto") as second,
        Client(streamable_http_client(url, http_client=third_http), mode="auto") as third,
        anyio.create_task_group() as streams,
    ):
        for _ in range(20):
            streams.start_soon(hold, flood, "127.0.0.2")
        await settled(lambda: ended["127.0.0.2"] >= 15 and len(served) >= 5)
        assert len(served) == 5 and ended["127.0.0.2"] == 15  # the client's bound: its oldest ones ended
        for _ in range(5):
            streams.start_soon(hold, second, "127.0.0.3")
        await settled(lambda: ended["127.0.0.2"] >= 17 and len(served) >= 8)  # 8 in all: the flood gives 2 up
        assert len(served) == 8 and ended == {"127.0.0.2": 17, "127.0.0.3": 0}
        # A third client listens, and hears of its own activation while the others keep their streams.
        async with third.listen(tools_list_changed=True) as subscription:
            await settled(lambda: ended["127.0.0.3"] >= 1)  # the second client held 5 of the 8, the flood 3
            assert len(served) == 8 and ended == {"127.0.0.2": 17, "127.0.0.3": 1}
            await third.call_tool("search_tools", {"query": "echo", "k": 1})
            with anyio.fail_after(10):
                assert await subscription.__anext__() == ToolsListChanged()
        streams.cancel_scope.cancel()


async def test_a_body_that_does_not_come_in_time_is_a_408(front: tuple[str, Frontend]) -> None:
    """A body trickled a byte a second held its request and connection for as long as the client liked (the REST
    service bounded it, the front end did not): the same deadline now, BODY_GRACE_SECONDS plus a second for each
    BODY_MIN_BYTES_PER_SECOND, then a 408 problem and the connection closes. Raw socket: an HTTP client reads no
    answer before it has sent the whole body."""
    url, _ = front
    address = httpx.URL(url)
    head = (f"POST {address.path} HTTP/1.1\r\nHost: {address.host}:{address.port}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in HEADERS.items()) + "Content-Length: 1000\r\n\r\n")
    answer = b""
    async with await anyio.connect_tcp(address.host, address.port) as stream:
        await stream.send(head.encode() + b'{"jsonrpc": "2.0", "id": 1, ')
        started = anyio.current_time()
        with anyio.fail_after(BODY_GRACE_SECONDS + 20):  # before: no answer until the body came whole
            while not answer.endswith(b"}"):
                if not answer:
                    await stream.send(b" ")
                with anyio.move_on_after(1):
                    answer += await stream.receive()
        waited = anyio.current_time() - started
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b"application/problem+json" in answer and b"connection: close" in answer.lower()
    assert b"Request body too slow" in answer
    assert BODY_GRACE_SECONDS - 1 <= waited <= BODY_GRACE_SECONDS + 3, waited
    async with client_at("127.0.0.7") as http:
        assert await open_session(http, url)  # the front end still answers
