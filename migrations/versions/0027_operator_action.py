"""Expand: `operator_action`, one row per action an operator took (issue 36), written by the CLI
and the web console alike.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-07

- `operator_action`: who (`actor`: the CLI's user@host, the console's token holder or proxy
  user), what (`action`: trigger, pause, resume, cancel, backfill), the task and occurrence it
  touched, where from (`source`: cli or console), a one-line `detail`, and when (`at`, the
  database clock). Written in the action's own transaction (ADR 0018): an action and its record
  commit or roll back together. No foreign keys: the history of a pruned occurrence or a deleted task stays.
  Older builds never read or write it. The index serves the console's newest-first lists.

The downgrade drops what this adds.
"""

from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None
phase = "expand"

ACTIONS = "'trigger', 'pause', 'resume', 'cancel', 'backfill'"


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute(
        f"""
        CREATE TABLE operator_action (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            at timestamptz NOT NULL DEFAULT clock_timestamp(),
            actor text NOT NULL,
            action text NOT NULL,
            source text NOT NULL,
            task_id bigint,
            occurrence_id bigint,
            detail text,
            CONSTRAINT operator_action_action_check CHECK (action IN ({ACTIONS})),
            CONSTRAINT operator_action_source_check CHECK (source IN ('cli', 'console'))
        )
        """
    )
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS operator_action_task_idx")
        op.execute(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS operator_action_task_idx"
            " ON operator_action (task_id, id)"
        )
        op.execute("RESET lock_timeout")


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute("DROP TABLE IF EXISTS operator_action")
