"""Request lines written off the event loop: the same lines, by the same handlers, on the listener's thread."""

from __future__ import annotations

import io
import logging
import threading

from service.observability.logging import log_requests_off_loop


def test_request_lines_are_written_by_their_own_handlers_on_another_thread() -> None:
    access, other = logging.getLogger("test.access"), logging.getLogger("test.other")
    streams = {name: io.StringIO() for name in ("access", "other")}
    threads: list[str] = []

    class Recording(logging.StreamHandler):  # type: ignore[type-arg]
        def emit(self, record: logging.LogRecord) -> None:
            threads.append(threading.current_thread().name)
            super().emit(record)

    for logger, stream in ((access, streams["access"]), (other, streams["other"])):
        handler = Recording(stream)
        handler.setFormatter(logging.Formatter("%(name)s %(message)s"))
        logger.handlers, logger.propagate = [handler], False
        logger.setLevel(logging.INFO)
    listener = log_requests_off_loop(("test.access", "test.other"))
    access.info('%s - "%s %s" %d', "127.0.0.1:1", "POST", "/search", 200)  # args read by the formatter
    other.info("one line")
    listener.stop()  # writes what is queued
    assert streams["access"].getvalue() == 'test.access 127.0.0.1:1 - "POST /search" 200\n'
    assert streams["other"].getvalue() == "test.other one line\n"
    assert threads and threading.current_thread().name not in threads
