"""console_sessions: the console's sign-ins (the hash of the cookie's session id, the key it acts as)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id_hash", sa.String(length=64), nullable=False),
        sa.Column("key_id", sa.String(length=36), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["key_id"], ["api_keys.id"], name=op.f("fk_console_sessions_key_id_api_keys"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id_hash", name=op.f("pk_console_sessions")),
    )
    op.create_index(op.f("ix_console_sessions_key_id"), "console_sessions", ["key_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_console_sessions_key_id"), table_name="console_sessions")
    op.drop_table("console_sessions")
