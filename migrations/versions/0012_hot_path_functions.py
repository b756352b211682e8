"""Expand: the claim and the batched success as functions, so their plans are made once.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04

The claim (`occurrence_claim_launch`) and the batched success (`run_succeed_many`) were sent as
simple queries of several statements, so the server parsed and planned every statement of both
on every call: perf on the backends at full load put 47% of the server's time per job in
pg_parse_query, parse analysis and pg_plan_queries, and the server is 41% of all the CPU a job
costs (docs/performance.md). A PL/pgSQL function keeps its statements' plans for the life of the
backend, and nothing is prepared on the connection, so the call still passes PgBouncer in
transaction mode. Each function does what the statements did, in the same order: a VOLATILE
function takes a fresh snapshot for each statement, so the claim still sees every claim
committed before its budget lock was granted. The claim's planner settings are the function's
own (SET clauses: they hold while it plans and runs, and only then), and its plans are generic
from the first call: none of them depends on a parameter's value.

Only new functions, named with a version: a build before 0012 works on this schema as it was
(it never calls them); a later change to one ships as a new name beside it, so every build that
shares the schema finds the function it was written for.
"""

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None
phase = "expand"

CLAIM_LAUNCH = r"""
CREATE OR REPLACE FUNCTION sd_claim_launch_v1(
    p_key bigint, p_slots integer, p_owner text, p_ttl interval, p_grace interval,
    p_build_revision text, p_now timestamptz)
RETURNS TABLE (free integer, id bigint, task_id bigint, occurrence_seq bigint,
    scheduled_for timestamptz, lease_token bigint, task_name text, executor text, payload jsonb,
    run_timeout interval, run_id bigint, attempt integer, started_at timestamptz)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off SET jit = off
SET plan_cache_mode = force_generic_plan
AS $function$
#variable_conflict use_column
BEGIN
    PERFORM pg_advisory_xact_lock(p_key);
    RETURN QUERY
    WITH free AS MATERIALIZED (
        SELECT greatest(0, least(p_slots,
            coalesce((SELECT (value::text)::int FROM fleet_setting
                      WHERE key = 'max_concurrent_runs'), 0)
            - (SELECT count(*) FROM occurrence
               WHERE status IN ('launching', 'running'))))::integer AS n
    ), picked AS MATERIALIZED (
        SELECT o.id FROM occurrence o
        WHERE o.status = 'queued' AND o.not_before <= coalesce(p_now, clock_timestamp())
          AND (o.concurrency_key IS NULL OR NOT EXISTS (
                SELECT 1 FROM occurrence other
                WHERE other.concurrency_key = o.concurrency_key
                  AND other.status IN ('queued', 'launching', 'running')
                  AND (other.status <> 'queued'
                       OR (other.scheduled_for, other.id) < (o.scheduled_for, o.id))))
          AND (o.overlap <> 'queue' OR NOT EXISTS (
                SELECT 1 FROM occurrence other
                WHERE other.task_id = o.task_id
                  AND other.status IN ('queued', 'launching', 'running')
                  AND (other.status <> 'queued' OR other.occurrence_seq < o.occurrence_seq)))
        ORDER BY o.attempts, o.scheduled_for, o.id
        LIMIT (SELECT n FROM free)
        FOR UPDATE SKIP LOCKED
    ), launched AS (
        UPDATE occurrence o SET status = 'running', lease_token = o.lease_token + 1,
            attempts = o.attempts + 1, claim_owner = p_owner, claim_expires_at = NULL,
            first_claim_snapshot = coalesce(o.first_claim_snapshot, pg_current_snapshot()),
            updated_at = coalesce(p_now, clock_timestamp())
        FROM picked WHERE o.id = picked.id
        RETURNING o.id, o.task_id, o.occurrence_seq, o.scheduled_for, o.lease_token, o.attempts
    ), runs AS (
        INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at,
            takeover_at, started_at, build_revision)
        SELECT l.id, l.attempts, p_owner, l.lease_token,
            coalesce(p_now, clock_timestamp()) + p_ttl,
            coalesce(p_now, clock_timestamp()) + p_ttl + p_grace,
            coalesce(p_now, clock_timestamp()), p_build_revision
        FROM launched l
        RETURNING id, occurrence_id, attempt, started_at
    )
    SELECT f.n, l.id, l.task_id, l.occurrence_seq, l.scheduled_for, l.lease_token,
        t.name, t.executor, t.payload, t.run_timeout, r.id, r.attempt, r.started_at
    FROM free f
    LEFT JOIN (launched l JOIN runs r ON r.occurrence_id = l.id JOIN task t ON t.id = l.task_id)
        ON true;
END
$function$
"""

SUCCEED_RUNS = r"""
CREATE OR REPLACE FUNCTION sd_succeed_runs_v1(
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
    WITH ended AS MATERIALIZED (
        UPDATE run r SET status = 'success', exit_code = f.exit_code,
            http_status = f.http_status, output_tail = f.output_tail, error = f.error,
            finished_at = coalesce(p_now, clock_timestamp()), finished_by = p_owner
        FROM unnest(p_ids, p_tokens, p_occurrence_ids, p_exit_codes, p_http_statuses,
                    p_output_tails, p_errors)
                 AS f(id, token, occurrence_id, exit_code, http_status, output_tail, error)
        JOIN occurrence o ON o.id = f.occurrence_id AND o.status = 'running'
                         AND o.lease_token = f.token
        WHERE r.id = f.id AND r.occurrence_id = f.occurrence_id AND r.lease_token = f.token
          AND r.owner = p_owner AND r.status = 'running'
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

SIGNATURES = (
    "sd_claim_launch_v1(bigint, integer, text, interval, interval, text, timestamptz)",
    "sd_succeed_runs_v1(bigint[], bigint[], bigint[], bigint[], integer[], integer[], text[],"
    " text[], text, text, boolean, timestamptz)",
)


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute(CLAIM_LAUNCH)
    op.execute(SUCCEED_RUNS)


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    for signature in SIGNATURES:
        op.execute(f"DROP FUNCTION IF EXISTS {signature}")
