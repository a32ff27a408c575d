"""How many streamable-HTTP sessions one client of `toolscout mcp --transport http` can hold, what they cost, and
whether another client still gets in afterwards.

Usage: python bench/mcp_sessions.py [SESSIONS] [--addresses=N] [--tracemalloc]
Clients at N addresses (default 1: 127.0.0.2; then 127.0.1.1 ...) open SESSIONS sessions in all (default 10,000)
with bare initialize requests, 8 at a time, and forget them; then a client at 127.0.0.3 opens one and lists its
tools. Prints the sessions the server holds, memory (RSS, and Python allocations with --tracemalloc) and time."""

from __future__ import annotations

import asyncio
import socket
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import httpx
import uvicorn

from service.mcp.serve import http_app
from service.mcp.server import create_frontend
from service.settings import Settings

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def client_from(address: str, base: str) -> httpx.AsyncClient:
    transport = httpx.AsyncHTTPTransport(local_address=address)
    return httpx.AsyncClient(base_url=base, transport=transport, headers=HEADERS, timeout=60)


async def open_sessions(http: httpx.AsyncClient, count: int) -> dict[int, int]:
    """Open `count` sessions, 8 requests at a time; how many answers of each status."""
    statuses: dict[int, int] = {}
    queue = iter(range(count))

    async def worker() -> None:
        for _ in queue:
            status = (await http.post("/mcp", json=INITIALIZE)).status_code
            statuses[status] = statuses.get(status, 0) + 1

    await asyncio.gather(*(worker() for _ in range(8)))
    return statuses


def flood_addresses(count: int) -> list[str]:
    return ["127.0.0.2"] if count == 1 else [f"127.0.{1 + i // 250}.{1 + i % 250}" for i in range(count)]


async def main(count: int, addresses: list[str]) -> None:
    with tempfile.TemporaryDirectory() as data_dir:
        settings = Settings(data_dir=Path(data_dir), demo_catalog=False)
        settings.frontend.api_url = f"http://127.0.0.1:{free_port()}"  # nothing there: sessions need no API
        settings.frontend.events_retry_seconds = 60
        frontend = create_frontend(settings, transport="http")
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(http_app(frontend), port=port, log_level="error", lifespan="on"))
        task = asyncio.create_task(server.serve())
        while not server.started:  # noqa: ASYNC110 - uvicorn offers no event to wait on
            await asyncio.sleep(0.02)
        manager = frontend.server.session_manager
        base = f"http://127.0.0.1:{port}"
        rss, traced = rss_mib(), tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else 0
        started = time.perf_counter()
        statuses: dict[int, int] = {}
        for address in addresses:
            async with client_from(address, base) as flood:
                for status, times in (await open_sessions(flood, count // len(addresses))).items():
                    statuses[status] = statuses.get(status, 0) + times
        seconds = time.perf_counter() - started
        held = len(manager._server_instances)
        grown = tracemalloc.get_traced_memory()[0] - traced if tracemalloc.is_tracing() else 0
        print(f"{len(addresses)} address(es) sent {count} initializes in {seconds:.1f} s: statuses {statuses}")
        print(f"sessions held: {held}; RSS +{rss_mib() - rss:.0f} MiB", end="")
        print(f"; traced +{grown / 2**20:.1f} MiB ({grown / max(held, 1) / 1024:.1f} KiB a session)" if grown else "")
        async with client_from("127.0.0.3", base) as other:
            opened = await other.post("/mcp", json=INITIALIZE)
            print(f"127.0.0.3 initialize: {opened.status_code} {opened.text[:120]!r}")
            session = opened.headers.get("mcp-session-id")
            if session:
                listed = await other.post(
                    "/mcp",
                    json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                    headers={"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"},
                )
                print(f"127.0.0.3 tools/list: {listed.status_code}")
        server.should_exit = True
        await task


if __name__ == "__main__":
    if "--tracemalloc" in sys.argv:
        tracemalloc.start()
    numbers = [int(arg) for arg in sys.argv[1:] if arg.isdigit()]
    spread = [int(arg.partition("=")[2]) for arg in sys.argv[1:] if arg.startswith("--addresses=")]
    asyncio.run(main(numbers[0] if numbers else 10_000, flood_addresses(spread[0] if spread else 1)))
