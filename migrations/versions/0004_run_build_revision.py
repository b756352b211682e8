"""Expand: record which build ran each run (run.build_revision), for rollouts.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03

During a rolling upgrade old and new builds run jobs side by side; `status` counts the executing
runs per build from this column. Builds from 0004 on write their schema head into it; builds
before it do not know it and leave it NULL, which every build reads as "a build before 0004".

Safe DDL (docs/upgrading.md): a nullable column without a default (no rewrite), a constraint
added NOT VALID and validated outside the ALTER's lock, an index built CONCURRENTLY, each under
lock_timeout so a busy table makes the step fail fast instead of queueing the daemons behind it.
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None
phase = "expand"


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute("ALTER TABLE run ADD COLUMN build_revision text")
    op.execute(
        "ALTER TABLE run ADD CONSTRAINT run_build_revision_check CHECK (build_revision IS NULL "
        "OR length(build_revision) BETWEEN 1 AND 64) NOT VALID"
    )
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        op.execute("SET statement_timeout = 0")  # validation and the index build scan the table
        # Re-running VALIDATE is a no-op once valid: robust without a transaction.
        op.execute(
            "-- squawk-ignore prefer-robust-stmts\n"
            "ALTER TABLE run VALIDATE CONSTRAINT run_build_revision_check"
        )
        # A build interrupted by lock_timeout leaves an invalid index: drop it before retrying.
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS run_build_running_idx")
        op.execute(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS run_build_running_idx ON run (build_revision) "
            "WHERE status = 'running'"
        )
        op.execute("RESET statement_timeout")
        op.execute("RESET lock_timeout")


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS run_build_running_idx")
        op.execute("RESET lock_timeout")
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("ALTER TABLE run DROP COLUMN build_revision")
