"""Expand: two indexes for `tasks health`: a task's occurrences of a window, read from the index
alone, and the fleet's skipped and expired occurrences of a window apart.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07

`tasks health` (issue 34 item 1, ADR 0012) counts a task's occurrences scheduled in a window by
trigger, status, reason and overlap, and reads the fleet's skipped and expired ones for every
task's verdict:

- `occurrence_task_window_idx`: (task_id, scheduled_for) INCLUDE (trigger, status, reason,
  overlap, firing_count, finished_at): a window of one task is one index range, read without the
  table (an index-only scan: what the visibility map allows), so a per-second task's day is
  86,400 index entries, not 86,400 heap rows.
- `occurrence_lost_idx`: (scheduled_for, task_id) INCLUDE (status, reason, overlap,
  firing_count) WHERE status IN ('skipped', 'expired'): the fleet's lost rows of a window are
  one range, whatever the number of tasks; a descent per task into the window index cost 0.07 ms
  each, 690 ms for 10,000 tasks (ADR 0012). Only skipped and expired rows are written to it.

Both are built CONCURRENTLY (the occurrence table is the big one); old builds never read them.
The downgrade drops them.
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
    "occurrence_lost_idx": "occurrence (scheduled_for, task_id)"
    " INCLUDE (status, reason, overlap, firing_count) WHERE status IN ('skipped', 'expired')",
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
