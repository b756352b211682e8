"""Expand: history retention (task.history_retention, prune indexes) and task.source.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03

The reconciler prunes terminal occurrences (and their runs) older than the retention: the fleet
setting `history_retention`, or a task's own `history_retention`. `occurrence_finished_idx`
serves the prune's keyset scan oldest first, `task_retention_idx` the smallest override and
`task_deleted_idx` the deleted tasks whose rows go after the retention. `task.source` records
which `tasks apply` file defined a task (NULL: made by hand), so `--prune` deletes only what the
same source created.

Old builds never write the columns (NULL: the fleet retention; made by hand) and read task rows
by column name, so they ignore them; they do not prune. Safe DDL (docs/upgrading.md): nullable
columns without defaults, a constraint NOT VALID then VALIDATE, indexes CONCURRENTLY, each under
lock_timeout.
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None
phase = "expand"

INDEXES = (
    ("occurrence_finished_idx", "occurrence (finished_at, id) WHERE finished_at IS NOT NULL"),
    ("task_retention_idx", "task (history_retention) WHERE history_retention IS NOT NULL"),
    ("task_deleted_idx", "task (deleted_at) WHERE deleted_at IS NOT NULL"),
)


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute("ALTER TABLE task ADD COLUMN history_retention interval")
    op.execute("ALTER TABLE task ADD COLUMN source text")
    op.execute(
        "ALTER TABLE task ADD CONSTRAINT task_history_retention_check CHECK "
        "(history_retention IS NULL OR history_retention > interval '0') NOT VALID"
    )
    op.execute(
        "ALTER TABLE task ADD CONSTRAINT task_source_check CHECK "
        "(source IS NULL OR length(source) BETWEEN 1 AND 500) NOT VALID"
    )
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        op.execute("SET statement_timeout = 0")  # validation and the index builds scan tables
        # Re-running VALIDATE is a no-op once valid: robust without a transaction.
        op.execute(
            "-- squawk-ignore prefer-robust-stmts\n"
            "ALTER TABLE task VALIDATE CONSTRAINT task_history_retention_check"
        )
        op.execute(
            "-- squawk-ignore prefer-robust-stmts\n"
            "ALTER TABLE task VALIDATE CONSTRAINT task_source_check"
        )
        for name, definition in INDEXES:
            # A build interrupted by lock_timeout leaves an invalid index: drop it first.
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
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("ALTER TABLE task DROP COLUMN source")
    op.execute("ALTER TABLE task DROP COLUMN history_retention")
