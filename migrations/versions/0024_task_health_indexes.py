"""Expand: an index for `tasks health`: a task's occurrences of a window, read from the index
alone.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07

`tasks health` (issue 34 item 1, ADR 0012) counts a task's occurrences scheduled in a window by
trigger, status, reason and overlap, and every task's skipped and expired ones for its verdict:

- `occurrence_task_window_idx`: (task_id, scheduled_for) INCLUDE (trigger, status, reason,
  overlap, firing_count, finished_at): a window of one task is one index range, read without the
  table (an index-only scan: what the visibility map allows), so a per-second task's day is
  86,400 index entries, not 86,400 heap rows.

A partial index of the skipped and expired rows alone was tried for the fleet's verdicts and
left out: the planner chose this one anyway, and a task's descent costs the same few pages in
either (ADR 0012). Built CONCURRENTLY (the occurrence table is the big one); old builds never
read it. The downgrade drops it.
"""

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None
phase = "expand"

INDEXES = {
    "occurrence_task_window_idx": "occurrence (task_id, scheduled_for)"
    " INCLUDE (trigger, status, reason, overlap, firing_count, finished_at)",
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
