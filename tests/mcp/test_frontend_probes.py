"""`GET /healthz` and `/readyz` of the MCP front end over HTTP: a balancer in front of several front ends had
nothing to probe (a 404 without a key, a 401 with one). Real front end on uvicorn, real REST API behind it."""

from __future__ import annotations

import httpx
from fastapi import FastAPI

from service.mcp.serve import http_app
from service.mcp.server import create_frontend
from service.settings import Settings
from tests.mcp.conftest import serving
from tests.processes import free_port


async def test_probes_answer_before_the_key_and_say_whether_the_api_is_ready(
    settings: Settings, live_api: tuple[str, FastAPI]
) -> None:
    front = settings.model_copy(deep=True)
    front.frontend.api_url = live_api[0]
    front.frontend.http_api_key = "front-end-key-0123456789"
    async with serving(http_app(create_frontend(front, mode="lazy", transport="http")), free_port()) as base:
        async with httpx.AsyncClient(base_url=base) as http:
            alive, ready = await http.get("/healthz"), await http.get("/readyz")
            assert (alive.status_code, alive.json()) == (200, {"status": "ok"})
            assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
            assert alive.headers["cache-control"] == "no-store"
            # The MCP endpoint still needs the key; a POST to a probe is not a probe.
            assert (await http.post("/mcp", json={})).status_code == 401
            assert (await http.post("/healthz")).status_code == 401


async def test_a_front_end_whose_api_does_not_answer_is_not_ready(settings: Settings) -> None:
    front = settings.model_copy(deep=True)
    front.frontend.api_url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    front.frontend.events_retry_seconds = 0.2
    async with serving(http_app(create_frontend(front, mode="lazy", transport="http")), free_port()) as base:
        async with httpx.AsyncClient(base_url=base) as http:
            assert (await http.get("/healthz")).status_code == 200
            ready = await http.get("/readyz")
    assert ready.status_code == 503
    assert ready.json() == {"status": "not ready", "detail": "the REST API does not answer"}
    assert "127.0.0.1" not in ready.text  # a probe needs no key: it does not say where the API is
