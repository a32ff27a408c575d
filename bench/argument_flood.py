"""How much one caller flooding POST /execute with huge, invalid, deeply nested arguments slows down the others.

Usage: python bench/argument_flood.py [--clients 8] [--seconds 20] [--port N] [--models-dir DIR]

Runs the service with uvicorn in a child process (the real MiniLM, mcp-server-time over stdio, a permissions
file), then, for --seconds, keeps --clients dev-key clients each sending /execute of a ~1.5 MB argument object
that breaks its tool's schema thousands of times and nests 99 levels deep (every other one 150 levels), while an
admin calls time__get_current_time and searches once every 0.2 s. Prints the admin's /execute and /search
latencies (median, p90, max), the same without the flood, and the flood's own rate and answer size."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from service.upstream.demo import PYTHON_DEMO, default_toolchain_dir, ensure_python_packages

PERMISSIONS = """
roles:
  dev:
    allow: ["server:flood", "server:time"]
"""
# Each row breaks the schema three times (id, two tags): 15,000 rows are 45,000 errors in ~1.5 MB.
FLOOD_SCHEMA = {
    "type": "object",
    "properties": {
        "rows": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"id": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "integer"}}},
            },
        },
        "tree": {"type": "array"},
    },
}
FLOOD_TOOL = {"server": "flood", "name": "ingest", "description": "Ingest rows", "input_schema": FLOOD_SCHEMA}


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def flood_body(depth: int) -> bytes:
    rows = [{"id": f"row-{i:06d}", "tags": ["alpha", "beta"], "note": "x" * 40} for i in range(15_000)]
    return json.dumps({"name": "flood__ingest", "arguments": {"rows": rows, "tree": nested(depth)}}).encode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def environment(work: Path, models: Path) -> dict[str, str]:
    env = os.environ | {
        "TOOLSCOUT_DATA_DIR": str(work / "data"),
        "TOOLSCOUT_DEMO_CATALOG": "false",
        "TOOLSCOUT_EXECUTION__SERVERS_FILE": str(work / "servers.json"),
        "TOOLSCOUT_EXECUTION__DEMO_SERVERS": "false",
        "TOOLSCOUT_POLICY__RATE_LIMIT_PER_MINUTE": "0",
        "TOOLSCOUT_POLICY__PERMISSIONS_FILE": str(work / "permissions.yaml"),
        "TOOLSCOUT_LOG_LEVEL": "WARNING",
    }
    if models.is_dir():  # an exported model: no export on every run
        env["TOOLSCOUT_EMBEDDING__MODELS_DIR"] = str(models)
    return env


def create_key(env: dict[str, str], caller: str, role: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "service.cli", "keys", "create", "--caller", caller, "--role", role, "--json"],
        env=env,
        check=True,
        capture_output=True,
    )
    return str(json.loads(out.stdout)["key"])


def start_service(env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "uvicorn", "--factory", "service.main:app_factory", "--port", str(port)]
    return subprocess.Popen([*command, "--log-level", "warning", "--no-access-log"], env=env)


def summary(values: list[float]) -> str:
    if not values:
        return "no calls"
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return f"n={len(values):4d}  median {statistics.median(values):6.3f} s  p90 {p90:6.3f} s  max {ordered[-1]:6.3f} s"


async def wait_ready(http: httpx.AsyncClient, process: subprocess.Popen[bytes], admin: dict[str, str]) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the service exited with code {process.returncode}")
        try:
            response = await http.get("/servers/time", headers=admin)
            if response.status_code == 200 and response.json().get("state") == "ready":
                return
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.5)
    raise RuntimeError("the service did not get ready in 180 s")


async def measure_admin(http: httpx.AsyncClient, admin: dict[str, str], seconds: float) -> dict[str, list[float]]:
    """The admin's /execute and /search latencies, one of each every 0.2 s."""
    found: dict[str, list[float]] = {"execute": [], "search": []}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.perf_counter()
        response = await http.post(
            "/execute", json={"name": "time__get_current_time", "arguments": {"timezone": "UTC"}}, headers=admin
        )
        found["execute"].append(time.perf_counter() - started)
        assert response.status_code == 200, response.text
        started = time.perf_counter()
        response = await http.post("/search", json={"query": "what time is it in Tokyo"}, headers=admin)
        found["search"].append(time.perf_counter() - started)
        assert response.status_code == 200, response.text
        await asyncio.sleep(0.2)
    return found


