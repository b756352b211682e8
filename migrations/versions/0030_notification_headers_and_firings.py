"""Expand: notify headers' `${VAR}` templates, and `deadline` notifications keyed by their firing,
judged through a fleet-wide mark, so a firing with no occurrence row yet owes one too.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-08

Issue 35 item 1, ADR 0016 ("Deadlines of firings not recorded yet"):

- `task.notify_header_refs` (jsonb, nullable): the `${SCHEDULER_SECRET_*}` template each value
  of `task.notify_headers` (a name → value object) was resolved from by `tasks apply`, so that
  `tasks export` writes the reference, not the secret: the http executor's `header_refs`.
- `notification_outbox.scheduled_for` (timestamptz, nullable) and `occurrence_id` made nullable:
  a `deadline` row of a scheduled firing carries the firing's scheduled time, its identity; the
  row of a firing not recorded yet (a due task not dispatched past its deadline) has no
  occurrence. `notification_outbox_firing_check`: a row without an occurrence is a `deadline`
  row with its scheduled time (added NOT VALID, then validated; the table's rows all have one).
- `notification_outbox_firing_deadline_key`: UNIQUE (task_id, scheduled_for) WHERE event =
  'deadline': one `deadline` row per scheduled firing, whether it was written before its
  occurrence existed or after. Builds before this one write `scheduled_for` NULL, which never
  conflicts: their `ON CONFLICT (occurrence_id, event)` meets no other arbiter.
- `notification_outbox_unrecorded_idx` (created_at) WHERE occurrence_id IS NULL: the rows the
  occurrence's cascade does not prune, oldest first, for the prune that does.
- `task_deadline_idx` (id) WHERE deadline IS NOT NULL AND deleted_at IS NULL: the live tasks with
  a deadline, which the reconcile scans read every pass, without reading the task table.
- `deadline_mark`: one row, `judged_through`, the instant up to which every firing's deadline
  was judged by a completed scan (seeded with now(): the scan before this build looked one hour
  back). A fleet down for longer than an hour picks up from it.

Nothing here is read by older builds but `occurrence_id` (a row without one reads as NULL in
their deliverer's log fields only). The downgrade drops what this adds, and the outbox rows
without an occurrence with it (`occurrence_id` is NOT NULL again).
"""

from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None
phase = "expand"

INDEXES = {
    "notification_outbox_firing_deadline_key": "UNIQUE INDEX CONCURRENTLY IF NOT EXISTS"
    " notification_outbox_firing_deadline_key ON notification_outbox (task_id, scheduled_for)"
    " WHERE event = 'deadline'",
    "notification_outbox_unrecorded_idx": "INDEX CONCURRENTLY IF NOT EXISTS"
    " notification_outbox_unrecorded_idx ON notification_outbox (created_at)"
    " WHERE occurrence_id IS NULL",
    "task_deadline_idx": "INDEX CONCURRENTLY IF NOT EXISTS task_deadline_idx ON task (id)"
    " WHERE deadline IS NOT NULL AND deleted_at IS NULL",
}


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute("ALTER TABLE task ADD COLUMN IF NOT EXISTS notify_header_refs jsonb")
    op.execute("ALTER TABLE notification_outbox ADD COLUMN IF NOT EXISTS scheduled_for timestamptz")
    # Older builds meet a row without an occurrence only in their deliverer, which puts the id
    # in its log fields: nothing they do breaks on a NULL.
    op.execute(
        "-- squawk-ignore ban-drop-not-null\n"
        "ALTER TABLE notification_outbox ALTER COLUMN occurrence_id DROP NOT NULL"
    )
    op.execute(
        "ALTER TABLE notification_outbox ADD CONSTRAINT notification_outbox_firing_check"
        " CHECK (occurrence_id IS NOT NULL OR (event = 'deadline' AND scheduled_for IS NOT NULL))"
        " NOT VALID"
    )
    op.execute(
        """
        CREATE TABLE deadline_mark (
            id boolean NOT NULL DEFAULT true,
            judged_through timestamptz NOT NULL,
            updated_at timestamptz NOT NULL,
            CONSTRAINT deadline_mark_pkey PRIMARY KEY (id),
            CONSTRAINT deadline_mark_one_row_check CHECK (id)
        )
        """
    )
    op.execute("INSERT INTO deadline_mark (judged_through, updated_at) VALUES (now(), now())")
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        # Re-running VALIDATE is a no-op once valid: robust without a transaction.
        op.execute(
            "-- squawk-ignore prefer-robust-stmts\n"
            "ALTER TABLE notification_outbox VALIDATE CONSTRAINT notification_outbox_firing_check"
        )
        for name, definition in INDEXES.items():
            # A build interrupted by lock_timeout leaves an invalid index: drop it first.
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
            op.execute(f"CREATE {definition}")
        op.execute("RESET lock_timeout")


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        for name in INDEXES:
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        op.execute("RESET lock_timeout")
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute("DROP TABLE IF EXISTS deadline_mark")
    op.execute("DELETE FROM notification_outbox WHERE occurrence_id IS NULL")
    op.execute(
        "ALTER TABLE notification_outbox"
        " DROP CONSTRAINT IF EXISTS notification_outbox_firing_check,"
        " DROP COLUMN IF EXISTS scheduled_for, ALTER COLUMN occurrence_id SET NOT NULL"
    )
    op.execute("ALTER TABLE task DROP COLUMN IF EXISTS notify_header_refs")
