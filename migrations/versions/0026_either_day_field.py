"""Expand: `task_event.either_days`, which reading of a cron's day fields a definition was fired by.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-08

From this revision on, a cron expression that restricts both day fields fires on a day that
matches either one also when one of them holds `#`, a weekday's `L` (`L5`) or `W` (issue 38 item
4, ADR 0019): `0 0 16,18 * 3#3` fires on the 16th, the 18th and the third Wednesday. Builds before
it read such an expression as croniter does, both fields matching: the third Wednesday only when
it is the 16th or the 18th, or never. `audit` judges the history each definition was fired by
with the reading it was fired by:

- `task_event.either_days` (boolean): NULL on the rows written before this revision (croniter's
  reading), true on every row written after it (the column's default, so the history trigger
  `task_event_record`, whatever build's write fires it, needs no change).
- A `baseline` row now for each live cron task whose expression may hold one of them (`#`, `W`,
  or `L` before a digit; a superset: `WED` and `@weekly` match too, and an extra baseline owes
  the same firings), so its firings from now on are judged by the new reading and those before
  by the old one.

The revision is also the one `tasks add/update/apply` compare registered builds with before
accepting such an expression (`control.EITHER_DAYS_SINCE`): an older build would fire it the old
way. Safe DDL: a nullable column added without a default (no rewrite), then its default set (for
new rows only), under lock_timeout. The downgrade drops the column; the baseline rows stay (each
repeats its task's definition as it was).
"""

from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None
phase = "expand"


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute("ALTER TABLE task_event ADD COLUMN either_days boolean")
    op.execute("ALTER TABLE task_event ALTER COLUMN either_days SET DEFAULT true")
    op.execute(
        """
        INSERT INTO task_event (task_id, at, kind, schedule_kind, cron_expr, every, run_at,
            anchor_at, timezone, dst_gap, dst_overlap, active)
        SELECT id, now(), 'baseline', schedule_kind, cron_expr, every, run_at, anchor_at,
            timezone, dst_gap, dst_overlap, NOT paused AND parked_at IS NULL AND deleted_at IS NULL
        FROM task
        WHERE schedule_kind = 'cron' AND deleted_at IS NULL AND cron_expr ~ '[#Ww]|[Ll][0-7]'
        ORDER BY id
        """
    )


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute("ALTER TABLE task_event DROP COLUMN either_days")
