-- sd_claim_launch_v6: the claim. Picks the queued occurrences that may start now, moves each
-- straight to running with its run, and returns what the launcher hands the job, in one call.
--
-- Called by the named queries `occurrence_claim_launch` and
-- `occurrence_claim_launch_after_successes` (sql/occurrence.sql), each a whole transaction sent
-- in one round trip (`database.one_trip`), so the fleet budget's lock is held for the server's
-- work alone, never across a round trip. Its statements are planned once per server process (a
-- simple query's are parsed and planned on every call). The function:
-- 1. Plans without sequential or bitmap scans, sorts or JIT (its SET clauses), so the plan does
--    not depend on fresh statistics (a queue that grew since the last ANALYZE, or since the
--    function first planned on an empty table, was otherwise read and sorted whole by every
--    claim: the ordered walk of occurrence_queue_idx is the only plan left), and without hash or
--    merge joins (statistics of a large backlog made the launch read every occurrence's primary
--    key): the rows it claims are updated by key.
-- 2. Takes the fleet budget's advisory lock `p_key` (transaction-scoped: safe behind PgBouncer).
-- 3. In the next statement, so its snapshot sees every claim committed before the lock: the free
--    slots, least(`p_slots`, the budget minus the occurrences executing, counted on
--    occurrence_executing_idx); up to that many queued occurrences that may start now, fewest
--    attempts first, then oldest; each moves straight to running (token raised, attempt
--    counted) and gets its run, leased on the database clock until now + ttl (takeover after
--    that + grace), naming this build; returned with the occurrence's idempotency key (the
--    legacy `scheduler-daemon-occurrence-{id}` when none is stored), the run's uuid, the task's
--    `in_process` (which picks the executor), the spread start (the nominal time plus the
--    `--spread` offset) and the arguments of a manual trigger (`args`). No claim is ever
--    committed `launching`, so none can expire unlaunched, and the run exists before any job
--    starts (KNOWN-FAILURES 7).
-- Exclusion looks at who is executing, not at logical time: never one whose concurrency key (or
-- whose `queue` task) has any launching or running occurrence, whatever its age, nor one with an
-- older queued occurrence of that key or task (FIFO among the waiting); never a `replace`
-- occurrence while one of its task is launching or running (a predecessor asked to stop).
-- Claims are serialized by the budget lock, so occurrence_key_executing_key never fires.
-- Older builds (ADR 0029): an occurrence marked `needs_build` with a revision absent from
-- `p_known` (the revisions of the calling build's chain) is never claimed; it is never even read,
-- since the queue index holds only unmarked rows and the marked ones are found by revision.
-- Failover (issue 32): the token is greatest(token, (timeline - 1) * 2^32) + 1 over the newest
-- timeline in fleet_epoch, so every token after a promotion exceeds every token of a lost
-- branch; after a failover the fleet saw, an exclusive occurrence (`forbid`, `queue`, keyed)
-- waits until that sighting + the longest lease TTL + grace registered, past the trust deadline
-- of every job claimed on the lost branch.
-- Every read and write of `occurrence` asks `finished_at IS NULL`, so the planner prunes it to
-- the default partition, the hot set, where the exclusion and claim indexes are (issue 47): with
-- hundreds of dated partitions a statement that does not prune probes each one.
-- The locking select is a MATERIALIZED CTE so the planner cannot re-run it and claim more.
-- The first claim records its snapshot: `audit` asks it which older occurrences were visible.
-- Time is clock_timestamp() (read after the budget lock wait) unless a test pins `p_now`.
-- Always one row at least: `free` is the number of slots the claim could fill; a row with a
-- NULL id means nothing was claimed.
--
-- Versions: v1 (migrations 0012, 0015), v2 failover tokens and keys (0019), v3 `in_process`
-- (0020), v4 spread (0029), v5 `replace` (0031), v6 `args` (0034), then `p_known` (issue 45).
-- This file is the live text (ADR 0028): `migrate` re-creates the function when it changes.

-- The signature before `p_known` (nothing released had it: ADR 0027 point 3).
-- squawk-ignore ban-drop-function
DROP FUNCTION IF EXISTS sd_claim_launch_v6(bigint, integer, text, interval, interval, text,
    timestamptz);

CREATE OR REPLACE FUNCTION sd_claim_launch_v6(
    p_key bigint, p_slots integer, p_owner text, p_ttl interval, p_grace interval,
    p_build_revision text, p_known text[], p_now timestamptz)
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
               WHERE finished_at IS NULL AND status IN ('launching', 'running'))))::integer AS n
    ), picked AS MATERIALIZED (
        -- Two lanes (ADR 0029), the same test in each but for the row's mark and the order of
        -- its index (its comments in the second; tests/unit/test_claim_lanes.py holds them
        -- equal): first the occurrences marked with a revision this build knows, in the order
        -- of occurrence_queue_marked_idx (empty outside a rolling upgrade), then the unmarked
        -- ones (occurrence_queue_idx, which holds no marked row), so a build never reads a row
        -- marked with a revision it does not know.
        SELECT id FROM (
            SELECT o.id FROM occurrence o
            WHERE o.finished_at IS NULL AND o.status = 'queued'
              AND o.needs_build IS NOT NULL AND o.needs_build = ANY(p_known)
              AND o.not_before <= coalesce(p_now, clock_timestamp())
              AND o.attempts < 1000000000 AND o.lease_token < 4611686018427387903
              AND (v_exclusive_from IS NULL
                   OR coalesce(p_now, clock_timestamp()) >= v_exclusive_from
                   OR (o.overlap = 'allow' AND o.concurrency_key IS NULL))
              AND (o.concurrency_key IS NULL OR NOT EXISTS (
                    SELECT 1 FROM occurrence other
                    WHERE other.finished_at IS NULL AND other.concurrency_key = o.concurrency_key
                      AND other.status IN ('queued', 'launching', 'running')
                      AND (other.status <> 'queued'
                           OR (other.scheduled_for, other.id) < (o.scheduled_for, o.id))))
              AND (o.overlap <> 'queue' OR NOT EXISTS (
                    SELECT 1 FROM occurrence other
                    WHERE other.finished_at IS NULL AND other.task_id = o.task_id
                      AND other.status IN ('queued', 'launching', 'running')
                      AND (other.status <> 'queued' OR other.occurrence_seq < o.occurrence_seq)))
              AND (o.overlap <> 'replace' OR NOT EXISTS (
                    SELECT 1 FROM occurrence other
                    WHERE other.finished_at IS NULL AND other.task_id = o.task_id AND other.status IN ('launching', 'running')))
            ORDER BY o.needs_build, o.attempts, o.scheduled_for, o.id
            LIMIT (SELECT n FROM free)
            FOR UPDATE SKIP LOCKED) marked
        UNION ALL
        SELECT id FROM (
            SELECT o.id FROM occurrence o
            WHERE o.finished_at IS NULL AND o.status = 'queued'
              AND o.needs_build IS NULL
              AND o.not_before <= coalesce(p_now, clock_timestamp())
              -- Within the bounds after this claim's `+ 1` (occurrence_attempts_check,
              -- occurrence_lease_token_check): a row written at a bound by hand is passed over
              -- rather than failing every claim of the fleet (issue 44).
              AND o.attempts < 1000000000 AND o.lease_token < 4611686018427387903
              AND (v_exclusive_from IS NULL
                   OR coalesce(p_now, clock_timestamp()) >= v_exclusive_from
                   OR (o.overlap = 'allow' AND o.concurrency_key IS NULL))
              AND (o.concurrency_key IS NULL OR NOT EXISTS (
                    SELECT 1 FROM occurrence other
                    WHERE other.finished_at IS NULL AND other.concurrency_key = o.concurrency_key
                      AND other.status IN ('queued', 'launching', 'running')
                      AND (other.status <> 'queued'
                           OR (other.scheduled_for, other.id) < (o.scheduled_for, o.id))))
              AND (o.overlap <> 'queue' OR NOT EXISTS (
                    SELECT 1 FROM occurrence other
                    WHERE other.finished_at IS NULL AND other.task_id = o.task_id
                      AND other.status IN ('queued', 'launching', 'running')
                      AND (other.status <> 'queued' OR other.occurrence_seq < o.occurrence_seq)))
              -- A `replace` firing waits until its predecessor's job is gone (0031).
              AND (o.overlap <> 'replace' OR NOT EXISTS (
                    SELECT 1 FROM occurrence other
                    WHERE other.finished_at IS NULL AND other.task_id = o.task_id AND other.status IN ('launching', 'running')))
            ORDER BY o.attempts, o.scheduled_for, o.id
            LIMIT (SELECT n FROM free)
            FOR UPDATE SKIP LOCKED) unmarked
        LIMIT (SELECT n FROM free)
    ), launched AS (
        UPDATE occurrence o SET status = 'running',
            lease_token = greatest(o.lease_token, v_floor) + 1,
            attempts = o.attempts + 1, claim_owner = p_owner, claim_expires_at = NULL,
            first_claim_snapshot = coalesce(o.first_claim_snapshot, pg_current_snapshot()),
            updated_at = coalesce(p_now, clock_timestamp())
        FROM picked WHERE o.finished_at IS NULL AND o.id = picked.id
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
$function$;
