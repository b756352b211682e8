"""Expand: exclusion calendars (issue 38 item 2, ADR 0025): `calendar`, its `calendar_date` rows
and `task_calendar`, which attaches calendars to tasks.

Revision ID: 0036
Revises: 0035
Create Date: 2026-12-07

- `calendar`: a named set of excluded local dates (`name` unique), made from dates and ranges
  (`source_kind` 'dates') or an iCalendar file ('ics'); `first_day`/`last_day` the span its
  dates cover (for an iCalendar file, the horizon its events were expanded over);
  `created_at`/`updated_at` by the database clock.
- `calendar_date`: one row per excluded local date (primary key (calendar_id, day), the range
  the dispatcher reads); deleted with its calendar.
- `task_calendar`: a task's calendars. `ON DELETE CASCADE` on the task (a purged task takes its
  links with it), `ON DELETE RESTRICT` on the calendar: a calendar a task names is never deleted
  from under it (`calendars delete` refuses first, naming the tasks).
- No CHECK constrains `occurrence.reason` (free text, see `occurrence_reason_check`): the new
  reason `excluded` needs no change there; an older build reads such a row as any skipped row
  and counts it under `other` in its metrics.

Older builds never read these tables: they would run the firings a calendar excludes, so a task
is refused calendars while an instance of a build before this revision is registered
(control.NEW_FIELDS, ADR 0010). The downgrade drops the three tables.
"""

from alembic import op

revision = "0036"
down_revision = "0035"
branch_labels = None
depends_on = None
phase = "expand"

SOURCE_KINDS = "'dates', 'ics'"


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute(
        f"""
        CREATE TABLE calendar (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            name text NOT NULL,
            source_kind text NOT NULL,
            first_day date,
            last_day date,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT calendar_name_key UNIQUE (name),
            CONSTRAINT calendar_source_kind_check CHECK (source_kind IN ({SOURCE_KINDS})),
            CONSTRAINT calendar_span_check CHECK (first_day IS NULL OR last_day >= first_day)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE calendar_date (
            calendar_id bigint NOT NULL REFERENCES calendar (id) ON DELETE CASCADE,
            day date NOT NULL,
            PRIMARY KEY (calendar_id, day)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE task_calendar (
            task_id bigint NOT NULL REFERENCES task (id) ON DELETE CASCADE,
            calendar_id bigint NOT NULL REFERENCES calendar (id) ON DELETE RESTRICT,
            PRIMARY KEY (task_id, calendar_id)
        )
        """
    )
    # `calendars delete` finds the tasks naming a calendar; the RESTRICT check reads it too.
    # Built CONCURRENTLY in an autocommit block, as every index (the table is new and empty).
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        op.execute(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS task_calendar_calendar_idx"
            " ON task_calendar (calendar_id)"
        )
        op.execute("RESET lock_timeout")


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute("DROP TABLE IF EXISTS task_calendar")
    op.execute("DROP TABLE IF EXISTS calendar_date")
    op.execute("DROP TABLE IF EXISTS calendar")
