"""policy, learning and analytics: decayed outcomes, search statistics, approval arguments, usage rollups

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 04:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('tool_stats', schema=None) as batch_op:
        batch_op.add_column(sa.Column('decayed_successes', sa.Float(), server_default='0', nullable=False))
        batch_op.add_column(sa.Column('decayed_failures', sa.Float(), server_default='0', nullable=False))

    with op.batch_alter_table('caller_tool_stats', schema=None) as batch_op:
        batch_op.add_column(sa.Column('decayed_successes', sa.Float(), server_default='0', nullable=False))

    with op.batch_alter_table('approvals', schema=None) as batch_op:
        batch_op.add_column(sa.Column('arguments', sa.JSON(), nullable=True))

    op.create_table('tool_search_stats',
    sa.Column('tool', sa.String(length=64), nullable=False),
    sa.Column('appearances', sa.BigInteger(), nullable=False),
    sa.Column('top1', sa.BigInteger(), nullable=False),
    sa.Column('last_returned_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('tool', name=op.f('pk_tool_search_stats'))
    )

    with op.batch_alter_table('executions', schema=None) as batch_op:
        batch_op.create_index('ix_executions_finished_at', ['finished_at'], unique=False)

    with op.batch_alter_table('searches', schema=None) as batch_op:
        batch_op.add_column(sa.Column('followed_at', sa.DateTime(timezone=True), nullable=True))

    def counter(name: str) -> sa.Column:
        return sa.Column(name, sa.BigInteger(), server_default='0', nullable=False)

    op.create_table('usage_daily',
    sa.Column('day', sa.DateTime(timezone=True), nullable=False),
    sa.Column('caller', sa.String(length=128), nullable=False),
    sa.Column('tool', sa.String(length=64), nullable=False),
    counter('calls'), counter('successes'), counter('reached'),
    sa.Column('duration_sum', sa.Float(), server_default='0', nullable=False),
    sa.Column('duration_max', sa.Float(), server_default='0', nullable=False),
    counter('input_tokens'), counter('output_tokens'), counter('from_search'),
    *[counter(f'h{i:02d}') for i in range(40)],
    sa.PrimaryKeyConstraint('day', 'caller', 'tool', name=op.f('pk_usage_daily'))
    )
    op.create_index('ix_usage_daily_caller_day', 'usage_daily', ['caller', 'day'], unique=False)

    op.create_table('usage_hourly',
    sa.Column('hour', sa.DateTime(timezone=True), nullable=False),
    sa.Column('caller', sa.String(length=128), nullable=False),
    counter('calls'), counter('successes'), counter('reached'),
    sa.Column('duration_sum', sa.Float(), server_default='0', nullable=False),
    counter('searches'), counter('empty_searches'), counter('followed_searches'),
    sa.PrimaryKeyConstraint('hour', 'caller', name=op.f('pk_usage_hourly'))
    )
    op.create_index('ix_usage_hourly_caller_hour', 'usage_hourly', ['caller', 'hour'], unique=False)

    op.create_table('usage_errors_daily',
    sa.Column('day', sa.DateTime(timezone=True), nullable=False),
    sa.Column('caller', sa.String(length=128), nullable=False),
    sa.Column('tool', sa.String(length=64), nullable=False),
    sa.Column('error', sa.String(length=128), nullable=False),
    counter('count'),
    sa.PrimaryKeyConstraint('day', 'caller', 'tool', 'error', name=op.f('pk_usage_errors_daily'))
    )

    op.create_table('tool_pairs_daily',
    sa.Column('day', sa.DateTime(timezone=True), nullable=False),
    sa.Column('caller', sa.String(length=128), nullable=False),
    sa.Column('tool_a', sa.String(length=64), nullable=False),
    sa.Column('tool_b', sa.String(length=64), nullable=False),
    counter('count'),
    sa.PrimaryKeyConstraint('day', 'caller', 'tool_a', 'tool_b', name=op.f('pk_tool_pairs_daily'))
    )

    op.create_table('caller_last_call',
    sa.Column('caller', sa.String(length=128), nullable=False),
    sa.Column('tool', sa.String(length=64), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('caller', name=op.f('pk_caller_last_call'))
    )


def downgrade() -> None:
    op.drop_table('caller_last_call')
    op.drop_table('tool_pairs_daily')
    op.drop_table('usage_errors_daily')
    op.drop_index('ix_usage_hourly_caller_hour', table_name='usage_hourly')
    op.drop_table('usage_hourly')
    op.drop_index('ix_usage_daily_caller_day', table_name='usage_daily')
    op.drop_table('usage_daily')

    with op.batch_alter_table('searches', schema=None) as batch_op:
        batch_op.drop_column('followed_at')

    with op.batch_alter_table('executions', schema=None) as batch_op:
        batch_op.drop_index('ix_executions_finished_at')

    op.drop_table('tool_search_stats')

    with op.batch_alter_table('approvals', schema=None) as batch_op:
        batch_op.drop_column('arguments')

    with op.batch_alter_table('caller_tool_stats', schema=None) as batch_op:
        batch_op.drop_column('decayed_successes')

    with op.batch_alter_table('tool_stats', schema=None) as batch_op:
        batch_op.drop_column('decayed_failures')
        batch_op.drop_column('decayed_successes')
