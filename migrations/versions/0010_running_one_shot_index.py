"""Expand: an index of the running one-shot tasks for the reconciler's one-shot pass.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03

`task_unfinished_one_shots` runs in every reconcile pass. Without an index it was a sequential
scan of the whole task table (31,000 buffers a pass at 1,000,000 tasks, measured by
bench/run.py section g), which made the idle loop 6x slower at 1,000,000 tasks than at 10,000.
`task_running_one_shot_idx` is partial on exactly the rows it asks for, so the pass reads what
is running, however many tasks are stored.

Only a new index, built CONCURRENTLY under lock_timeout: a build before 0010 works on this
schema as it was (it never reads it).
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None
phase = "expand"

NAME = "task_running_one_shot_idx"
DEFINITION = "task (id) WHERE schedule_kind = 'once' AND status = 'running' AND deleted_at IS NULL"


def upgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        op.execute("SET statement_timeout = 0")  # the build scans the table
        # A build interrupted by lock_timeout leaves an invalid index: drop it before retrying.
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {NAME}")
        op.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {NAME} ON {DEFINITION}")
        op.execute("RESET statement_timeout")
        op.execute("RESET lock_timeout")


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {NAME}")
        op.execute("RESET lock_timeout")
