"""Structured logs: with `TOOLSCOUT_LOG_FORMAT=json` every log record is one JSON line (with the trace ids of
the request it belongs to), and every request adds one line on the `toolscout.request` logger: method,
route, status, caller, latency and the search or execution id."""

from __future__ import annotations

import json
import logging
import logging.handlers
import queue
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from service.observability.tracing import current_ids

REQUEST_LOGGER = "toolscout.request"
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}
_record: ContextVar[dict[str, Any] | None] = ContextVar("toolscout_request_record", default=None)


@contextmanager
def request_scope() -> Iterator[dict[str, Any]]:
    """The mutable facts of one request (caller, search_id, execution_id) that its log line reports."""
    record: dict[str, Any] = {}
    token = _record.set(record)
    try:
        yield record
    finally:
        _record.reset(token)


def note(**facts: Any) -> None:
    """Add facts to the current request's log line (a no-op outside a request)."""
    record = _record.get()
    if record is not None:
        record.update(facts)


def note_execution(execution_id: str) -> None:
    """A request may run several calls (/execute/batch): the line lists them all."""
    record = _record.get()
    if record is None:
        return
    if "execution_id" not in record:
        record["execution_id"] = execution_id
    else:
        record.setdefault("execution_ids", [record["execution_id"]]).append(execution_id)


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, extra fields, trace ids, exception."""

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()  # as logging.Formatter does: other handlers read it
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.message,
        }
        line.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if "trace_id" not in line and (ids := current_ids()) is not None:
            line["trace_id"], line["span_id"] = ids
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, separators=(",", ":"))


def configure_json_logging() -> None:
    """Every handler of the root logger writes JSON; request lines get their own INFO handler."""
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.StreamHandler(sys.stderr))
    for handler in root.handlers:
        handler.setFormatter(JsonFormatter())
    request_logger = logging.getLogger(REQUEST_LOGGER)
    if not request_logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
        request_logger.addHandler(handler)
    request_logger.setLevel(logging.INFO)
    request_logger.propagate = False


class _RecordQueueHandler(logging.handlers.QueueHandler):
    """Queues the record as it is, with the handlers it was meant for (uvicorn's access formatter reads the
    record's args, which the stock `prepare` would merge into the message)."""

    def __init__(self, lines: queue.SimpleQueue[Any], targets: list[logging.Handler]) -> None:
        super().__init__(lines)
        self.targets = targets

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record

    def enqueue(self, record: logging.LogRecord) -> None:
        self.queue.put_nowait((self.targets, record))


class _RecordListener(logging.handlers.QueueListener):
    def handle(self, item: Any) -> None:
        targets, record = item
        for handler in targets:
            if record.levelno >= handler.level:
                handler.handle(record)


def log_requests_off_loop(
    names: tuple[str, ...] = ("uvicorn.access", REQUEST_LOGGER),
) -> logging.handlers.QueueListener:
    """Move the handlers of the per-request loggers to one thread: formatting and writing a request line cost
    the event loop ~60 us a request, queueing it a few. The lines are unchanged (request lines carry their
    trace ids in their fields). The caller stops the listener at exit, which writes what is still queued."""
    lines: queue.SimpleQueue[Any] = queue.SimpleQueue()
    for name in names:
        logger = logging.getLogger(name)
        if logger.handlers:
            logger.handlers = [_RecordQueueHandler(lines, list(logger.handlers))]
    listener = _RecordListener(lines)
    listener.start()
    return listener
