"""servers: the info block a server gives about itself (name, title, description, instructions)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 14:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("servers") as batch:
        batch.add_column(sa.Column("info", sa.JSON(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("servers") as batch:
        batch.drop_column("info")
