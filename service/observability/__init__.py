"""Metrics, traces and structured logs of a running service.

`install_observability(app, resources)` adds the request middleware (main.py includes the /metrics route of
routes.py); the rest of the service reports through four small hooks: `stage` (a timed search stage),
`observe_search`, `observe_execution` and `span` (a child span, re-exported from tracing). Only routes.py
imports a domain (the catalog, at scrape time): the hooks sit below every domain that calls them."""

from __future__ import annotations

import logging as std_logging  # `logging` names this package's submodule
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.observability.logging import REQUEST_LOGGER, configure_json_logging, note, note_execution, request_scope
from service.observability.metrics import Metrics
from service.observability.tracing import (
    TRACER_NAME,
    current_ids,
    instrument_engine,
    leaf_span,
    provider_from_environment,
    request_tracer,
    span,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer

    from service.resources import Resources

__all__ = [
    "Observability",
    "Stage",
    "current_ids",
    "install_observability",
    "observe_execution",
    "observe_search",
    "span",
    "stage",
]

request_logger = std_logging.getLogger(REQUEST_LOGGER)


@dataclass
class Observability:
    """The app's metrics, its tracer (None when tracing is off) and whether request lines are logged."""

    metrics: Metrics
    provider: TracerProvider | None = None
    tracer: Tracer | None = None
    json_logs: bool = False

    def use_provider(self, provider: TracerProvider | None) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(TRACER_NAME) if provider is not None else None


class Stage:
    """One timed stage of a search (embed, index, rank): a leaf span and the stage histogram, ended by `end`."""

    def __init__(
        self, resources: Resources, name: str, started: float | None = None, started_wall: int | None = None
    ) -> None:
        """`started`: when the stage began (perf_counter) if before now, e.g. on another thread; `started_wall`:
        the same moment in wall-clock nanoseconds when the stage before it ended there (`ended_wall`)."""
        self.resources, self.name = resources, name
        now = time.perf_counter()
        self.started = now if started is None else started
        if started_wall is None and started is not None:
            started_wall = _wall_ns(started, now)
        self.span = leaf_span(f"search.{name}", start_time=started_wall)
        self.ended: float | None = None  # when it ended (perf_counter), if before `end` is called
        self.ended_wall: int | None = None  # that moment as the span's end, once ended

    def end(self) -> None:
        now = time.perf_counter()
        ended = now if self.ended is None else self.ended
        if self.span is not None:
            self.ended_wall = None if self.ended is None else _wall_ns(self.ended, now)
            self.span.end(end_time=self.ended_wall)
        obs = self.resources.observability
        if obs is not None:
            obs.metrics.observe_stage(self.name, ended - self.started)


def _wall_ns(moment: float, now: float) -> int:
    """A perf_counter moment as wall-clock nanoseconds (what spans take)."""
    return time.time_ns() - int((now - moment) * 1e9)


@contextmanager
def stage(resources: Resources, name: str) -> Iterator[Stage]:
    """A Stage around a block."""
    timed = Stage(resources, name)
    try:
        yield timed
    finally:
        timed.end()


def observe_search(resources: Resources, search_id: str, latency_ms: float, results: int) -> None:
    """Count a search (and whether it found nothing); its id goes on the request's log line."""
    note(search_id=search_id)
    obs = resources.observability
    if obs is not None:
        obs.metrics.observe_search(latency_ms / 1000, results)


def observe_execution(resources: Resources, row: dict[str, Any]) -> None:
    """Count a finished call from its execution-log row."""
    note_execution(str(row["id"]))
    obs = resources.observability
    if obs is not None:
        obs.metrics.observe_execution(row)


def route_label(scope: Scope) -> str:
    """The route template of a request (bounded), never its raw path."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if path:
        return str(path)
    raw = str(scope.get("path", ""))
    if raw.startswith("/console/static/"):
        return "/console/static/{path}"
    return "unmatched"


class ObservabilityMiddleware:
    """Per request: a span (continuing an incoming `traceparent`), the request metrics, one JSON log line."""

    def __init__(self, app: ASGIApp, obs: Observability) -> None:
        self.app = app
        self.obs = obs

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = time.perf_counter()
        scope.setdefault("state", {})  # request.state: policy's resolve_caller leaves the caller there

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        with request_scope() as record, request_tracer(self.obs.tracer), self._request_span(scope) as request_span:
            try:
                await self.app(scope, receive, send_status)
            finally:
                self._finish(scope, status, time.perf_counter() - started, record, request_span)

    @contextmanager
    def _request_span(self, scope: Scope) -> Iterator[Any]:
        tracer = self.obs.tracer
        if tracer is None:
            yield None
            return
        from opentelemetry.trace import SpanKind
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        parent = TraceContextTextMapPropagator().extract(headers)
        method = scope.get("method", "GET")
        with tracer.start_as_current_span(
            method, context=parent, kind=SpanKind.SERVER, attributes={"http.request.method": method}
        ) as request_span:
            yield request_span

    def _finish(self, scope: Scope, status: int, seconds: float, record: dict[str, Any], request_span: Any) -> None:
        method, route = str(scope.get("method", "")), route_label(scope)
        if (caller := scope["state"].get("caller")) is not None:
            record.setdefault("caller", caller.id)  # the request's log line names its caller
        self.obs.metrics.observe_request(method, route, status, seconds)
        if request_span is not None:
            request_span.update_name(f"{method} {route}")
            request_span.set_attribute("http.route", route)
            request_span.set_attribute("http.response.status_code", status)
            if status >= 500:
                from opentelemetry.trace import Status, StatusCode

                request_span.set_status(Status(StatusCode.ERROR))
        if self.obs.json_logs:
            line = {
                "method": method,
                "route": route,
                "path": scope.get("path"),
                "status": status,
                "latency_ms": round(seconds * 1000, 3),
                **record,
            }
            if (ids := current_ids()) is not None:
                line["trace_id"], line["span_id"] = ids
            request_logger.info("%s %s %d", method, route, status, extra=line)


def install_observability(
    app: FastAPI, resources: Resources, environ: Mapping[str, str] | None = None
) -> Observability:
    """Metrics always; traces when OTEL_* ask for them; JSON logs when `log_format` is json."""
    settings = resources.settings
    obs = Observability(Metrics(settings.observability.metrics_caller_label), json_logs=settings.log_format == "json")
    obs.use_provider(provider_from_environment(os.environ if environ is None else environ))
    if obs.json_logs:
        configure_json_logging()
    resources.observability = obs
    app.state.observability = obs
    app.add_middleware(ObservabilityMiddleware, obs=obs)

    async def start(resources: Resources) -> None:
        if resources.engine is not None:
            instrument_engine(resources.engine)

    async def stop(resources: Resources) -> None:
        if obs.provider is not None:
            obs.provider.force_flush()

    app.state.startup_hooks.insert(0, start)
    app.state.shutdown_hooks.append(stop)
    return obs
