"""Expand: the claims of older builds pass over in-process tasks (closes ADR 0010's window).

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07

A task is refused `in_process` while an instance of a build before 0020 is registered (ADR
0010). That covers writes, not registrations after them: an older build started once an
in-process task exists (a rollback, a forgotten replica) claimed its firings through
`sd_claim_launch_v1` (builds 0012 to 0018) or `_v2` (0019) and ran the function in a worker
process, or, for an `async def` function, not at all. Builds before 0012 claim with a statement
of their own, which no migration can change: for them the window stays open until a contract
step raises the oldest revision that may run against this schema to 0012 (ADR 0010).

Both are replaced in place, each with its whole definition (its `SET` clauses included) and one
more condition: an occurrence whose task is `in_process` is not picked. Only a build of 0020 or
later, which calls `_v3`, claims such a firing; in a fleet of older builds alone it waits, queued
(past the task's start deadline, if it has one, it expires with that reason). For every
other occurrence both claim what they claimed before and return the same values: older builds
never wrote `in_process`, so nothing they made changes. `_v3` is unchanged.

The condition reads the task's row by its key for each candidate, only in the claims of older
builds, which run only during a roll. The downgrade puts back the definitions of 0015 and 0019.
"""

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None
phase = "expand"

SKIP_IN_PROCESS = (
    "          -- An in-process task (0020) is not this build's: it would run it in a worker process.\n"
    "          AND NOT EXISTS (SELECT 1 FROM task t WHERE t.id = o.task_id AND t.in_process)\n"
)

CLAIM_LAUNCH_V1 = r"""
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
          -- An in-process task (0020) is not this build's: it would run it in a worker process.
          AND NOT EXISTS (SELECT 1 FROM task t WHERE t.id = o.task_id AND t.in_process)
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

CLAIM_LAUNCH_V2 = r"""
CREATE OR REPLACE FUNCTION sd_claim_launch_v2(
    p_key bigint, p_slots integer, p_owner text, p_ttl interval, p_grace interval,
    p_build_revision text, p_now timestamptz)
RETURNS TABLE (free integer, id bigint, task_id bigint, occurrence_seq bigint,
    scheduled_for timestamptz, lease_token bigint, task_name text, executor text, payload jsonb,
    run_timeout interval, run_id bigint, attempt integer, started_at timestamptz,
    idempotency_key text, run_uuid uuid)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off SET jit = off
SET plan_cache_mode = force_generic_plan SET enable_hashjoin = off SET enable_mergejoin = off
AS $function$
#variable_conflict use_column
DECLARE
    v_floor bigint;
    v_exclusive_from timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock(p_key);
    -- Every token after a promotion above every token of the lost branch.
    SELECT (coalesce(max(e.timeline), 1) - 1) * 4294967296 INTO v_floor FROM fleet_epoch e;
    -- After a failover the fleet saw, exclusive work waits out every lost claim's trust deadline.
    SELECT f.seen + greatest(p_ttl + p_grace,
                             (SELECT max(i.lease_ttl + i.lease_grace) FROM instance i))
    INTO v_exclusive_from
    FROM (SELECT max(e.first_seen_at) AS seen FROM fleet_epoch e
          WHERE e.first_seen_at > (SELECT min(first_seen_at) FROM fleet_epoch)) f;
    RETURN QUERY
    WITH free AS MATERIALIZED (
        SELECT greatest(0, least(p_slots,
            coalesce((SELECT CASE WHEN jsonb_typeof(value) = 'number'
                                  THEN least(greatest(floor(value::numeric), 0), 100000)::bigint
                             END
                      FROM fleet_setting WHERE key = 'max_concurrent_runs'), 0)
            - (SELECT count(*) FROM occurrence
               WHERE status IN ('launching', 'running'))))::integer AS n
    ), picked AS MATERIALIZED (
        SELECT o.id FROM occurrence o
        WHERE o.status = 'queued' AND o.not_before <= coalesce(p_now, clock_timestamp())
          -- An in-process task (0020) is not this build's: it would run it in a worker process.
          AND NOT EXISTS (SELECT 1 FROM task t WHERE t.id = o.task_id AND t.in_process)
          AND (v_exclusive_from IS NULL
               OR coalesce(p_now, clock_timestamp()) >= v_exclusive_from
               OR (o.overlap = 'allow' AND o.concurrency_key IS NULL))
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
        UPDATE occurrence o SET status = 'running',
            lease_token = greatest(o.lease_token, v_floor) + 1,
            attempts = o.attempts + 1, claim_owner = p_owner, claim_expires_at = NULL,
            first_claim_snapshot = coalesce(o.first_claim_snapshot, pg_current_snapshot()),
            updated_at = coalesce(p_now, clock_timestamp())
        FROM picked WHERE o.id = picked.id
        RETURNING o.id, o.task_id, o.occurrence_seq, o.scheduled_for, o.lease_token, o.attempts,
            coalesce(o.idempotency_key, 'scheduler-daemon-occurrence-' || o.id) AS key
    ), runs AS (
        INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at,
            takeover_at, started_at, build_revision)
        SELECT l.id, l.attempts, p_owner, l.lease_token,
            coalesce(p_now, clock_timestamp()) + p_ttl,
            coalesce(p_now, clock_timestamp()) + p_ttl + p_grace,
            coalesce(p_now, clock_timestamp()), p_build_revision
        FROM launched l
        RETURNING id, occurrence_id, attempt, started_at, uuid
    )
    SELECT f.n, l.id, l.task_id, l.occurrence_seq, l.scheduled_for, l.lease_token,
        t.name, t.executor, t.payload,
        CASE WHEN t.run_timeout > interval '36525 days' THEN interval '36525 days'
             ELSE t.run_timeout END,
        r.id, r.attempt, r.started_at, l.key, r.uuid
    FROM free f
    LEFT JOIN (launched l JOIN runs r ON r.occurrence_id = l.id JOIN task t ON t.id = l.task_id)
        ON true;
END
$function$
"""


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute(CLAIM_LAUNCH_V1)
    op.execute(CLAIM_LAUNCH_V2)


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    for definition in (CLAIM_LAUNCH_V1, CLAIM_LAUNCH_V2):
        assert definition.count(SKIP_IN_PROCESS) == 1
        op.execute(definition.replace(SKIP_IN_PROCESS, ""))
