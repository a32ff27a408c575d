"""statistics count each log row once: a counted_at mark on executions and searches

Rows at or before the old cursor position (finished_at / created_at, id) were counted already and get the
mark; the rest, late rows included, are counted by the next refresh.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 11:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None

UNCOUNTED = sa.text('counted_at IS NULL')


def _mark_consumed(table: str, at_column: str, cursor: str) -> None:
    """Mark the rows the position cursor had consumed."""
    bind = op.get_bind()
    position = bind.execute(
        sa.text('SELECT last_started_at, last_execution_id FROM stats_cursor WHERE name = :name'), {'name': cursor}
    ).first()
    if position is None or position[0] is None:
        return
    bind.execute(
        sa.text(
            f'UPDATE {table} SET counted_at = :now WHERE counted_at IS NULL AND '
            f'({at_column} < :at OR ({at_column} = :at AND id <= :id))'
        ),
        # The stored values go back as they came (SQLite keeps text): the mark is the cursor's time.
        {'now': position[0], 'at': position[0], 'id': position[1] or ''},
    )


def upgrade() -> None:
    op.add_column('executions', sa.Column('counted_at', sa.DateTime(timezone=True), nullable=True))
    op.add_column('searches', sa.Column('counted_at', sa.DateTime(timezone=True), nullable=True))
    _mark_consumed('executions', 'finished_at', 'executions')
    _mark_consumed('searches', 'created_at', 'searches')
    op.create_index('ix_executions_uncounted', 'executions', ['finished_at', 'id'], unique=False,
                    sqlite_where=UNCOUNTED, postgresql_where=UNCOUNTED)
    op.create_index('ix_searches_uncounted', 'searches', ['created_at', 'id'], unique=False,
                    sqlite_where=UNCOUNTED, postgresql_where=UNCOUNTED)


def downgrade() -> None:
    op.drop_index('ix_searches_uncounted', table_name='searches')
    op.drop_index('ix_executions_uncounted', table_name='executions')
    with op.batch_alter_table('searches', schema=None) as batch_op:
        batch_op.drop_column('counted_at')
    with op.batch_alter_table('executions', schema=None) as batch_op:
        batch_op.drop_column('counted_at')
