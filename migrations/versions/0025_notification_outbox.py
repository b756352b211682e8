"""Expand: notifications through an outbox (issue 35 item 1): the task's notification fields and
`notification_outbox`, one row per (occurrence, event).

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07

- `task.notify_url` (text), `task.notify_headers` (jsonb, the http executor's header shape: a
  name → value object whose values may be `{"secret": ...}` references), `task.notify_on`
  (text[], the events) and `task.deadline` (interval): all nullable, NULL is "the fleet's
  default" (`fleet_setting` keys `notify_url`, `notify_on`) or, for the deadline, none. Adding a
  nullable column without a default rewrites nothing; older builds never read them.
- `notification_outbox`: written in the transaction that records the outcome it reports
  (`outbox_enqueue`, `INSERT ... ON CONFLICT (occurrence_id, event) DO NOTHING`), so a
  notification exists exactly when its outcome does, once. `delivery_id` is the row's identity
  for receivers (every POST of the row carries it). `occurrence_id` references the occurrence
  `ON DELETE CASCADE`: the prune of any build, older ones included, deletes a firing's
  notifications with it. The partial index serves the deliverer's due scan (built CONCURRENTLY
in an autocommit block, as every index; the table is new and empty).

The downgrade drops what this adds.
"""

from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None
phase = "expand"

EVENTS = "'failure', 'timeout', 'skipped', 'expired', 'deadline'"


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute(
        "ALTER TABLE task ADD COLUMN IF NOT EXISTS notify_url text,"
        " ADD COLUMN IF NOT EXISTS notify_headers jsonb,"
        " ADD COLUMN IF NOT EXISTS notify_on text[],"
        " ADD COLUMN IF NOT EXISTS deadline interval"
    )
    op.execute(
        f"""
        CREATE TABLE notification_outbox (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            delivery_id uuid NOT NULL DEFAULT gen_random_uuid(),
            occurrence_id bigint NOT NULL REFERENCES occurrence (id) ON DELETE CASCADE,
            task_id bigint NOT NULL,
            event text NOT NULL,
            payload jsonb NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            attempts bigint NOT NULL DEFAULT 0,
            next_attempt_at timestamptz NOT NULL DEFAULT now(),
            delivered_at timestamptz,
            last_error text,
            CONSTRAINT notification_outbox_delivery_id_key UNIQUE (delivery_id),
            CONSTRAINT notification_outbox_occurrence_event_key UNIQUE (occurrence_id, event),
            CONSTRAINT notification_outbox_event_check CHECK (event IN ({EVENTS}))
        )
        """
    )
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS notification_outbox_due_idx")
        op.execute(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS notification_outbox_due_idx"
            " ON notification_outbox (next_attempt_at, id) WHERE delivered_at IS NULL"
        )
        op.execute("RESET lock_timeout")


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute("DROP TABLE IF EXISTS notification_outbox")
    op.execute(
        "ALTER TABLE task DROP COLUMN IF EXISTS notify_url, DROP COLUMN IF EXISTS notify_headers,"
        " DROP COLUMN IF EXISTS notify_on, DROP COLUMN IF EXISTS deadline"
    )
