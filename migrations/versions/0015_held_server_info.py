"""an upstream server's changed info is held for review

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07 20:45:00

A server's title, description and instructions feed its tools' ranking (its server document). An upstream that
changed them after they were first taken moved its tools up every search at once; the change is now held in
`servers.held_info` until an admin approves it, as a changed tool definition is (0010).
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("servers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("held_info", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("servers", schema=None) as batch_op:
        batch_op.drop_column("held_info")
