"""The egress proxy's connection slots: any local process may open connections before it shows credentials, so
those hold a budget of their own (the oldest silent one makes room for a new one), and a server with credentials
always gets a slot; one server holds at most max_per_server of them.

Real sockets: the proxy on 127.0.0.1 and a recording HTTP service on loopback."""

from __future__ import annotations

import asyncio

from service.upstream.egress import MAX_CONNECTIONS, MAX_UNAUTHENTICATED, EgressProxy
from tests.security.egress_support import Recorder, basic, get


async def test_silent_connections_cannot_keep_a_server_out(internal: Recorder) -> None:
    """More silent connections than every slot of the proxy: a server's request still goes through."""
    proxy = EgressProxy(["127.0.0.1"])
    port = await proxy.start()
    env = await proxy.environment("fetch")
    silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(MAX_CONNECTIONS + 50)]
    try:
        await asyncio.sleep(0.2)  # the proxy has taken them all
        answer = await get(env["HTTP_PROXY"], f"http://127.0.0.1:{internal.port}/page")
        closed = sum(reader.at_eof() for reader, _ in silent)  # the proxy closed them
    finally:
        for _, writer in silent:
            writer.close()
        await proxy.aclose()
    assert (answer.status_code, answer.text) == (200, "internal secret of 127.0.0.1")
    # Only the newest MAX_UNAUTHENTICATED (less the one the request took) are still open.
    assert closed == MAX_CONNECTIONS + 50 - MAX_UNAUTHENTICATED + 1


async def test_a_new_connection_closes_the_oldest_silent_one() -> None:
    proxy = EgressProxy(max_unauthenticated=3)
    port = await proxy.start()
    silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(4)]
    try:
        oldest = await asyncio.wait_for(silent[0][0].read(), 5)  # b"": the proxy closed it
        await asyncio.sleep(0.1)
        others = [reader.at_eof() for reader, _ in silent[1:]]
    finally:
        for _, writer in silent:
            writer.close()
        await proxy.aclose()
    assert oldest == b""
    assert others == [False, False, False]


async def open_tunnel(port: int, target: str, authorization: str) -> tuple[bytes, asyncio.StreamWriter]:
    """A CONNECT kept open: the proxy's first answer line, and the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"CONNECT {target} HTTP/1.1\r\nProxy-Authorization: {authorization}\r\n\r\n".encode())
    await writer.drain()
    answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    if not answer.startswith(b"HTTP/1.1 200 "):
        answer += await asyncio.wait_for(reader.read(), 5)
    return answer, writer


async def test_one_server_holds_at_most_its_share(internal: Recorder) -> None:
    proxy = EgressProxy(["127.0.0.1"], max_connections=4, max_per_server=2)
    target = f"127.0.0.1:{internal.port}"
    held: list[asyncio.StreamWriter] = []
    try:
        port = await proxy.start()
        answers: dict[str, list[bytes]] = {}
        for server in ("greedy", "other", "third"):
            auth = basic((await proxy.environment(server))["HTTPS_PROXY"])
            for _ in range(3):
                answer, writer = await open_tunnel(port, target, auth)
                answers.setdefault(server, []).append(answer)
                held.append(writer)
    finally:
        for writer in held:
            writer.close()
        await proxy.aclose()
    established = b"HTTP/1.1 200 Connection established\r\n\r\n"
    assert answers["greedy"][:2] == answers["other"][:2] == [established, established]
    assert answers["greedy"][2].startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    assert answers["greedy"][2].endswith(b"too many connections of MCP server greedy to the egress proxy\n")
    assert answers["other"][2].endswith(b"too many connections of MCP server other to the egress proxy\n")
    # Four held in all: the third server finds every slot taken.
    assert [a.endswith(b"too many connections to the egress proxy\n") for a in answers["third"]] == [True] * 3


async def test_a_slot_comes_back_when_its_connection_ends(internal: Recorder) -> None:
    proxy = EgressProxy(["127.0.0.1"], max_per_server=1)
    try:
        env = await proxy.environment("fetch")
        answers = [await get(env["HTTP_PROXY"], f"http://127.0.0.1:{internal.port}/{n}") for n in range(3)]
    finally:
        await proxy.aclose()
    assert [a.status_code for a in answers] == [200, 200, 200]
