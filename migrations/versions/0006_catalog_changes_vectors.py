"""cluster: the catalog change sequence and the stored tool vectors

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 11:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "catalog_changes",
        sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("server_id", sa.String(length=64), nullable=True),
        sa.Column("names", sa.JSON(), nullable=False),
        sa.Column("origin", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_catalog_changes")),
    )
    op.create_table(
        "tool_vectors",
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("dimension", sa.Integer(), nullable=False),
        sa.Column("vectors", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("content_hash", "model", name=op.f("pk_tool_vectors")),
    )


def downgrade() -> None:
    op.drop_table("tool_vectors")
    op.drop_table("catalog_changes")
