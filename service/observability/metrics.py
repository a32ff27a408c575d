"""Prometheus metrics of one app: counters and histograms fed by hooks, gauges read at scrape time.

Every label set is bounded: routes are templates (`/tools/{name}`), tools are catalog names (a call of an
unknown name counts as `(unknown)`), servers are configured ids; no query text, and the caller only when
`observability.metrics_caller_label` is set. Each app has its own registry, so tests build as many as they like."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# Without this every counter and histogram label set had a twin gauge `<name>_created` (its creation time, which
# Prometheus's text format has no place for): a family the README did not list, named like a counter without
# `_total`, and a third of the scrape's samples. Process-wide: the client library keeps the switch globally.
disable_created_metrics()

UNKNOWN_TOOL = "(unknown)"
# Statuses of calls that never resolved a catalog tool: their name is whatever the caller sent.
UNRESOLVED = frozenset({"not_found"})
UPSTREAM_STATES = ("installing", "starting", "connecting", "ready", "backoff", "stopped")
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
STAGE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


@dataclass
class Snapshot:
    """Values read from the running service just before a scrape."""

    upstream: list[dict[str, Any]] = field(default_factory=list)
    index_points: int | None = None
    catalog_tools: dict[str, int] = field(default_factory=dict)
    database_up: bool | None = None  # None: the service has no database
    cache_hits: int = 0
    cache_misses: int = 0
    log_pending: int | None = None
    log_written: int = 0
    log_spilled: int = 0
    search_log_pending: int | None = None
    search_log_dropped: int = 0


class SnapshotCollector(Collector):
    """Turns the latest snapshot into gauge and counter families (servers that left simply disappear)."""

    def __init__(self) -> None:
        self.snapshot = Snapshot()

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        state = GaugeMetricFamily(
            "toolscout_upstream_state", "1 for the current state of each upstream server", labels=["server", "state"]
        )
        restarts = CounterMetricFamily(
            "toolscout_upstream_restarts", "Restarts of each upstream server", labels=["server"]
        )
        in_flight = GaugeMetricFamily(
            "toolscout_upstream_in_flight", "Calls in flight per upstream server", labels=["server"]
        )
        for server in snap.upstream:
            states = UPSTREAM_STATES if server["state"] in UPSTREAM_STATES else (*UPSTREAM_STATES, server["state"])
            for name in states:
                state.add_metric([server["id"], name], 1.0 if name == server["state"] else 0.0)
            restarts.add_metric([server["id"]], server["restarts"])
            in_flight.add_metric([server["id"]], server["in_flight"])
        yield from (state, restarts, in_flight)
        catalog = GaugeMetricFamily(
            "toolscout_catalog_tools", "Active tools in the catalog per server", labels=["server"]
        )
        for server, count in sorted(snap.catalog_tools.items()):
            catalog.add_metric([server], count)
        yield catalog
        if snap.database_up is not None:
            yield GaugeMetricFamily(
                "toolscout_database_up", "1 if the catalog database answered this scrape", value=float(snap.database_up)
            )
        if snap.index_points is not None:
            yield GaugeMetricFamily("toolscout_index_points", "Tools in the vector index", value=snap.index_points)
        yield CounterMetricFamily(
            "toolscout_embedding_cache_hits", "Texts served by the embedding cache", value=snap.cache_hits
        )
        yield CounterMetricFamily(
            "toolscout_embedding_cache_misses", "Texts the model embedded", value=snap.cache_misses
        )
        lookups = snap.cache_hits + snap.cache_misses
        yield GaugeMetricFamily(
            "toolscout_embedding_cache_hit_ratio",
            "Share of embedded texts served by the cache since start",
            value=snap.cache_hits / lookups if lookups else 0.0,
        )
        if snap.log_pending is not None:
            yield GaugeMetricFamily(
                "toolscout_execution_log_pending", "Execution rows waiting to be written", value=snap.log_pending
            )
            yield CounterMetricFamily(
                "toolscout_execution_log_written", "Execution rows written", value=snap.log_written
            )
            yield CounterMetricFamily(
                "toolscout_execution_log_spilled", "Execution rows set aside in the spill file", value=snap.log_spilled
            )
        if snap.search_log_pending is not None:
            yield GaugeMetricFamily(
                "toolscout_search_log_pending", "Search rows waiting to be written", value=snap.search_log_pending
            )
            yield CounterMetricFamily(
                "toolscout_search_log_dropped",
                "Search rows dropped while the database did not take them (past logs.max_pending_searches)",
                value=snap.search_log_dropped,
            )


HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
OTHER_METHOD = "_OTHER"


class Metrics:
    """The app's registry and the instruments the hooks feed."""

    def __init__(self, caller_label: bool = False) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.caller_label = caller_label
        r = self.registry
        self.requests = Counter("toolscout_http_requests", "HTTP requests", ["method", "route", "status"], registry=r)
        self.request_seconds = Histogram(
            "toolscout_http_request_duration_seconds",
            "HTTP request latency",
            ["method", "route", "status"],
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        self.search_seconds = Histogram(
            "toolscout_search_duration_seconds",
            "Search latency (embedding, index and ranking)",
            buckets=STAGE_BUCKETS,
            registry=r,
        )
        self.search_stage_seconds = Histogram(
            "toolscout_search_stage_duration_seconds",
            "Search latency by stage",
            ["stage"],
            buckets=STAGE_BUCKETS,
            registry=r,
        )
        self.searches = Counter("toolscout_searches", "Searches", registry=r)
        self.zero_result_searches = Counter(
            "toolscout_searches_zero_results", "Searches that found nothing", registry=r
        )
        labels = ["tool", "server", "status"] + (["caller"] if caller_label else [])
        self.executions = Counter("toolscout_executions", "Tool calls by outcome", labels, registry=r)
        self.execution_seconds = Histogram(
            "toolscout_execution_duration_seconds", "Tool call latency", labels, buckets=REQUEST_BUCKETS, registry=r
        )
        self.snapshot = SnapshotCollector()
        r.register(self.snapshot)

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        # A method is any token the client sends (h11 takes every one): outside the standard ones it is _OTHER,
        # as OpenTelemetry names it, or each would be a series of its own.
        labels = (method if method in HTTP_METHODS else OTHER_METHOD, route, str(status))
        self.requests.labels(*labels).inc()
        self.request_seconds.labels(*labels).observe(seconds)

    def observe_search(self, seconds: float, results: int) -> None:
        self.searches.inc()
        self.search_seconds.observe(seconds)
        if results == 0:
            self.zero_result_searches.inc()

    def observe_stage(self, stage: str, seconds: float) -> None:
        self.search_stage_seconds.labels(stage).observe(seconds)

    def observe_execution(self, row: dict[str, Any]) -> None:
        """One finished call, from its execution-log row."""
        status = str(row.get("status"))
        server = row.get("server_id")
        tool = UNKNOWN_TOOL if status in UNRESOLVED or server is None else str(row.get("tool"))
        labels = [tool, server or "", status] + ([str(row.get("caller"))] if self.caller_label else [])
        self.executions.labels(*labels).inc()
        self.execution_seconds.labels(*labels).observe(float(row.get("duration_ms") or 0.0) / 1000)

    def render(self) -> bytes:
        return generate_latest(self.registry)
