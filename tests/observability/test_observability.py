"""GET /metrics parsed with the Prometheus text parser against the calls made, its access rules, the traces
(an in-memory exporter on the app's own provider) and the JSON request lines."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from indexer.embedding import HashingEmbedder
from service.main import create_app
from service.observability import tracing
from service.observability.logging import JsonFormatter
from service.policy import keys as policy_keys
from service.settings import ExecutionSettings, PolicySettings, Settings

pytestmark = pytest.mark.upstream

TEST_SERVER = Path(__file__).resolve().parents[1] / "upstream" / "mcp_test_server.py"


@asynccontextmanager
async def running(tmp_path: Path, **settings: Any) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """The app with the test MCP server as `t`, lifespan run."""
    servers_file = tmp_path / "servers.json"
    servers_file.write_text(json.dumps({"mcpServers": {"t": {"command": sys.executable, "args": [str(TEST_SERVER)]}}}))
    config = Settings(
        data_dir=tmp_path,
        demo_catalog=False,
        policy=PolicySettings(rate_limit_per_minute=0),
        execution=ExecutionSettings(servers_file=servers_file, demo_servers=False, startup_wait_seconds=60),
        **settings,
    )
    app = create_app(config, embedder=HashingEmbedder())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=60) as client:
            yield app, client


async def cli_key(app: FastAPI, caller: str, roles: list[str]) -> str:
    """The first key, made the CLI's way (`toolscout keys create`)."""
    resources = app.state.resources
    async with resources.session() as session:
        created = await policy_keys.create_key(session, caller, roles)
        await session.commit()
    policy_keys.key_resolver(resources).invalidate()
    return str(created.key)


