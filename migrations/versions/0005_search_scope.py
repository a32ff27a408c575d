"""usage signal: the permission scope of each search (the caller's sorted roles)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 12:40:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("searches", schema=None) as batch_op:
        batch_op.add_column(sa.Column("scope", sa.String(length=512), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("searches", schema=None) as batch_op:
        batch_op.drop_column("scope")
