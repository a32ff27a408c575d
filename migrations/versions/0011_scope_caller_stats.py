"""learning capped per caller: each caller's calls of a tool in its scope, and the part its scope counts for others

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06 20:10:00

`scope_tool_stats`' decayed values become what the scope counts for every caller (each caller's part capped,
usage/shares.py); the values learned before this revision stay in them as they were and decay away (14-day
half-life): they cannot be told apart by caller.
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scope_caller_tool_stats",
        sa.Column("scope", sa.String(length=512), nullable=False),
        sa.Column("caller", sa.String(length=128), nullable=False),
        sa.Column("tool", sa.String(length=64), nullable=False),
        sa.Column("decayed_calls", sa.Float(), nullable=False),
        sa.Column("decayed_successes", sa.Float(), nullable=False),
        sa.Column("decayed_failures", sa.Float(), nullable=False),
        sa.Column("shared_calls", sa.Float(), nullable=False),
        sa.Column("shared_successes", sa.Float(), nullable=False),
        sa.Column("shared_failures", sa.Float(), nullable=False),
        sa.Column("last_called_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("scope", "caller", "tool", name=op.f("pk_scope_caller_tool_stats")),
    )


def downgrade() -> None:
    op.drop_table("scope_caller_tool_stats")
