"""NUL (U+0000) is valid in JSON strings and PostgreSQL text cannot hold it: what an upstream server or a script
sends with one must neither 500 nor leave a log row the database refuses (tested on the real PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import select

from service.db.models import Execution, Search
from service.execution.runtime import get_gateway
from tests.security.conftest import make_settings, running, servers_file
from tests.security.scripted_servers import scripted_entry

# A hand-written stdio server whose answers hold NUL: a result over the token budget (stored, then paged), and a
# JSON-RPC error message.
NUL_SERVER = """
tools = [{"name": n, "description": "A tool called " + n, "inputSchema": {"type": "object"}} for n in ("big", "err")]
def handle(method, mid, msg):
    if method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
    elif method == "tools/call" and msg["params"]["name"] == "err":
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32603, "message": "bad\\u0000thing"}})
    elif method == "tools/call":
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": TEXT}]}})
serve("nul", handle)
"""
TEXT = "word\x00 é\x00\x00 " * 3000  # 12,000 tokens, over the budget of 4,000


def nul_settings(tmp_path: Path, postgres_url: str) -> Any:
    entry = scripted_entry(tmp_path, "nul", f"TEXT = {TEXT!r}\n{NUL_SERVER}")
    settings = make_settings(
        tmp_path,
        permissions=None,
        execution={"servers_file": servers_file(tmp_path, {"nul": entry}), "startup_wait_seconds": 60},
    )
    settings.db.url = postgres_url
    return settings


async def test_a_result_holding_nul_is_stored_and_paged_back_exactly(tmp_path: Path, postgres_url: str) -> None:
    async with running(nul_settings(tmp_path, postgres_url)) as (_app, http):
        answer = await http.post("/execute", json={"name": "nul__big", "arguments": {}})
        assert answer.status_code == 200, answer.text  # was a 500: the results table refused the text
        result = answer.json()
        assert result["truncated"] and result["result_id"]
        pages, offset = [], 0
        while offset is not None:
            page = await http.get(f"/results/{result['result_id']}", params={"offset": offset, "limit": 5000})
            assert page.status_code == 200, page.text
            pages.append(page.json()["text"])
            offset = page.json()["next_offset"]
        assert "".join(pages) == TEXT


async def test_nul_from_an_upstream_error_or_a_script_is_logged_not_refused(tmp_path: Path, postgres_url: str) -> None:
    async with running(nul_settings(tmp_path, postgres_url)) as (app, http):
        failed = await http.post("/execute", json={"name": "nul__err", "arguments": {}})
        assert failed.status_code == 502 and "bad\x00thing" in failed.json()["detail"]
        script = (
            "const out = [];\n"
            'try { await tools["nul__big\\u0000"]({}) } catch (e) { out.push(e.status) }\n'
            'try { await search_tools("word\\u0000 big", 3) } catch (e) { out.push(e.status) }\n'
            "return out;"
        )
        run = await http.post("/run", json={"script": script})
        assert run.status_code == 200, run.text
        # Was internal_error twice: the tool lookup by a name with NUL failed in the database, and the search's log
        # row was refused (dropped).
        assert run.json()["result"] == ["invalid_arguments", "invalid_arguments"], run.json()
        assert all("NUL" in call["error"]["detail"] for call in run.json()["calls"]), run.json()["calls"]
        gateway = get_gateway(app.state.resources)
        assert await gateway.log.flush(30)
        async with app.state.resources.session() as session:
            rows = (await session.execute(select(Execution.tool, Execution.status, Execution.error_detail))).all()
            searches = (await session.execute(select(Search.query))).all()
        # The call that ran has its row (the upstream's NUL replaced in the detail), none was set aside as refused;
        # the refused name and query never reached the database, as over REST.
        assert rows == [("nul__err", "upstream_error", rows[0][2])], rows
        assert "bad\ufffdthing" in rows[0][2]
        assert searches == [] and app.state.resources.search_log.lost == 0
    assert not (tmp_path / "executions-spill.jsonl").exists()


async def test_a_row_set_aside_for_its_nul_lands_at_the_next_start(tmp_path: Path, postgres_url: str) -> None:
    # An earlier version refused such a row and kept it in the spill file, replayed (and refused) at every start.
    row = {
        "id": "00000000-0000-4000-8000-000000000001",
        "caller": "local",
        "tool": "nul__err",
        "server_id": "nul",
        "search_id": None,
        "arguments_digest": "0" * 64,
        "arguments": None,
        "status": "upstream_error",
        "error_class": "UpstreamError",
        "error_detail": "bad\x00thing",
        "duration_ms": 1.0,
        "input_tokens": 0,
        "output_tokens": 0,
        "result_id": None,
        "started_at": "2026-01-01T00:00:00+00:00",
        "finished_at": "2026-01-01T00:00:01+00:00",
        "run_id": None,
    }
    (tmp_path / "executions-spill.jsonl").write_text(json.dumps(row) + "\n")
    async with running(nul_settings(tmp_path, postgres_url)) as (app, _http):
        async with app.state.resources.session() as session:
            details = (await session.execute(select(Execution.error_detail))).scalars().all()
        assert details == ["bad\ufffdthing"]
        assert not (tmp_path / "executions-spill.jsonl").exists()
