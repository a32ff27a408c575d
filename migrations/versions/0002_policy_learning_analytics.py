"""policy, learning and analytics: decayed outcomes, search statistics, approval arguments, log indexes

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 04:30:00
"""

from alembic import op
import sqlalchemy as sa


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


def downgrade() -> None:
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