def scrape(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, by (name, sorted labels)."""
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_metrics_count_the_requests_searches_and_calls_made(tmp_path: Path) -> None:
    async with running(tmp_path) as (app, client):
        for i in range(3):
            response = await client.post("/execute", json={"name": "t__echo", "arguments": {"text": f"hi {i}"}})
            assert response.status_code == 200, response.text
        assert (await client.post("/execute", json={"name": "t__fail", "arguments": {}})).json()[
            "status"
        ] == "tool_error"
        assert (await client.post("/execute", json={"name": "t__echo", "arguments": {}})).status_code == 422
        assert (await client.post("/execute", json={"name": "no_such_tool_xyz", "arguments": {}})).status_code == 404
        for query in ["echo some text", "sleep for a while"]:
            assert (await client.post("/search", json={"query": query, "k": 3})).status_code == 200
        await client.get("/tools/t__echo")
        await client.get("/tools/t__pid")
        scraped = await client.get("/metrics")
        assert scraped.status_code == 200
        assert scraped.headers["content-type"].startswith("text/plain")
        m = scrape(scraped.text)

    ok = {"tool": "t__echo", "server": "t", "status": "ok"}
    assert value(m, "toolscout_executions_total", **ok) == 3
    assert value(m, "toolscout_execution_duration_seconds_count", **ok) == 3
    assert value(m, "toolscout_executions_total", tool="t__fail", server="t", status="tool_error") == 1
    assert value(m, "toolscout_executions_total", tool="t__echo", server="t", status="invalid_arguments") == 1
    # An unknown name never becomes a label value: label sets stay bounded by the catalog.
    assert value(m, "toolscout_executions_total", tool="(unknown)", server="", status="not_found") == 1
    assert not any("no_such_tool_xyz" in str(key) for key in m)
    # Requests per route template and status, never per raw path.
    assert value(m, "toolscout_http_requests_total", method="POST", route="/execute", status="200") == 4
    assert value(m, "toolscout_http_requests_total", method="POST", route="/execute", status="422") == 1
    assert value(m, "toolscout_http_requests_total", method="POST", route="/execute", status="404") == 1
    assert value(m, "toolscout_http_requests_total", method="GET", route="/tools/{name}", status="200") == 2
    assert value(m, "toolscout_http_request_duration_seconds_count", method="POST", route="/search", status="200") == 2
    assert value(m, "toolscout_searches_total") == 2
    for stage in ("embed", "index", "rank"):
        assert value(m, "toolscout_search_stage_duration_seconds_count", stage=stage) == 2
    # Scrape-time values: the upstream server, the catalog and index, the embedding cache, the log queue.
    assert value(m, "toolscout_upstream_state", server="t", state="ready") == 1
    assert value(m, "toolscout_upstream_state", server="t", state="backoff") == 0
    assert value(m, "toolscout_upstream_restarts_total", server="t") == 0
    assert value(m, "toolscout_upstream_in_flight", server="t") == 0
    assert value(m, "toolscout_catalog_tools", server="t") == 7
    assert value(m, "toolscout_index_points") == 7
    assert value(m, "toolscout_embedding_cache_misses_total") >= 2
    assert value(m, "toolscout_execution_log_pending") + value(m, "toolscout_execution_log_written_total") == 6


async def test_zero_result_searches_are_counted(tmp_path: Path) -> None:
    async with running(tmp_path) as (_, client):
        assert (await client.post("/search", json={"query": "echo", "servers": ["nowhere"]})).json()["results"] == []
        assert (await client.post("/search", json={"query": "echo"})).json()["results"]
        m = scrape((await client.get("/metrics")).text)
    assert value(m, "toolscout_searches_total") == 2
    assert value(m, "toolscout_searches_zero_results_total") == 1


async def test_metrics_need_the_admin_or_metrics_role(tmp_path: Path) -> None:
    async with running(tmp_path) as (app, client):
        assert (await client.get("/metrics")).status_code == 200  # open mode: the local admin
        keys = {"ops": await cli_key(app, "ops", ["admin"])}  # POST /keys needs an admin key even in open mode
        admin = {"Authorization": f"Bearer {keys['ops']}"}
        for caller, roles in [("prom", ["metrics"]), ("agent", [])]:
            created = await client.post("/keys", json={"caller": caller, "roles": roles}, headers=admin)
            keys[caller] = created.json()["key"]
        assert (await client.get("/metrics")).status_code == 401
        for caller, status in [("ops", 200), ("prom", 200), ("agent", 403)]:
            response = await client.get("/metrics", headers={"Authorization": f"Bearer {keys[caller]}"})
            assert response.status_code == status, caller
        denied = (await client.get("/metrics", headers={"Authorization": f"Bearer {keys['agent']}"})).json()
        assert denied["type"].endswith("/permission-denied")


async def test_caller_label_only_when_configured(tmp_path: Path) -> None:
    from service.settings import ObservabilitySettings

    async with running(tmp_path, observability=ObservabilitySettings(metrics_caller_label=True)) as (_, client):
        await client.post("/execute", json={"name": "t__pid", "arguments": {}})
        m = scrape((await client.get("/metrics")).text)
    assert value(m, "toolscout_executions_total", tool="t__pid", server="t", status="ok", caller="local") == 1


async def test_traces_have_a_span_per_request_with_children(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with running(tmp_path) as (app, client):
        app.state.observability.use_provider(provider)
        parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        await client.post("/search", json={"query": "echo text"}, headers={"traceparent": parent})
        exporter.clear()
        response = await client.post("/execute", json={"name": "t__echo", "arguments": {"text": "x"}})
        assert response.status_code == 200
        spans = exporter.get_finished_spans()
        problem = (await client.post("/execute", json={"name": "t__echo", "arguments": {}})).json()
    by_name = {s.name: s for s in spans}
    request = by_name["POST /execute"]
    assert request.attributes["http.route"] == "/execute" and request.attributes["http.response.status_code"] == 200
    for child in ("policy.authorize", "upstream.call"):
        assert by_name[child].parent.span_id == request.context.span_id
        assert by_name[child].context.trace_id == request.context.trace_id
    assert by_name["upstream.call"].attributes["server"] == "t"
    # The problem names the trace of its occurrence.
    assert problem["instance"] == f"/execute#trace={problem['trace_id']}" and len(problem["trace_id"]) == 32


async def test_search_spans_continue_an_incoming_trace(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with running(tmp_path) as (app, client):
        app.state.observability.use_provider(provider)
        parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        assert (
            await client.post("/search", json={"query": "echo text"}, headers={"traceparent": parent})
        ).status_code == 200
        await client.get("/tools/t__echo")  # a route that runs SQL
    spans = exporter.get_finished_spans()
    names = [s.name for s in spans]
    for name in ("POST /search", "search", "search.embed", "search.index", "search.rank", "GET /tools/{name}"):
        assert name in names, names
    # The stages follow each other inside the search, also when the index step ran on the embedder's thread.
    stages = {s.name: s for s in spans if s.name.startswith("search")}
    embed, index, rank = (stages[f"search.{n}"] for n in ("embed", "index", "rank"))
    assert stages["search"].start_time <= embed.start_time <= embed.end_time <= index.start_time
    assert index.start_time <= index.end_time <= rank.start_time <= rank.end_time <= stages["search"].end_time
    search = next(s for s in spans if s.name == "POST /search")
    assert f"{search.context.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"
    assert search.parent.span_id == 0xB7AD6B7169203331
    tools = next(s for s in spans if s.name == "GET /tools/{name}")
    sql = [s for s in spans if s.name.startswith("SQL ") and s.context.trace_id == tools.context.trace_id]
    assert sql and all(s.attributes["db.system"] == "sqlite" for s in sql)


def test_tracing_is_opt_in_by_the_otel_variables() -> None:
    assert tracing.provider_from_environment({}) is None
    assert tracing.provider_from_environment({"OTEL_TRACES_EXPORTER": "none"}) is None
    assert tracing.provider_from_environment({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"}) is None
    assert tracing.wants_tracing({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    provider = tracing.provider_from_environment({"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "ts-test"})
    assert provider is not None and provider.resource.attributes["service.name"] == "ts-test"
    provider.shutdown()


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """configure_json_logging changes process-wide handlers (pytest's own among them): put them back."""
    root, request = logging.getLogger(), logging.getLogger("toolscout.request")
    formatters = [(handler, handler.formatter) for handler in root.handlers]
    handlers, level, propagate = list(request.handlers), request.level, request.propagate
    yield
    for handler, formatter in formatters:
        handler.setFormatter(formatter)
    root.handlers = [h for h in root.handlers if h in dict(formatters)]
    request.handlers, request.level, request.propagate = handlers, level, propagate


@pytest.mark.usefixtures("restored_logging")
async def test_json_request_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with running(tmp_path, log_format="json") as (_, client):
        logger = logging.getLogger("toolscout.request")
        logger.addHandler(caplog.handler)
        try:
            search = (await client.post("/search", json={"query": "echo"})).json()
            call = (await client.post("/execute", json={"name": "t__echo", "arguments": {"text": "a"}})).json()
        finally:
            logger.removeHandler(caplog.handler)
    lines = [json.loads(JsonFormatter().format(r)) for r in caplog.records if r.name == "toolscout.request"]
    by_route = {line["route"]: line for line in lines}
    assert by_route["/search"]["search_id"] == search["search_id"]
    assert by_route["/search"]["caller"] == "local" and by_route["/search"]["status"] == 200
    assert by_route["/execute"]["execution_id"] == call["execution_id"]
    assert by_route["/execute"]["latency_ms"] > 0 and by_route["/execute"]["method"] == "POST"
