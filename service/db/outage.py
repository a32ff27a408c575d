"""How a batched log writer (the search log, the execution log) lives through a database outage.

While its database refuses batches, a writer tries again after a doubling wait (RETRY_INITIAL_SECONDS up to
RETRY_MAX_SECONDS), and what it holds in memory is bounded: the execution log sets each batch aside in its spill file
(nothing is lost), the search log keeps the oldest rows up to its bound and drops the searches past it. Dropped rows
are counted (for /metrics) and said in one warning line when the outage ends: the writer caught up (nothing is held
any more), or the service stops."""

from __future__ import annotations

import logging
import time

logger = logging.getLogger(__name__)

RETRY_INITIAL_SECONDS = 0.2
RETRY_MAX_SECONDS = 10.0


class Outage:
    """A writer's view of its database: the failed attempts in a row, since when, and the rows dropped meanwhile."""

    def __init__(self, label: str) -> None:
        self.label = label  # "search log"
        self.failures = 0  # attempts failed in a row (0: the database takes batches)
        self.started: float | None = None
        self.dropped = 0  # rows dropped in this outage
        self.dropped_total = 0  # since start, for /metrics

    def failed(self) -> float:
        """An attempt failed: the wait before the next."""
        self.failures += 1
        if self.started is None:
            self.started = time.monotonic()
        return min(RETRY_MAX_SECONDS, RETRY_INITIAL_SECONDS * 2 ** (self.failures - 1))

    def drop(self, rows: int = 1) -> None:
        """Rows past the writer's bound, not kept."""
        if self.started is None:  # a database that is up but slower than the rows come is an outage too
            self.started = time.monotonic()
        self.dropped += rows
        self.dropped_total += rows

    def wrote(self, caught_up: bool) -> None:
        """A batch was written; `caught_up`: no row waits any more, which ends the outage."""
        self.failures = 0
        if caught_up:
            self.ended("the database took every row held")

    def ended(self, how: str) -> None:
        """The outage is over (or the service stops): one warning line if rows were dropped."""
        if self.dropped:
            lasted = time.monotonic() - (self.started or time.monotonic())
            logger.warning(
                "%s: %s, %.0f s after the first failure; %d rows were dropped meanwhile, past the rows held in memory",
                self.label,
                how,
                lasted,
                self.dropped,
            )
        self.failures, self.started, self.dropped = 0, None, 0
