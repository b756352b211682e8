"""Expand: what a job is handed never repeats across a failover; exclusive claims wait after one.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06

A failover that lost commits handed 23-36 idempotency keys to two different firings, reran
70-82 firings with token 1 (not higher), and let two `forbid` jobs overlap (issue 32): ids,
tokens and keys came from sequences and counters that a lost commit hands out again, and a job
claimed on the lost branch ran on while its firing was claimed again on the new primary.

- `task.uuid`: made when a task is created (a default), filled in batches for existing tasks.
- `occurrence.idempotency_key`: stored when the occurrence is created, never changed between
  its attempts (`sd_occurrence_key_v1`): `scheduler-daemon:{task uuid}:{trigger}:{scheduled
  time, UTC ISO}` for a scheduled or backfill firing, a random UUID for a manual one. NULL while
  an instance of an older build is registered (it computes the legacy
  `scheduler-daemon-occurrence-{id}` itself, and may run any attempt), and for what older builds
  insert: such an occurrence keeps the legacy key for every attempt, whichever build runs it.
- `run.uuid`: a random UUID per run (a default), handed to jobs as SCHEDULER_RUN_UUID: run and
  occurrence ids can repeat after a lossy failover, this cannot.
- `sd_claim_launch_v2`: v1 (0015) with two rules and two more results. Its lease token is
  greatest(the occurrence's token, (timeline - 1) * 2^32) + 1, the timeline the newest the fleet
  recorded (`fleet_epoch`): a fleet that never failed over keeps today's tokens, and every token
  after a promotion exceeds every token of the lost branch. An exclusive occurrence (`forbid`,
  `queue`, or with a concurrency key) is not claimed until the fleet's first sighting of its
  latest epoch plus the longest lease TTL + grace among registered instances (this claim's own,
  if longer): every job claimed on a lost branch is past its owner's trust deadline and stopped
  first. It returns the occurrence's key (the legacy one when none is stored) and the run's uuid.

Older builds keep calling v1, which is unchanged and marked retired (the closing contract step
of the release drops it), and keep their own keys and tokens until they leave. The downgrade
drops what this adds.
"""

import sqlalchemy as sa
from alembic import context, op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None
phase = "expand"

CLAIM_ARGS = "bigint, integer, text, interval, interval, text, timestamptz"
RETIRED = "retired: no build at this schema calls it; the closing contract step drops it"
BATCH = 1000  # tasks given a uuid per transaction, so no long lock on many task rows

OCCURRENCE_KEY = r"""
CREATE FUNCTION sd_occurrence_key_v1(
    p_task_id bigint, p_trigger text, p_scheduled_for timestamptz)
RETURNS text
LANGUAGE sql VOLATILE
AS $function$
    SELECT CASE
        -- An older build computes the legacy key itself and may run any attempt.
        WHEN EXISTS (SELECT FROM instance WHERE schema_revision < '0019') THEN NULL
        WHEN p_trigger = 'manual' THEN gen_random_uuid()::text
        ELSE (SELECT 'scheduler-daemon:' || t.uuid || ':' || p_trigger || ':'
                  || to_char(p_scheduled_for AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
                  || CASE WHEN date_trunc('second', p_scheduled_for) = p_scheduled_for THEN ''
                          ELSE to_char(p_scheduled_for AT TIME ZONE 'UTC', '.US') END
                  || 'Z'
              FROM task t WHERE t.id = p_task_id)
    END
$function$
"""

CLAIM_LAUNCH_V2 = r"""
CREATE FUNCTION sd_claim_launch_v2(
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
    # A volatile default on ADD COLUMN would rewrite the table: the column first, then the
    # default, which only rows inserted from now on take.
    op.execute("ALTER TABLE task ADD COLUMN uuid uuid")
    op.execute("ALTER TABLE task ALTER COLUMN uuid SET DEFAULT gen_random_uuid()")
    op.execute("ALTER TABLE run ADD COLUMN uuid uuid")
    op.execute("ALTER TABLE run ALTER COLUMN uuid SET DEFAULT gen_random_uuid()")
    op.execute("ALTER TABLE occurrence ADD COLUMN idempotency_key text")
    op.execute(OCCURRENCE_KEY)
    op.execute(CLAIM_LAUNCH_V2)
    op.execute(f"COMMENT ON FUNCTION sd_claim_launch_v1({CLAIM_ARGS}) IS '{RETIRED}'")
    fill = (
        "UPDATE task SET uuid = gen_random_uuid() WHERE id IN ("
        " SELECT id FROM task WHERE uuid IS NULL ORDER BY id LIMIT {batch} FOR UPDATE)"
    )
    if context.is_offline_mode():  # `migrate --sql`: the DDL printed, one fill of every task
        op.execute(fill.format(batch="ALL"))
        return
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        while op.get_bind().execute(sa.text(fill.format(batch=BATCH))).rowcount:
            pass
        op.execute("RESET lock_timeout")


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute(f"COMMENT ON FUNCTION sd_claim_launch_v1({CLAIM_ARGS}) IS NULL")
    op.execute(f"DROP FUNCTION sd_claim_launch_v2({CLAIM_ARGS})")
    op.execute("DROP FUNCTION sd_occurrence_key_v1(bigint, text, timestamptz)")
    op.execute("ALTER TABLE occurrence DROP COLUMN idempotency_key")
    op.execute("ALTER TABLE run DROP COLUMN uuid")
    op.execute("ALTER TABLE task DROP COLUMN uuid")
