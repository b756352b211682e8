"""Contract: a running run must name its build (run_build_revision_running_check).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03

Builds before 0004 insert runs without `build_revision`; once every replica runs a build from
0004 on, `migrate --contract` tightens the rule so that `status` counts every executing run by its
build. Running runs of the old builds that are still there (taken over later) are marked
`before-0004` first. Downgrading removes the constraint and keeps the column's values (no data is
lost either way); a downgrade past 0004 drops the column and what it recorded.
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None
phase = "contract"


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute(
        "UPDATE run SET build_revision = 'before-0004' "
        "WHERE status = 'running' AND build_revision IS NULL"
    )
    op.execute(
        "ALTER TABLE run ADD CONSTRAINT run_build_revision_running_check "
        "CHECK (status <> 'running' OR build_revision IS NOT NULL) NOT VALID"
    )
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        op.execute("SET statement_timeout = 0")
        # Re-running VALIDATE is a no-op once valid: robust without a transaction.
        op.execute(
            "-- squawk-ignore prefer-robust-stmts\n"
            "ALTER TABLE run VALIDATE CONSTRAINT run_build_revision_running_check"
        )
        op.execute("RESET statement_timeout")
        op.execute("RESET lock_timeout")


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("ALTER TABLE run DROP CONSTRAINT run_build_revision_running_check")
