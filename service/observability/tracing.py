"""OpenTelemetry traces, opt-in by the standard OTEL_* variables: one span per request, children for
embedding, index query, policy, upstream call and SQL.

Tracing is on when `OTEL_TRACES_EXPORTER` names an exporter (`console`, `otlp`) or an OTLP endpoint is set,
and `OTEL_SDK_DISABLED` is not true. The provider belongs to the app (not the process-wide global), and the
request's tracer travels in a context variable, so `span("embed")` anywhere below a request is a child of it
and costs nothing when tracing is off."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer
    from sqlalchemy.ext.asyncio import AsyncEngine

logger = logging.getLogger(__name__)

TRACER_NAME = "toolscout"
_tracer: ContextVar[Tracer | None] = ContextVar("toolscout_tracer", default=None)
MAX_STATEMENT_CHARS = 2000


def wants_tracing(environ: Mapping[str, str]) -> bool:
    """Whether the OTEL_* variables ask for traces."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def _exporter(name: str, environ: Mapping[str, str]) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name == "otlp":
        protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        try:
            if protocol == "grpc":
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            else:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            logger.error("OTEL_TRACES_EXPORTER=otlp needs `pip install toolscout[otlp]`; traces are not exported")
            return None
        return OTLPSpanExporter()  # reads the OTEL_EXPORTER_OTLP_* endpoint, headers and timeout itself
    logger.error("OTEL_TRACES_EXPORTER=%s is not supported (console, otlp); traces are not exported", name)
    return None


def provider_from_environment(environ: Mapping[str, str]) -> TracerProvider | None:
    """A tracer provider configured by OTEL_* variables, or None when tracing is off (or the SDK missing)."""
    if not wants_tracing(environ):
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        logger.error("OTEL_* variables ask for traces but opentelemetry-sdk is not installed")
        return None
    provider = TracerProvider(resource=Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME", "toolscout")}))
    names = [n.strip().lower() for n in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
    for name in names:
        exporter = _exporter(name, environ)
        if exporter is not None:
            provider.add_span_processor(BatchSpanProcessor(exporter))
    logger.info("tracing on: exporters %s", ", ".join(names))
    return provider


@contextmanager
def request_tracer(tracer: Tracer | None) -> Iterator[None]:
    """Make `tracer` the one `span()` uses for the rest of this request."""
    token = _tracer.set(tracer)
    try:
        yield
    finally:
        _tracer.reset(token)


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[Span | None]:
    """A child span of the current one when the request is traced; nothing otherwise."""
    tracer = _tracer.get()
    if tracer is None:
        yield None
        return
    with tracer.start_as_current_span(name, attributes={k: v for k, v in attributes.items() if v is not None}) as s:
        yield s


def leaf_span(name: str, start_time: int | None = None, **attributes: Any) -> Span | None:
    """A started child span that the caller ends (for a stage with no children of its own); `start_time` in
    wall-clock nanoseconds when it began earlier."""
    tracer = _tracer.get()
    if tracer is None:
        return None
    return tracer.start_span(
        name, attributes={k: v for k, v in attributes.items() if v is not None}, start_time=start_time
    )


def current_ids() -> tuple[str, str] | None:
    """(trace id, span id) of the current span, in hex, when one is recording."""
    if _tracer.get() is None:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def instrument_engine(engine: AsyncEngine) -> None:
    """A span per SQL statement, below whichever span is current when the statement runs."""
    from sqlalchemy import event

    sync_engine = engine.sync_engine

    @event.listens_for(sync_engine, "before_cursor_execute")
    def _before(conn: Any, cursor: Any, statement: str, params: Any, context: Any, executemany: bool) -> None:
        tracer = _tracer.get()
        if tracer is None or context is None:
            return
        verb = statement.lstrip().split(None, 1)[0].upper() if statement.strip() else "SQL"
        context._toolscout_span = tracer.start_span(
            f"SQL {verb}",
            attributes={"db.system": sync_engine.dialect.name, "db.statement": statement[:MAX_STATEMENT_CHARS]},
        )

    @event.listens_for(sync_engine, "after_cursor_execute")
    def _after(conn: Any, cursor: Any, statement: str, params: Any, context: Any, executemany: bool) -> None:
        s = getattr(context, "_toolscout_span", None)
        if s is not None:
            s.end()
            context._toolscout_span = None

    @event.listens_for(sync_engine, "handle_error")
    def _error(exception_context: Any) -> None:
        context = exception_context.execution_context
        s = getattr(context, "_toolscout_span", None) if context is not None else None
        if s is not None:
            s.record_exception(exception_context.original_exception)
            s.end()
            context._toolscout_span = None
