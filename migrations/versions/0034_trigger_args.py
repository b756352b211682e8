"""Expand: `occurrence.args` (issue 38 item 3), the arguments of a manual trigger, and
`sd_claim_launch_v6`, which hands them to the job.

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-07

- `occurrence.args` (jsonb, NULL: none given): written once by `tasks trigger --arg/--args-json`
  with the occurrence, never changed, so every retry of the occurrence gets the same arguments.
  `occurrence_args_check`: a JSON object of at most 128 KiB as jsonb text (a backstop: the
  client's limit is 64 KiB of compact JSON), added NOT VALID
  then VALIDATEd outside the transaction (no existing row has args).
- `sd_claim_launch_v6`: v5 (0031), its whole text, returning `args` too.

Older builds keep calling v5, unchanged and marked retired. They would run a triggered
occurrence without its arguments: a trigger with arguments is refused while an instance of a
build before this revision is registered (ADR 0010, ADR 0024).
"""

from alembic import op

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None
phase = "expand"

CLAIM_ARGS = "bigint, integer, text, interval, interval, text, timestamptz"
RETIRED = "retired: no build at this schema calls it; the closing contract step drops it"
CHECK = "occurrence_args_check"
# A backstop: the client holds the arguments to 64 KiB of compact JSON (domain/limit.py), and
# jsonb's text form adds a space after each `:` and `,`, so the database allows twice that.
MAX_ARGS_TEXT_BYTES = 2 * 65536

CLAIM_LAUNCH_V6 = r"""
CREATE FUNCTION sd_claim_launch_v6(
    p_key bigint, p_slots integer, p_owner text, p_ttl interval, p_grace interval,
    p_build_revision text, p_now timestamptz)
RETURNS TABLE (free integer, id bigint, task_id bigint, occurrence_seq bigint,
    scheduled_for timestamptz, lease_token bigint, task_name text, executor text, payload jsonb,
    run_timeout interval, run_id bigint, attempt integer, started_at timestamptz,
    idempotency_key text, run_uuid uuid, in_process boolean, spread_start timestamptz,
    args jsonb)
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
          -- A `replace` firing waits until its predecessor's job is gone (0031).
          AND (o.overlap <> 'replace' OR NOT EXISTS (
                SELECT 1 FROM occurrence other
                WHERE other.task_id = o.task_id AND other.status IN ('launching', 'running')))
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
            coalesce(o.idempotency_key, 'scheduler-daemon-occurrence-' || o.id) AS key,
            o.scheduled_for + coalesce(o.spread_offset, interval '0') AS spread_start, o.args
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
        r.id, r.attempt, r.started_at, l.key, r.uuid,
        CASE WHEN t.id IS NOT NULL THEN coalesce(t.in_process, false) END, l.spread_start,
        l.args
    FROM free f
    LEFT JOIN (launched l JOIN runs r ON r.occurrence_id = l.id JOIN task t ON t.id = l.task_id)
        ON true;
END
$function$
"""


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute("ALTER TABLE occurrence ADD COLUMN IF NOT EXISTS args jsonb")
    op.execute(
        f"ALTER TABLE occurrence ADD CONSTRAINT {CHECK} CHECK (args IS NULL OR "
        f"(jsonb_typeof(args) = 'object' AND octet_length(args::text) <= {MAX_ARGS_TEXT_BYTES})) "
        "NOT VALID"
    )
    op.execute(CLAIM_LAUNCH_V6)
    op.execute(f"COMMENT ON FUNCTION sd_claim_launch_v5({CLAIM_ARGS}) IS '{RETIRED}'")
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        op.execute("SET statement_timeout = 0")  # validation scans the table
        op.execute(
            "-- squawk-ignore prefer-robust-stmts\n"
            f"ALTER TABLE occurrence VALIDATE CONSTRAINT {CHECK}"
        )
        op.execute("RESET statement_timeout")
        op.execute("RESET lock_timeout")


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute(f"COMMENT ON FUNCTION sd_claim_launch_v5({CLAIM_ARGS}) IS NULL")
    op.execute(f"DROP FUNCTION sd_claim_launch_v6({CLAIM_ARGS})")
    op.execute(f"ALTER TABLE occurrence DROP CONSTRAINT IF EXISTS {CHECK}")
    op.execute("ALTER TABLE occurrence DROP COLUMN IF EXISTS args")
