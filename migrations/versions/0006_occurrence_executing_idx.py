"""Expand: an index of the executing occurrences, for the budget count of every claim batch.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03

The launcher counts the occurrences holding a budget slot (`launching`, `running`) after taking
the budget lock, once per claim batch. The only index covering them also covers every `queued`
row, so with a deep queue the count read the whole queue under the budget lock. A partial index
on the executing rows keeps the count as small as what executes.

Safe DDL (docs/upgrading.md): an index built CONCURRENTLY under lock_timeout; nothing an old
build reads or writes changes, so old and new daemons run side by side on it.
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None
phase = "expand"


def upgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        op.execute("SET statement_timeout = 0")  # the index build scans the table
        # A build interrupted by lock_timeout leaves an invalid index: drop it before retrying.
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS occurrence_executing_idx")
        op.execute(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS occurrence_executing_idx ON occurrence (id) "
            "WHERE status IN ('launching', 'running')"
        )
        op.execute("RESET statement_timeout")
        op.execute("RESET lock_timeout")


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS occurrence_executing_idx")
        op.execute("RESET lock_timeout")
