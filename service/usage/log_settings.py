"""The logs section of the settings (service/settings.py reads it as TOOLSCOUT_LOGS__...): how long the raw rows
of the search and execution logs are kept (usage/retention.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class LogSettings(BaseModel):
    """Retention of the `searches` and `executions` rows once the statistics refresh has counted them."""

    model_config = ConfigDict(extra="forbid")  # as service.settings.Section's (which imports this module)

    # Raw rows older than this go once the statistics refresh has counted them; 0 keeps them all. The analytics read
    # the rollups, which keep every counted row whole; the raw rows serve the unanswered-searches list, the console
    # funnel's successful follow-ups and the audit of calls for this long (3 x the analytics' default 30-day window).
    # Kept whatever their age: each caller's latest learning.usage_max_queries successful calls of a tool from its
    # own searches (the usage signal rebuilds its evidence from them at start) and the searches kept calls name.
    retention_days: float = Field(default=90.0, ge=0)
    prune_interval_seconds: float = Field(default=3600.0, gt=0)  # each replica prunes this often (and at start)
    # Rows deleted per transaction: one batch holds SQLite's write lock (PostgreSQL: row locks on old rows only)
    # for milliseconds (README: Retention).
    prune_batch: int = Field(default=2000, ge=1, le=5000)
    # Search rows held in memory while neither the database nor the spill file takes them (the oldest; those past
    # it are dropped and counted, toolscout_search_log_dropped): 3.3 KB each at k=10, 33 MB at the default.
    max_pending_searches: int = Field(default=10_000, ge=1)
