"""Expand: indexes for paging `runs list --status` and `tasks list` at scale.

Revision ID: 0007
Revises: 0005
Create Date: 2026-12-03

`runs list` pages by keyset, newest occurrence first: the unfiltered page walks
`run_occurrence_idx` backwards; `--status S` walks `run_status_history_idx` (status,
occurrence_id, id) backwards, so a rare status in a week of per-second history is found without
reading the rest. The occurrences that get a row of their own (queued, launching, skipped,
expired, cancelled: OWN_HISTORY_ROW) are found through `occurrence_own_row_idx`, partial on them. `tasks list` pages by name in byte order (`name COLLATE "C"`), whatever the
database's collation, so a name prefix is an index range: `task_name_c_idx`.

Only new indexes, built CONCURRENTLY under lock_timeout: a build before 0007 works on this schema
as it was (it never reads them).
"""

from alembic import op

revision = "0007"
down_revision = "0005"
branch_labels = None
depends_on = None
phase = "expand"

INDEXES = (
    ("run_status_history_idx", "run (status, occurrence_id, id)"),
    (
        "occurrence_own_row_idx",
        "occurrence (id) WHERE status IN ('queued', 'launching', 'skipped', 'expired', "
        "'cancelled')",
    ),
    ("task_name_c_idx", 'task ((name COLLATE "C")) WHERE deleted_at IS NULL'),
)


def upgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        op.execute("SET statement_timeout = 0")  # the builds scan the tables
        for name, definition in INDEXES:
            # A build interrupted by lock_timeout leaves an invalid index: drop it before retrying.
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
            op.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {definition}")
        op.execute("RESET statement_timeout")
        op.execute("RESET lock_timeout")


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        for name, _ in INDEXES:
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        op.execute("RESET lock_timeout")
