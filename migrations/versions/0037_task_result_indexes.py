"""Expand: two partial indexes so that the per-task gauges read a bounded part of a task's history:
its newest success in one index probe, its failures since then up to a cap.

Revision ID: 0037
Revises: 0036
Create Date: 2026-12-07

The per-task sample (`task_metrics_sample`, ADR 0013; every replica, at most every 15 s) found a
task's newest success by walking `occurrence_task_outcome_idx` backwards until one, and counted
the failures since it over the same range. A task whose kept history holds no success (a
per-second task failing through its 30-day retention: 2.6 M rows) was walked whole, twice, on
every sample of every replica (ADR 0026):

- `occurrence_task_success_idx`: (task_id, occurrence_seq) WHERE status = 'success': a task's
  newest success is one backward probe, whatever came after it.
- `occurrence_task_failure_idx`: (task_id, occurrence_seq) WHERE status IN ('failed',
  'timeout', 'interrupted'): the failures after a sequence number are one range of failures
  only (a cancelled or expired outcome, which neither counts nor resets the gauge, is not in
  it), read from the index alone and stopped at the gauge's cap.

A finished occurrence enters at most one of them (one index entry more per outcome). Both are
built CONCURRENTLY (as 0024); older builds never read them and keep working. The downgrade drops
them.
"""

from alembic import op

revision = "0037"
down_revision = "0036"
branch_labels = None
depends_on = None
phase = "expand"

INDEXES = {
    "occurrence_task_success_idx": "occurrence (task_id, occurrence_seq) WHERE status = 'success'",
    "occurrence_task_failure_idx": "occurrence (task_id, occurrence_seq)"
    " WHERE status IN ('failed', 'timeout', 'interrupted')",
}


def upgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        op.execute("SET statement_timeout = 0")  # each build scans the table
        for name, definition in INDEXES.items():
            # A build interrupted by lock_timeout leaves an invalid index: drop it first.
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
            op.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {definition}")
        op.execute("RESET statement_timeout")
        op.execute("RESET lock_timeout")


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        for name in INDEXES:
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        op.execute("RESET lock_timeout")
