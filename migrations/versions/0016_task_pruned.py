"""Expand: task_pruned, the newest scheduled firing the pruner deleted, per task.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07

`audit`'s `firing_missing` took the shortest retention in force (the fleet's or any task's) as
the start of the window it checks, for every task (issue 29). Pruned firings came back as
missing once a short retention was lengthened (exit 1 that never cleared), and one task's
one-minute retention left every other task checked over one minute only. The prune statement
(`retention_prune`) now records, in the statement that deletes, the newest scheduled firing it
deleted of each task (`pruned_through`, the end of a summary row's range; only raised, never
lowered), and `audit` owes each task's firings only after the later of its own retention cutoff
and that mark.

A table of its own, not a column of task: the prune holds the rows it deletes (occurrence, run),
and a write to task after them would break the lock order (task, then occurrence, then run) and
wait on the task locks of the dispatcher and the completer. For the same reason no foreign key
to task (its check takes a KEY SHARE lock on the task row, which every `FOR UPDATE` of the task
holds off); task rows are never deleted (a deleted task is a tombstone), so none is orphaned.

Old builds never read or write it: their prune deletes as before without a mark, and `audit`
falls back, for what they pruned, on the task's retention as it is now (a retention lengthened
after such a prune still shows the firings they deleted as missing, as before). The downgrade
drops the table and with it the marks: after a downgrade and a new upgrade, firings pruned
before it are only covered by the retention in force again.
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None
phase = "expand"


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute(
        """
        CREATE TABLE task_pruned (
            task_id bigint NOT NULL,
            pruned_through timestamptz NOT NULL,
            updated_at timestamptz NOT NULL,
            CONSTRAINT task_pruned_pkey PRIMARY KEY (task_id)
        )
        """
    )


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("DROP TABLE task_pruned")
