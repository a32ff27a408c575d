"""Migration 0012 on SQLite and PostgreSQL: the analytics errors kept before it, some under exception class
names, read afterwards in the one vocabulary of execution statuses, their counts added up."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import create_engine, text

from service.db.engine import sync_url, upgrade_database
from service.db.rollup_tables import usage_errors_daily

DAY = datetime(2026, 3, 2, tzinfo=UTC)
ROWS = [  # (tool, error, count) as the rollup wrote them before
    ("gh__create_issue", "InvalidArguments", 3),
    ("gh__create_issue", "invalid_arguments", 2),  # a row of the status already there: added to
    ("gh__create_issue", "UpstreamTimeout", 1),
    ("gh__create_issue", "tool_error", 4),
    ("fs__read", "PermissionDenied", 1),
    ("fs__read", "RateLimited", 2),
    ("fs__read", "ValueError", 5),  # any other class was an internal error
    ("fs__read", "UpstreamError", 1),
]


def test_error_classes_become_statuses(database_url: str) -> None:
    upgrade_database(database_url, "0011")
    engine = create_engine(sync_url(database_url))
    try:
        with engine.begin() as connection:
            connection.execute(
                usage_errors_daily.insert(),
                [{"day": DAY, "caller": "bob", "tool": t, "error": e, "count": n} for t, e, n in ROWS],
            )
        upgrade_database(database_url)
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT tool, error, count FROM usage_errors_daily")).all()
    finally:
        engine.dispose()
    assert sorted(tuple(r) for r in rows) == [
        ("fs__read", "denied", 3),
        ("fs__read", "internal_error", 5),
        ("fs__read", "upstream_error", 1),
        ("gh__create_issue", "invalid_arguments", 5),
        ("gh__create_issue", "timeout", 1),
        ("gh__create_issue", "tool_error", 4),
    ]
