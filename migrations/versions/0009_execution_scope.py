"""learning per scope: the permission scope of each execution, and the ranking statistics per scope and tool

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05 15:30:00

Rows logged before this revision keep `scope` NULL and count in no scope: the popularity and reliability boosts
start again from the first calls after the upgrade (tool_stats and the analytics rollups keep the old ones). The
roles a past call was made with are not known: a caller may have held keys of different roles, or keys since
revoked, and a call counted in the wrong scope is the very leak this revision closes.
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("scope", sa.String(length=512), nullable=True))
    op.create_table(
        "scope_tool_stats",
        sa.Column("scope", sa.String(length=512), nullable=False),
        sa.Column("tool", sa.String(length=64), nullable=False),
        sa.Column("calls", sa.Integer(), nullable=False),
        sa.Column("successes", sa.Integer(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("decayed_calls", sa.Float(), nullable=False),
        sa.Column("decayed_successes", sa.Float(), nullable=False),
        sa.Column("decayed_failures", sa.Float(), nullable=False),
        sa.Column("latency_ms_avg", sa.Float(), nullable=False),
        sa.Column("last_called_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("scope", "tool", name=op.f("pk_scope_tool_stats")),
    )


def downgrade() -> None:
    op.drop_table("scope_tool_stats")
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.drop_column("scope")
