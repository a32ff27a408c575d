"""The egress proxy's credentials of a server are Toolscout's secret: the child holds them in its environment (the
proxy variables), and what its tools return reaches callers. The demo `everything` server's `get-env`, which any
caller of the default role may use, printed `HTTP_PROXY=http://<user>:<password>@127.0.0.1:<port>`, and with it any
process of the machine used the proxy as that server (the proxy answers 407 to anyone else). A server's results,
structured content, stored pages and error messages are scrubbed of that password."""

from __future__ import annotations

import json
from pathlib import Path

from service.execution.runtime import get_gateway
from tests.security.conftest import cli_key, make_settings, running, servers_file
from tests.security.egress_support import child_environment
from tests.security.scripted_servers import scripted_entry

# A stdio server that says what its environment holds: in a text block, in structured content (a key and a value),
# in a long answer that is cut and stored, and in a JSON-RPC error's message.
ENV_SERVER = """
import os
schema = {"type": "object", "properties": {}}
tools = [{"name": n, "description": "Say what this server's environment holds.", "inputSchema": schema}
         for n in ("env", "env_long", "env_error")]
def handle(method, mid, msg):
    if method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
    elif method == "tools/call":
        name, env = msg["params"]["name"], dict(os.environ)
        text = json.dumps(env, indent=2)
        if name == "env":
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text}],
                  "structuredContent": {"env": env, env["HTTP_PROXY"]: "as a key"}}})
        elif name == "env_long":
            text = "filler " * 6000 + text
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text}]}})
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32603, "message": "no luck with " + text}})
serve("envy", handle)
"""


async def test_a_caller_never_reads_the_proxy_credentials_a_server_holds(tmp_path: Path) -> None:
    entry = scripted_entry(tmp_path, "envy", ENV_SERVER) | {"egress_proxy": True}
    execution = {"servers_file": servers_file(tmp_path, {"envy": entry}), "startup_wait_seconds": 60}
    async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (app, http):
        key = await cli_key(app, "agent", ["dev"])
        headers = {"Authorization": f"Bearer {key}"}
        connection = get_gateway(app.state.resources).pool.get("envy")
        proxy = child_environment(connection.health.pid)["HTTP_PROXY"]
        password = proxy.split("@")[0].rsplit(":", 1)[1]
        assert len(password) >= 24  # the child does hold it: the proxy is what it reaches the network through

        answer = await http.post("/execute", json={"name": "envy__env", "arguments": {}}, headers=headers)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert password not in answer.text
        shown = json.loads(body["content"][0]["text"])
        assert shown["HTTP_PROXY"] == proxy.replace(password, "***")
        assert body["structured_content"]["env"]["HTTPS_PROXY"] == proxy.replace(password, "***")
        assert proxy.replace(password, "***") in body["structured_content"]

        long = await http.post("/execute", json={"name": "envy__env_long", "arguments": {}}, headers=headers)
        assert long.status_code == 200 and long.json()["truncated"] is True, long.text
        cut = long.json()
        page = await http.get(
            f"/results/{cut['result_id']}", params={"offset": cut["returned_tokens"]}, headers=headers
        )
        assert page.status_code == 200, page.text
        assert "HTTP_PROXY" in page.text and password not in page.text

        failed = await http.post("/execute", json={"name": "envy__env_error", "arguments": {}}, headers=headers)
        assert failed.status_code == 502, failed.text
        assert "no luck with" in failed.json()["detail"] and password not in failed.text

        script = "return await tools.envy__env({})"
        ran = await http.post("/run", json={"script": script}, headers=headers)
        assert ran.status_code == 200 and ran.json()["result"]["env"]["ALL_PROXY"] == proxy.replace(password, "***")
