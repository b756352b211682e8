"""Expand: exponential backoff with full jitter (issue 37 item 2): `task.backoff_max` and the
delay each retry drew, `occurrence.retry_delay`.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07

- `task.backoff_max` (interval, nullable): with it, the delay before retry n is
  uniform(0, min(backoff_max, backoff x 2^(n-1))); NULL keeps the fixed `backoff`, which is what
  every older build does with any row.
- `occurrence.retry_delay` (interval, nullable): the delay the latest requeue of the occurrence
  waited (`not_before` minus its write), recorded so `runs show` says what was drawn. NULL where
  an older build requeued it.
Nullable columns without a default rewrite nothing; older builds never read them. A task given a
`backoff_max` is refused while a build before this revision is registered (it would retry with
the fixed delay).

The downgrade drops what this adds.
"""

from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None
phase = "expand"


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute("ALTER TABLE task ADD COLUMN IF NOT EXISTS backoff_max interval")
    op.execute("ALTER TABLE occurrence ADD COLUMN IF NOT EXISTS retry_delay interval")


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute("ALTER TABLE occurrence DROP COLUMN IF EXISTS retry_delay")
    op.execute("ALTER TABLE task DROP COLUMN IF EXISTS backoff_max")
