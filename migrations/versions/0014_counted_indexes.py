"""the usage signal reads the log rows counted since its mark

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07 19:30:00

The usage signal read the successful calls in `finished_at` order past an in-memory mark: a call whose search row
was written late, or a call replayed from a spill file after newer ones were read, was never learned by a replica
that kept running. It now reads each pair of a call and its search when the second of them is counted, by
`counted_at`, which these indexes serve.
"""

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_executions_counted", "executions", ["counted_at", "id"])
    op.create_index("ix_searches_counted", "searches", ["counted_at"])


def downgrade() -> None:
    op.drop_index("ix_searches_counted", table_name="searches")
    op.drop_index("ix_executions_counted", table_name="executions")