async def flood(base: str, dev: dict[str, str], bodies: list[bytes], stop: asyncio.Event, seen: dict[str, Any]) -> None:
    """One flooding client: invalid /execute after invalid /execute until told to stop."""
    async with httpx.AsyncClient(base_url=base, timeout=120) as http:
        turn = 0
        while not stop.is_set():
            headers = dev | {"Content-Type": "application/json"}
            response = await http.post("/execute", content=bodies[turn % len(bodies)], headers=headers)
            turn += 1
            seen["answers"] += 1
            seen["statuses"][response.status_code] = seen["statuses"].get(response.status_code, 0) + 1
            seen["largest_answer"] = max(seen["largest_answer"], len(response.content))
            errors = response.json().get("errors") or []
            seen["most_errors"] = max(seen["most_errors"], len(errors))


async def run(args: argparse.Namespace) -> None:
    python = await ensure_python_packages(
        default_toolchain_dir(), [p for p, _ in PYTHON_DEMO.values()], [m for _, m in PYTHON_DEMO.values()]
    )
    work = Path(tempfile.mkdtemp(prefix="toolscout-flood-"))
    (work / "servers.json").write_text(
        json.dumps({"mcpServers": {"time": {"command": python, "args": ["-m", "mcp_server_time"]}}})
    )
    (work / "permissions.yaml").write_text(PERMISSIONS)
    env = environment(work, args.models_dir)
    admin = {"Authorization": f"Bearer {create_key(env, 'root', 'admin')}"}
    dev = {"Authorization": f"Bearer {create_key(env, 'dev-agent', 'dev')}"}
    port = args.port or free_port()
    process = start_service(env, port)
    base = f"http://127.0.0.1:{port}"
    bodies = [flood_body(99), flood_body(150)]
    print(f"flood body: {len(bodies[0]) / 1e6:.2f} MB, {args.clients} clients, {args.seconds:g} s")
    try:
        async with httpx.AsyncClient(base_url=base, timeout=120) as http:
            await wait_ready(http, process, admin)
            response = await http.post("/tools", json={"tools": [FLOOD_TOOL]}, headers=admin)
            assert response.status_code == 200, response.text
            await measure_admin(http, admin, 2)  # warm: sessions, model, caches
            quiet = await measure_admin(http, admin, min(args.seconds, 8))
            stop = asyncio.Event()
            seen: dict[str, Any] = {"answers": 0, "statuses": {}, "largest_answer": 0, "most_errors": 0}
            flooders = [asyncio.create_task(flood(base, dev, bodies, stop, seen)) for _ in range(args.clients)]
            await asyncio.sleep(1)
            loud = await measure_admin(http, admin, args.seconds)
            stop.set()
            await asyncio.gather(*flooders)
        print(f"quiet  admin /execute  {summary(quiet['execute'])}")
        print(f"quiet  admin /search   {summary(quiet['search'])}")
        print(f"flood  admin /execute  {summary(loud['execute'])}")
        print(f"flood  admin /search   {summary(loud['search'])}")
        rate = seen["answers"] / (args.seconds + 1)
        print(
            f"flood: {seen['answers']} answers ({rate:.1f}/s), statuses {seen['statuses']}, "
            f"largest answer {seen['largest_answer']:,} bytes, most errors listed {seen['most_errors']}"
        )
    finally:
        process.terminate()
        process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--models-dir", type=Path, default=Path(".toolscout/models"), help="exported models")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
