"""Expand: one backfill occurrence per firing (occurrence_task_backfill_key).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03

`tasks backfill` queues a `backfill` occurrence for each firing of a range that did not succeed;
this unique partial index makes "one backfill occurrence per (task, scheduled_for)" a database
rule, so a backfill run twice, or two at once, queues each firing once.

Old builds never insert a `backfill` occurrence (the value was already allowed by
occurrence_trigger_check since 0001), so the index cannot refuse anything they write. They read
such rows as any other occurrence: the claim, the completer and the reconciler do not look at
`trigger`, and `runs list` prints it as text.

Safe DDL (docs/upgrading.md): the index is built CONCURRENTLY under lock_timeout.
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None
phase = "expand"


def upgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        op.execute("SET statement_timeout = 0")  # the index build scans the table
        # A build interrupted by lock_timeout leaves an invalid index: drop it before retrying.
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS occurrence_task_backfill_key")
        op.execute(
            "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS occurrence_task_backfill_key "
            "ON occurrence (task_id, scheduled_for) WHERE trigger = 'backfill'"
        )
        op.execute("RESET statement_timeout")
        op.execute("RESET lock_timeout")


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS occurrence_task_backfill_key")
        op.execute("RESET lock_timeout")
