"""tools held for review: poisoning signatures and definitions changed since an upstream first listed them

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06 02:30:00

Rows of before this revision are neither held nor trusted: the next listing of an upstream server trusts what it
lists (as a first listing does), so an upgrade holds nothing by itself.
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tools", schema=None) as batch_op:
        batch_op.add_column(sa.Column("held_reason", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("hold", sa.JSON(none_as_null=True), nullable=True))
        batch_op.add_column(sa.Column("trusted_hash", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("trusted_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("approved_hash", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tools", schema=None) as batch_op:
        for column in ("approved_hash", "trusted_at", "trusted_hash", "hold", "held_reason"):
            batch_op.drop_column(column)
