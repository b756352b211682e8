"""Expand: a recurring task's successes no longer lock or update its row; the newest outcome a
task shows is read from its occurrences through a new index; v3 of the success function retired.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06

Each batch of successes locked its tasks' rows to show the newest outcome there (the `last_*`
columns), and held them through the claim sent in the same transaction: 1.48 ms waited per
batch, and +6% to +23% jobs/s without it (issue 33, item 2). A recurring task's row now stays
off that path:

- `sd_succeed_runs_v4`: v3 without the row of a recurring task (`cron`, `interval`): it locks
  only the batch's one-shot task rows (task → occurrence → run, each in id order, as before),
  and shows their outcomes with `sd_show_outcomes_v1` in the same transaction (the rule keeps
  its one home, and only a batch holding a one-shot pays the call). Fenced as v3 is.
- `occurrence_task_outcome_idx`: (task_id, occurrence_seq) over the finished occurrences that
  are outcomes (every final status but `skipped`, which no writer ever showed on a recurring
  task): "the newest outcome of task X" is one backward index read. `tasks list/show`, the
  task fields of `--json`, and prune's keep rule read it (sql/task.sql, sql/retention.sql).

The other writers of final outcomes (the completer's unit and batch writes, `runs cancel`,
takeover, expiry, the finalizer) keep calling `sd_show_outcomes_v1`: they lock the task row
first anyway (they read its retry settings, or end a one-shot), so skipping the update would
save no lock wait (ADR 0011). For a recurring task the `last_*` columns are therefore stale
(they miss successes); no reader of this build uses them, and builds before 0021 keep writing
and reading them until they leave. They stay until a contract step.

Builds before 0021 keep calling v3, unchanged and marked retired (the release's closing
contract step drops it). The downgrade drops what this adds.
"""

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None
phase = "expand"

SUCCEED_ARGS = (
    "bigint[], bigint[], bigint[], bigint[], integer[], integer[], text[], text[], text, text,"
    " boolean, timestamptz"
)
RETIRED = "retired: no build at this schema calls it; the closing contract step drops it"
INDEX = "occurrence_task_outcome_idx"
INDEX_DEFINITION = (
    "occurrence (task_id, occurrence_seq) WHERE finished_at IS NOT NULL AND status <> 'skipped'"
)

SUCCEED_V4 = """
CREATE FUNCTION sd_succeed_runs_v4(
    p_ids bigint[], p_tokens bigint[], p_occurrence_ids bigint[], p_task_ids bigint[],
    p_exit_codes integer[], p_http_statuses integer[], p_output_tails text[], p_errors text[],
    p_owner text, p_channel text, p_wake boolean, p_now timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $function$
#variable_conflict use_column
DECLARE
    v_once bigint[];
    v_ids bigint[];
    v_task_ids bigint[];
    v_occurrence_ids bigint[];
    v_seqs bigint[];
    v_scheduled_fors timestamptz[];
    v_errors text[];
    v_decides boolean[];
BEGIN
    -- Only one-shot tasks' rows are locked (first, in id order): a recurring task's row is off
    -- the success path. A task made one-shot after this read is finalized by the reconciler.
    SELECT coalesce(array_agg(id), '{}') INTO v_once FROM (
        SELECT id FROM task WHERE id = ANY(p_task_ids) AND schedule_kind = 'once'
        ORDER BY id FOR UPDATE) locked;
    PERFORM 1 FROM occurrence WHERE id = ANY(p_occurrence_ids) ORDER BY id FOR UPDATE;
    PERFORM 1 FROM run WHERE id = ANY(p_ids) ORDER BY id FOR UPDATE;
    IF p_wake THEN
        PERFORM pg_notify(p_channel, 'finished');
    END IF;
    WITH mine AS MATERIALIZED (
        -- The runs of the batch still ours at their token, whose occurrence is still running
        -- at that token: each looked up by its keys inside the loop over the batch.
        SELECT f.* FROM unnest(p_ids, p_tokens, p_occurrence_ids, p_exit_codes,
                               p_http_statuses, p_output_tails, p_errors)
                 AS f(id, token, occurrence_id, exit_code, http_status, output_tail, error)
        CROSS JOIN LATERAL (
            SELECT 1 FROM run r JOIN occurrence o ON o.id = r.occurrence_id
            WHERE r.id = f.id AND r.occurrence_id = f.occurrence_id AND r.lease_token = f.token
              AND r.owner = p_owner AND r.finished_at IS NULL
              AND o.status = 'running' AND o.lease_token = f.token
            OFFSET 0) fenced
    ), ended AS MATERIALIZED (
        UPDATE run r SET status = 'success', exit_code = f.exit_code,
            http_status = f.http_status, output_tail = f.output_tail, error = f.error,
            finished_at = coalesce(p_now, clock_timestamp()), finished_by = p_owner
        FROM mine f WHERE r.id = f.id
        RETURNING r.id, r.occurrence_id, f.error
    ), finished AS MATERIALIZED (
        UPDATE occurrence o SET status = 'success', error = ended.error, reason = NULL,
            finished_at = coalesce(p_now, clock_timestamp()),
            updated_at = coalesce(p_now, clock_timestamp()), claim_owner = NULL
        FROM ended WHERE o.id = ended.occurrence_id
        RETURNING o.task_id, o.id AS occurrence_id, o.occurrence_seq AS seq, o.scheduled_for,
                  ended.error, o.trigger <> 'manual' AS decides
    )
    SELECT (SELECT array_agg(id) FROM ended), array_agg(task_id), array_agg(occurrence_id),
           array_agg(seq), array_agg(scheduled_for), array_agg(error), array_agg(decides)
    INTO v_ids, v_task_ids, v_occurrence_ids, v_seqs, v_scheduled_fors, v_errors, v_decides
    FROM finished WHERE task_id = ANY(v_once);
    IF v_task_ids IS NOT NULL THEN
        PERFORM sd_show_outcomes_v1(v_task_ids, v_occurrence_ids, v_seqs, v_scheduled_fors,
            array_fill('success'::text, ARRAY[cardinality(v_task_ids)]), v_errors,
            array_fill('completed'::text, ARRAY[cardinality(v_task_ids)]), v_decides, p_now);
    END IF;
    RETURN QUERY SELECT unnest(coalesce(v_ids, '{}'));
END
$function$
"""


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute(SUCCEED_V4)
    op.execute(f"COMMENT ON FUNCTION sd_succeed_runs_v3({SUCCEED_ARGS}) IS '{RETIRED}'")
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        op.execute("SET statement_timeout = 0")  # the build scans the table
        # A build interrupted by lock_timeout leaves an invalid index: drop it before retrying.
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")
        op.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX} ON {INDEX_DEFINITION}")
        op.execute("RESET statement_timeout")
        op.execute("RESET lock_timeout")


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")
        op.execute("RESET lock_timeout")
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute(f"COMMENT ON FUNCTION sd_succeed_runs_v3({SUCCEED_ARGS}) IS NULL")
    op.execute(f"DROP FUNCTION sd_succeed_runs_v4({SUCCEED_ARGS})")
