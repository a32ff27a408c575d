"""What the demo servers reach on a caller's behalf: no address of this machine or its network.

The demo set runs whenever no servers file is set, and any caller whose permissions admit `everything` or `fetch`
hands them a URL. server-everything's gzip-file-as-resource fetched any http(s) URL (a local service's answer came
back gzipped in the result); mcp-server-fetch refuses non-public addresses itself."""

from __future__ import annotations

import base64
import gzip
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.upstream.upstream_support import running

pytestmark = pytest.mark.node


class _Recorder(BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        _Recorder.hits.append(self.path)
        body = b"internal secret"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def internal_service() -> Iterator[str]:
    """An HTTP service on loopback that counts the requests it gets."""
    _Recorder.hits = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/secret"
    finally:
        server.shutdown()
        server.server_close()


async def test_demo_servers_fetch_no_internal_address(
    tmp_path: Path, python_servers: str, node_modules: Path, internal_service: str
) -> None:
    async with running(tmp_path, None, demo=True) as (_, client):
        gzipped = await client.post(
            "/execute",
            json={
                "name": "everything__gzip-file-as-resource",
                "arguments": {"name": "x.gz", "data": internal_service, "outputType": "resource"},
            },
        )
        fetched = await client.post("/execute", json={"name": "fetch__fetch", "arguments": {"url": internal_service}})
        inline = await client.post(
            "/execute",
            json={
                "name": "everything__gzip-file-as-resource",
                "arguments": {"name": "y.gz", "data": "data:text/plain;base64,aGVsbG8=", "outputType": "resource"},
            },
        )
    assert gzipped.status_code == 200 and gzipped.json()["is_error"] is True, gzipped.text
    assert "Domain 127.0.0.1 is not in the allowed domains list" in gzipped.json()["content"][0]["text"]
    assert fetched.json()["is_error"] is True and "not a public address" in fetched.json()["content"][0]["text"]
    assert _Recorder.hits == []
    # data: URIs still work: the tool is fenced, not broken.
    blob = inline.json()["content"][0]["resource"]["blob"]
    assert gzip.decompress(base64.b64decode(blob)) == b"hello"
