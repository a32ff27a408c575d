"""analytics errors by execution status: the exception class names in usage_errors_daily become statuses

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07 03:30:00

The rollup named a failed call by its exception class when one was recorded (`InvalidArguments`) and by its
status otherwise (`tool_error`): two vocabularies in one column. Each row that holds a class name is added to
the row of its status (the one `status_of` gives that class; any other class was an `internal_error`) and
deleted. The class names cannot be told back apart: downgrade leaves the statuses.
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

STATUSES = (
    "tool_error",
    "invalid_arguments",
    "denied",
    "not_found",
    "timeout",
    "upstream_error",
    "cancelled",
    "internal_error",
)
# service/execution/executor.py status_of, for each class an execution could record (subclasses included).
STATUS_OF_CLASS = {
    "InvalidArguments": "invalid_arguments",
    "HiddenTool": "denied",
    "NotFound": "not_found",
    "PermissionDenied": "denied",
    "ApprovalRequired": "denied",
    "CrossSiteRequest": "denied",
    "RateLimited": "denied",
    "Unauthorized": "denied",
    "UpstreamTimeout": "timeout",
    "UpstreamError": "upstream_error",
    "CancelledError": "cancelled",
}


def upgrade() -> None:
    errors = sa.table(
        "usage_errors_daily",
        sa.column("day", sa.DateTime(timezone=True)),
        sa.column("caller", sa.String()),
        sa.column("tool", sa.String()),
        sa.column("error", sa.String()),
        sa.column("count", sa.BigInteger()),
    )
    status = sa.case(STATUS_OF_CLASS, value=errors.c.error, else_=sa.literal("internal_error"))
    is_class = errors.c.error.not_in(STATUSES)
    merged = (
        sa.select(errors.c.day, errors.c.caller, errors.c.tool, status.label("error"), sa.func.sum(errors.c.count))
        .where(is_class)
        .group_by(errors.c.day, errors.c.caller, errors.c.tool, status)
    )
    bind = op.get_bind()
    rows = bind.execute(merged).all()  # one row per day, caller, tool and status: a small table
    bind.execute(errors.delete().where(is_class))
    for day, caller, tool, error, count in rows:
        key = (errors.c.day == day) & (errors.c.caller == caller) & (errors.c.tool == tool) & (errors.c.error == error)
        added = bind.execute(errors.update().where(key).values(count=errors.c.count + count))
        if added.rowcount == 0:
            bind.execute(errors.insert().values(day=day, caller=caller, tool=tool, error=error, count=count))


def downgrade() -> None:
    pass
