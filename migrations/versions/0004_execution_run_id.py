"""code mode: the run id of the script that made a call

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 12:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("run_id", sa.String(length=36), nullable=True))
        batch_op.create_index(batch_op.f("ix_executions_run_id"), ["run_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_executions_run_id"))
        batch_op.drop_column("run_id")
