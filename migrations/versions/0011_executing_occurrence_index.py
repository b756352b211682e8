"""Expand: an index of the executing occurrences for the fleet budget's count.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03

Every claim counts the occurrences executing fleet-wide (`occurrence_free_budget`) under the
budget lock. No index is partial on exactly `launching`/`running`, so the count was a
sequential scan of every occurrence ever kept: 3 ms a claim at 20,000 rows of history, growing
with it, and all claims of the fleet wait for it in turn (measured by bench/run.py section a and
pg_stat_statements: 63% of the server's time per job). `occurrence_executing_idx` holds only the
executing rows, at most the budget, so the count reads that many entries whatever the history.

Only a new index, built CONCURRENTLY under lock_timeout: a build before 0011 works on this
schema as it was (it never reads it).
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None
phase = "expand"

NAME = "occurrence_executing_idx"
DEFINITION = "occurrence (id) WHERE status IN ('launching', 'running')"


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
