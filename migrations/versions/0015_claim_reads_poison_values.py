"""Expand: the claim reads a budget or a timeout written by hand without failing.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06

A poison row is a row, not an outage (issue 28). `sd_claim_launch_v1` read the fleet budget as
`(value::text)::int`: a `max_concurrent_runs` of 2147483648, 1e30, 12.5 or a JSON string,
written by an older build or by hand with SQL, failed every claim of every daemon (and
`status`). It returned the task's `run_timeout` as it is: an interval past what Python holds
(more than 999,999,999 days) failed the claim's read after its commit, leaving runs no job
started. The claim now reads the budget as a JSON number, floored and capped to 0 .. 100,000
(the range `config set` accepts) as a bigint, anything else as no budget (0, as without the
row), and returns the timeout capped at 36,525 days (100 years: the longest duration any input
takes, `domain.limit.MAX_DURATION`). Nothing else changes: for every value it read before, it
claims the same rows and returns the same values.

The same function, replaced in place (its arguments, results and planner settings, 0014's
included, unchanged): a build before 0015 calls it as before and gains the same tolerance, so in
a mixed fleet no daemon's claim fails on the value. A `_v2` beside it would have left the old
builds failing on it until the roll ended. No CHECK constraint: `fleet_setting.value` rows that
break one may exist, and a constraint they break would fail every later `config set` of them.
The downgrade puts back the body of 0012 with the settings of 0014.
"""

from alembic import op

revision = "0015"
down_revision = "0014"
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
SET plan_cache_mode = force_generic_plan SET enable_hashjoin = off SET enable_mergejoin = off
AS $function$
#variable_conflict use_column
BEGIN
    PERFORM pg_advisory_xact_lock(p_key);
    RETURN QUERY
    WITH free AS MATERIALIZED (
        SELECT greatest(0, least(p_slots,
            -- A JSON number, floored and capped to 0 .. 100,000 as a bigint; anything else
            -- (a string, null, an array) is no budget, as without the row.
            coalesce((SELECT CASE WHEN jsonb_typeof(value) = 'number'
                                  THEN least(greatest(floor(value::numeric), 0), 100000)::bigint
                             END
                      FROM fleet_setting WHERE key = 'max_concurrent_runs'), 0)
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
        t.name, t.executor, t.payload,
        CASE WHEN t.run_timeout > interval '36525 days' THEN interval '36525 days'
             ELSE t.run_timeout END,
        r.id, r.attempt, r.started_at
    FROM free f
    LEFT JOIN (launched l JOIN runs r ON r.occurrence_id = l.id JOIN task t ON t.id = l.task_id)
        ON true;
END
$function$
"""

# The claim as revisions 0012 and 0014 left it.
PREVIOUS = r"""
CREATE OR REPLACE FUNCTION sd_claim_launch_v1(
    p_key bigint, p_slots integer, p_owner text, p_ttl interval, p_grace interval,
    p_build_revision text, p_now timestamptz)
RETURNS TABLE (free integer, id bigint, task_id bigint, occurrence_seq bigint,
    scheduled_for timestamptz, lease_token bigint, task_name text, executor text, payload jsonb,
    run_timeout interval, run_id bigint, attempt integer, started_at timestamptz)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off SET jit = off
SET plan_cache_mode = force_generic_plan SET enable_hashjoin = off SET enable_mergejoin = off
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


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute(CLAIM_LAUNCH)


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute(PREVIOUS)
