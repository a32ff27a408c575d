"""stored results: the roles a script ran with and the tools whose answers its return value holds

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07 13:15:00

A script's stored return value was readable by any key of its caller id, whatever that key's roles, and after the
tools it called were taken away from them. Results stored before this have no roles: only an admin reads them
(they expire after `execution.result_ttl_hours`).
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.add_column(sa.Column("scope", sa.String(length=512), nullable=True))
        batch_op.add_column(sa.Column("tools", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.drop_column("tools")
        batch_op.drop_column("scope")
