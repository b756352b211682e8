"""Expand: the batched success looks each run of its batch up by key (`sd_succeed_runs_v2`).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06

`sd_succeed_runs_v1` keeps the plan of its first call in a server process. A daemon makes that
call on a young fleet, when the run table holds a few rows, and the planner then takes "every
running run" for the cheapest side of the join with the batch: it walked a partial index of the
running runs (`run_occurrence_running_key`, whose entries include every run that ran since the
last vacuum) and joined the batch to all of them. That plan stays until the table is analyzed. With 1,000 runs running fleet-wide, a batched success of 10 took
6.7-7.1 ms instead of 1.1-1.6 (auto_explain, tests/integration/test_query_plans.py builds the
case). v2 does the same work in the same order, but checks the batch one run at a time, by its
keys, before the update (a LATERAL lookup with OFFSET 0, which the planner keeps inside the loop
over the batch), and asks whether a run is running as `finished_at IS NULL` (the same thing,
by `run_finished_check`), which no partial index of running runs can serve (a rewrite that
still said `status = 'running'` walked `run_build_running_idx` instead).

Only a new function, beside v1: a build before 0013 calls v1 as before.
"""

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None
phase = "expand"

SUCCEED_RUNS = r"""
CREATE OR REPLACE FUNCTION sd_succeed_runs_v2(
    p_ids bigint[], p_tokens bigint[], p_occurrence_ids bigint[], p_task_ids bigint[],
    p_exit_codes integer[], p_http_statuses integer[], p_output_tails text[], p_errors text[],
    p_owner text, p_channel text, p_wake boolean, p_now timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET jit = off SET plan_cache_mode = force_generic_plan
AS $function$
#variable_conflict use_column
BEGIN
    PERFORM 1 FROM task WHERE id = ANY(p_task_ids) ORDER BY id FOR UPDATE;
    PERFORM 1 FROM occurrence WHERE id = ANY(p_occurrence_ids) ORDER BY id FOR UPDATE;
    PERFORM 1 FROM run WHERE id = ANY(p_ids) ORDER BY id FOR UPDATE;
    IF p_wake THEN
        PERFORM pg_notify(p_channel, 'finished');
    END IF;
    RETURN QUERY
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
    ), finished AS (
        UPDATE occurrence o SET status = 'success', error = ended.error, reason = NULL,
            finished_at = coalesce(p_now, clock_timestamp()),
            updated_at = coalesce(p_now, clock_timestamp()), claim_owner = NULL
        FROM ended WHERE o.id = ended.occurrence_id
        RETURNING o.id, o.task_id, o.occurrence_seq, o.scheduled_for, ended.error
    ), newest AS (
        SELECT DISTINCT ON (task_id) * FROM finished ORDER BY task_id, occurrence_seq DESC
    ), shown AS (
        UPDATE task SET last_outcome_seq = n.occurrence_seq, last_occurrence_id = n.id,
            last_scheduled_for = n.scheduled_for, last_status = 'success',
            last_finished_at = coalesce(p_now, clock_timestamp()), last_error = n.error,
            status = CASE WHEN task.schedule_kind = 'once' AND task.status = 'running'
                               AND NOT EXISTS (
                              SELECT 1 FROM occurrence newer
                              WHERE newer.task_id = task.id
                                AND newer.occurrence_seq > n.occurrence_seq
                                AND NOT (newer.trigger = 'manual' AND newer.status = 'skipped'))
                          THEN 'completed' ELSE task.status END,
            updated_at = coalesce(p_now, clock_timestamp())
        FROM newest n WHERE task.id = n.task_id AND task.last_outcome_seq < n.occurrence_seq
        RETURNING task.id
    )
    SELECT ended.id FROM ended;
END
$function$
"""

SIGNATURE = (
    "sd_succeed_runs_v2(bigint[], bigint[], bigint[], bigint[], integer[], integer[], text[],"
    " text[], text, text, boolean, timestamptz)"
)


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute(SUCCEED_RUNS)


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute(f"DROP FUNCTION IF EXISTS {SIGNATURE}")
