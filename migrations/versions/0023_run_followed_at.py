"""Expand: `run.followed_at`, when someone last followed a running run's output (`runs logs -f`).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07

While a follower keeps this within a few renewal intervals of the database's now(), the run's
owner writes the last 64 KiB of the job's output to `run.output_tail` with its renewal when it
changed, fenced on owner and token (ADR 0014); an unfollowed run costs nothing more. Builds
before 0023 neither read nor write it: their runs show their output when they finish.

Safe DDL (docs/upgrading.md): a nullable column without a default, no rewrite, under
lock_timeout. The downgrade drops it.
"""

from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None
phase = "expand"


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute("ALTER TABLE run ADD COLUMN followed_at timestamptz")


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute("ALTER TABLE run DROP COLUMN followed_at")
