"""Expand: `task.paused_until` (issue 38 item 1), the instant a pause ends by itself, and the
`scheduler` source of an operator action (the resume a reconciler carries out at that instant).

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-07

- `task.paused_until` (timestamptz, NULL: a pause an operator ends). Set by `tasks pause
  --until`, cleared by any resume and by a plain `tasks pause`. Adding a nullable column without
  a default rewrites nothing.
- `task_paused_until_idx` (paused_until) WHERE paused AND paused_until IS NOT NULL: the
  reconciler's scan for ended pauses reads only the pending ones. Built CONCURRENTLY (as 0024).
- `sd_end_pause_v1(task id, next firing, status, error)`: ends a `--until` pause whose instant has
  passed on the database clock (and only such a pause), and records it in `operator_action` as
  action `resume` by actor and source `scheduler`, in the caller's transaction. SECURITY
  DEFINER: the daemon role may not write `paused` (what runs when stays the operator's) nor
  insert into `operator_action`; this is the one change of them it may make.
- `operator_action_source_check`: 'scheduler' added (the pending resume is recorded as an
  action of actor `scheduler`, source `scheduler`). Replaced NOT VALID in one statement, then
  VALIDATEd outside the transaction, as 0031 did.

An older build never reads `paused_until`, so it would never end such a pause: `--until` is
refused while an instance of a build before this revision is registered (ADR 0010, ADR 0024).
The downgrade drops what this adds (after the rows with source 'scheduler' are gone).
"""

from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None
phase = "expand"

CHECK = "operator_action_source_check"
END_PAUSE_ARGS = "bigint, timestamptz, text, text"
END_PAUSE_V1 = r"""
CREATE FUNCTION sd_end_pause_v1(
    p_id bigint, p_next_run_at timestamptz, p_status text, p_error text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT
AS $function$
DECLARE
    v_until timestamptz;
BEGIN
    SELECT t.paused_until INTO v_until FROM task t
    WHERE t.id = p_id AND t.paused AND t.paused_until <= now() AND t.deleted_at IS NULL
    FOR UPDATE;
    IF v_until IS NULL THEN
        RETURN false;  -- resumed, paused again or deleted since: nothing to end
    END IF;
    UPDATE task SET paused = false, paused_until = NULL, next_run_at = p_next_run_at,
        status = p_status, last_error = coalesce(p_error, last_error), updated_at = now()
    WHERE id = p_id;
    INSERT INTO operator_action (actor, action, source, task_id, detail)
    VALUES ('scheduler', 'resume', 'scheduler', p_id, 'pause ended at ' || v_until);
    RETURN true;
END
$function$
"""
INDEX = "task_paused_until_idx"


def _source_check(values: str) -> None:
    op.execute(
        "-- squawk-ignore ban-drop-constraint\n"
        f"ALTER TABLE operator_action DROP CONSTRAINT IF EXISTS {CHECK}, "
        f"ADD CONSTRAINT {CHECK} CHECK (source IN ({values})) NOT VALID"
    )


def _validate() -> None:
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        op.execute("SET statement_timeout = 0")  # validation scans the table
        op.execute(
            "-- squawk-ignore prefer-robust-stmts\n"
            f"ALTER TABLE operator_action VALIDATE CONSTRAINT {CHECK}"
        )
        op.execute("RESET statement_timeout")
        op.execute("RESET lock_timeout")


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute("ALTER TABLE task ADD COLUMN IF NOT EXISTS paused_until timestamptz")
    _source_check("'cli', 'console', 'scheduler'")
    op.execute(END_PAUSE_V1)
    _validate()
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        op.execute("SET statement_timeout = 0")
        # A build interrupted by lock_timeout leaves an invalid index: drop it first.
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")
        op.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX} ON task (paused_until)"
            " WHERE paused AND paused_until IS NOT NULL"
        )
        op.execute("RESET statement_timeout")
        op.execute("RESET lock_timeout")


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")
        op.execute("RESET lock_timeout")
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute(f"DROP FUNCTION IF EXISTS sd_end_pause_v1({END_PAUSE_ARGS})")
    _source_check("'cli', 'console'")
    op.execute("ALTER TABLE task DROP COLUMN IF EXISTS paused_until")
    _validate()
