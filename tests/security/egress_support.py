"""The egress proxy's tests' parts: an HTTP service on loopback that records what reaches it, requests through the
proxy, and mcp-server-fetch as a server behind it."""

from __future__ import annotations

import asyncio
import base64
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx


@dataclass
class Recorder:
    """An HTTP service on loopback: every request it gets (path and headers)."""

    host: str = "127.0.0.1"
    port: int = 0
    hits: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def serve(self) -> ThreadingHTTPServer:
        hits = self.hits

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server name
                hits.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                body = f"internal secret of {self.server.server_address[0]}".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer((self.host, self.port), Handler)
        self.port = server.server_address[1]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


async def get(proxy_url: str, url: str) -> httpx.Response:
    async with httpx.AsyncClient(proxy=proxy_url, trust_env=False, timeout=20) as client:
        return await client.get(url)


async def connect_through(proxy_port: int, target: str, authorization: str | None) -> bytes:
    """The proxy's answer to a raw CONNECT."""
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
    auth = f"Proxy-Authorization: {authorization}\r\n" if authorization else ""
    writer.write(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{auth}\r\n".encode())
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(4096), 10)
    writer.close()
    return answer


def basic(proxy_url: str) -> str:
    credentials = httpx.URL(proxy_url).userinfo
    return "Basic " + base64.b64encode(credentials).decode()


def fetch_server(python: str) -> dict[str, object]:
    """mcp-server-fetch with its own address check off, so that only the proxy stands in the way."""
    return {
        "command": python,
        "args": ["-m", "mcp_server_fetch", "--allow-private-ips", "--ignore-robots-txt"],
        "egress_proxy": True,
    }


def child_environment(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)
