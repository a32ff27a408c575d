"""Node.js servers behind the egress proxy. Node before 24 ignores HTTP(S)_PROXY: its fetch() and its http/https
modules connect straight to the address a caller names. The proxy's environment preloads
service/upstream/egress_preload.cjs (NODE_OPTIONS=--require), which sends both through the proxy.

Real processes: node running a probe script or a dependency-free stdio MCP server (node_fetch_server.cjs), the
proxy on 127.0.0.1 and a recording HTTP service on loopback. Without node: a skip by hand, a failure under
scripts/test.sh (and so in CI), as every test of the `node` mark."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from service.upstream.egress import NODE_PRELOAD, EgressProxy
from tests.conftest import missing_extra
from tests.security.egress_support import Recorder
from tests.upstream.upstream_support import running

NODE = shutil.which("node")
pytestmark = pytest.mark.node
SERVER = Path(__file__).with_name("node_fetch_server.cjs")
NATIVE_REFUSAL = "Proxy response (403) !== 200 when HTTP Tunneling"


@pytest.fixture(autouse=True)
def node_installed() -> None:
    if NODE is None:
        missing_extra("Node.js is not installed")


# Each way an npm server reads a URL, one line each: "<way>: <status> <body>" or "<way>: <error>".
PROBE = """
const http = require('node:http');
const https = require('node:https');
const [url, secureUrl] = process.argv.slice(1);
const reason = (e) => {
  while (e && e.cause) e = e.cause;  // fetch() wraps the connection's error
  return String(e && e.message).replace(/\s+/g, ' ').trim();
};
const viaModule = (client, target) => new Promise((resolve) => client.get(target, (response) => {
  let body = '';
  response.on('data', (chunk) => (body += chunk));
  response.on('end', () => resolve(`${response.statusCode} ${body.trim()}`));
}).on('error', (e) => resolve(reason(e))));
// As axios does: a client that honours HTTP_PROXY itself writes an absolute-form request to the proxy.
const proxy = new URL(process.env.HTTP_PROXY);
const viaProxy = (target) => viaModule(http, {
  host: proxy.hostname, port: proxy.port, path: target,
  headers: { 'Proxy-Authorization': `Basic ${Buffer.from(`${proxy.username}:${proxy.password}`).toString('base64')}` },
});
const viaFetch = (target) => fetch(target).then(async (r) => `${r.status} ${await r.text()}`, reason);
(async () => {
  console.log(`fetch: ${await viaFetch(url)}`);
  console.log(`http.get: ${await viaModule(http, url)}`);
  console.log(`https fetch: ${await viaFetch(secureUrl)}`);
  console.log(`https.get: ${await viaModule(https, secureUrl)}`);
  console.log(`proxy-aware http: ${await viaProxy(url)}`);
})();
"""


async def probe(env: dict[str, str], port: int) -> list[str]:
    """What the probe script reads of the internal service on this port, with these variables."""
    assert NODE is not None
    base = {name: value for name, value in os.environ.items() if "proxy" not in name.lower()}
    base.pop("NODE_OPTIONS", None)
    process = await asyncio.create_subprocess_exec(
        NODE,
        "-e",
        PROBE,
        f"http://127.0.0.1:{port}/secret",
        f"https://127.0.0.1:{port}/secret",
        env=base | env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return out.decode().splitlines()


async def test_node_behind_the_proxy_reaches_no_internal_address(internal: Recorder) -> None:
    proxy = EgressProxy()
    try:
        lines = await probe(await proxy.environment("web"), internal.port)
    finally:
        await proxy.aclose()
    reason = (
        "refused: host '127.0.0.1' resolves to an internal address (127.0.0.1) (allow it with "
        "execution.egress_allowed_hosts)"
    )
    refused = f"egress proxy refused 127.0.0.1:{internal.port}: HTTP/1.1 403 Forbidden - {reason}"
    assert lines[1:4:2] == [f"http.get: {refused}", f"https.get: {refused}"]
    # fetch(): the preload's tunnel, or on Node 22.21+ and 24+ undici's own proxy agent (NODE_USE_ENV_PROXY=1).
    assert [line.split(": ", 1)[0] for line in lines[0:4:2]] == ["fetch", "https fetch"]
    assert all(line.endswith((refused, NATIVE_REFUSAL)) for line in lines[0:4:2]), lines
    # A client that writes to the proxy itself reaches it as it is (not through a tunnel to 127.0.0.1, refused):
    # the proxy checks its request and answers the 403.
    assert lines[4] == f"proxy-aware http: 403 {reason}"
    assert internal.hits == []


async def test_without_the_preload_node_ignores_the_proxy_variables(internal: Recorder) -> None:
    """Why the preload is there: with the proxy variables alone, Node (before 24, or without NODE_USE_ENV_PROXY)
    reads the internal service directly."""
    proxy = EgressProxy()
    try:
        env = await proxy.environment("web")
        del env["NODE_OPTIONS"], env["NODE_USE_ENV_PROXY"]
        lines = await probe(env, internal.port)
    finally:
        await proxy.aclose()
    assert lines[:2] == ["fetch: 200 internal secret of 127.0.0.1", "http.get: 200 internal secret of 127.0.0.1"]
    assert [path for path, _ in internal.hits] == ["/secret", "/secret"]


async def test_node_reaches_an_allowed_host_through_the_tunnel(internal: Recorder) -> None:
    proxy = EgressProxy(["127.0.0.1"])
    try:
        lines = await probe(await proxy.environment("web"), internal.port)
    finally:
        await proxy.aclose()
    assert lines[:2] == ["fetch: 200 internal secret of 127.0.0.1", "http.get: 200 internal secret of 127.0.0.1"]
    # TLS runs end to end through the tunnel: the plain-HTTP service cannot answer a handshake.
    assert [line.split(": ", 1)[0] for line in lines[2:4]] == ["https fetch", "https.get"]
    assert not any("secret" in line for line in lines[2:4]), lines
    assert lines[4] == "proxy-aware http: 200 internal secret of 127.0.0.1"
    assert [path for path, _ in internal.hits] == ["/secret", "/secret", "/secret"]
    assert all("proxy-authorization" not in headers for _, headers in internal.hits)


async def test_the_childs_own_node_options_are_kept() -> None:
    proxy = EgressProxy()
    try:
        env = await proxy.environment("web", {"NODE_OPTIONS": "--max-old-space-size=96"})
        bare = await proxy.environment("other")
    finally:
        await proxy.aclose()
    assert env["NODE_OPTIONS"] == f'--require "{NODE_PRELOAD}" --max-old-space-size=96'
    assert bare["NODE_OPTIONS"] == f'--require "{NODE_PRELOAD}"'
    assert env["NODE_USE_ENV_PROXY"] == "1"


@pytest.mark.upstream
async def test_a_node_mcp_server_behind_the_proxy_reaches_no_internal_address(
    tmp_path: Path, internal: Recorder
) -> None:
    """An MCP server in Node from a servers file with `"egress_proxy": true`, called through /execute."""
    entry = {"command": NODE, "args": [str(SERVER)], "egress_proxy": True, "env": {"NODE_OPTIONS": "--no-warnings"}}
    url = f"http://127.0.0.1:{internal.port}/secret"
    async with running(tmp_path, {"nodeweb": entry}) as (_, client):
        results = [
            (await client.post("/execute", json={"name": f"nodeweb__{tool}", "arguments": {"url": url}})).json()
            for tool in ("fetch", "get")
        ]
    refused = f"failed: egress proxy refused 127.0.0.1:{internal.port}: HTTP/1.1 403 Forbidden - refused: host "
    for result in results:
        assert result["is_error"] is True, result
    texts = [result["content"][0]["text"] for result in results]
    assert texts[1].startswith(refused)  # http.get
    assert texts[0].startswith(refused) or texts[0] == f"failed: {NATIVE_REFUSAL}"  # fetch()
    assert internal.hits == []
