-- name: occurrence_insert :one
-- Inserts an occurrence of a task whose row lock the caller holds, finished if its status is one
-- of `finished`; a scheduled or backfill firing that exists already is not inserted again (no row
-- returned): its key goes into firing_key in the same statement, and the occurrence only if the
-- key went in (guarantee 2). Every insert of an occurrence copies its task's `needs_build` (ADR
-- 0029).
WITH keyed AS (
    INSERT INTO firing_key (task_id, scheduled_for, trigger)
    SELECT %(task_id)s::bigint, %(scheduled_for)s::timestamptz, %(trigger)s::text
    WHERE %(trigger)s::text IN ('schedule', 'backfill')
    ON CONFLICT DO NOTHING
    RETURNING task_id
)
INSERT INTO occurrence (
    task_id, occurrence_seq, scheduled_for, last_scheduled_for, firing_count, trigger, overlap,
    concurrency_key, status, reason, requested_by, not_before, created_at, updated_at, finished_at,
    idempotency_key, needs_build)
SELECT %(task_id)s::bigint, %(occurrence_seq)s::bigint, %(scheduled_for)s::timestamptz,
    %(last_scheduled_for)s::timestamptz, %(firing_count)s::bigint, %(trigger)s::text,
    %(overlap)s::text, %(concurrency_key)s::text, %(status)s::text, %(reason)s::text,
    %(requested_by)s::text, %(scheduled_for)s::timestamptz, %(now)s::timestamptz,
    %(now)s::timestamptz,
    CASE WHEN %(status)s::text = ANY(%(finished)s::text[]) THEN %(now)s::timestamptz END,
    sd_occurrence_key_v1(%(task_id)s::bigint, %(trigger)s::text, %(scheduled_for)s::timestamptz),
    (SELECT needs_build FROM task WHERE id = %(task_id)s::bigint)
WHERE %(trigger)s::text NOT IN ('schedule', 'backfill') OR EXISTS (SELECT FROM keyed)
RETURNING *

-- name: occurrence_dispatch :many
-- Records the planned firings of a task whose row lock the caller holds and moves the task on,
-- in one statement: each firing takes the task's next sequence number (in plan order), one
-- recorded already is left out (no row for it: the unique scheduled firing), finished if its
-- status is one of `finished`; the task gets its next firing and, when `once_fired`, the status
-- `running` if a queued firing went in, else `cancelled`. A firing's spread offset (`--spread`,
-- NULL: none) is recorded and starts it no earlier than its nominal time plus the offset
-- (`not_before`). Each copies the task's `needs_build` (ADR 0029). A firing goes in only if its
-- key went into firing_key in the same statement (guarantee 2: a second dispatch of one instant
-- inserts nothing). Returns the occurrences inserted.
WITH firing AS (
    SELECT * FROM unnest(
        %(scheduled_fors)s::timestamptz[], %(last_scheduled_fors)s::timestamptz[],
        %(firing_counts)s::integer[], %(statuses)s::text[], %(reasons)s::text[],
        %(spread_offsets)s::interval[])
        WITH ORDINALITY AS f(scheduled_for, last_scheduled_for, firing_count, status, reason,
            spread_offset, ord)
), keyed AS (
    INSERT INTO firing_key (task_id, scheduled_for, trigger)
    SELECT %(task_id)s, f.scheduled_for, 'schedule' FROM firing f
    ON CONFLICT DO NOTHING
    RETURNING scheduled_for
), inserted AS (
    INSERT INTO occurrence (
        task_id, occurrence_seq, scheduled_for, last_scheduled_for, firing_count, trigger,
        overlap, concurrency_key, status, reason, not_before, spread_offset, created_at,
        updated_at, finished_at, idempotency_key, needs_build)
    SELECT %(task_id)s, t.occurrence_seq + f.ord, f.scheduled_for, f.last_scheduled_for,
        f.firing_count, 'schedule', %(overlap)s, %(concurrency_key)s, f.status, f.reason,
        f.scheduled_for + coalesce(f.spread_offset, interval '0'), f.spread_offset, %(now)s,
        %(now)s,
        CASE WHEN f.status = ANY(%(finished)s::text[]) THEN %(now)s::timestamptz END,
        sd_occurrence_key_v1(%(task_id)s, 'schedule', f.scheduled_for), t.needs_build
    FROM firing f
    JOIN keyed k ON k.scheduled_for = f.scheduled_for
    CROSS JOIN (SELECT occurrence_seq, needs_build FROM task WHERE id = %(task_id)s) t
    ORDER BY f.ord
    RETURNING id, status, reason, scheduled_for, not_before
), moved AS (
    UPDATE task SET
        occurrence_seq = occurrence_seq + cardinality(%(scheduled_fors)s::timestamptz[]),
        next_run_at = %(next_run_at)s,
        status = CASE
            WHEN NOT %(once_fired)s THEN task.status
            WHEN EXISTS (SELECT FROM inserted i WHERE i.status = 'queued') THEN 'running'
            ELSE 'cancelled' END,
        updated_at = %(now)s
    WHERE id = %(task_id)s
)
SELECT * FROM inserted

-- fragment: active_statuses
-- The statuses of an active occurrence, the one spelling of domain.status.ACTIVE in SQL outside
-- the schema: a statement asks `status IN` it.
('queued', 'launching', 'running')

-- name: occurrence_active_count :scalar
-- How many occurrences of a task are queued, launching or running.
SELECT count(*) FROM occurrence
WHERE task_id = %(task_id)s AND finished_at IS NULL AND status IN {{active_statuses}}

-- name: occurrence_cancel_active :many
-- Ends a locked task's queued and launching occurrences at once (raising the token fences a
-- launcher that has not started the job yet); a running one only gets a cancel request, so it
-- keeps its slot until its owner confirms the job is gone. Also how a new firing of a locked
-- `replace` task replaces its active predecessors (reason `replaced`, `requested_by` NULL keeps
-- theirs), run before the new firing is inserted: the queued one's unique index
-- (occurrence_replace_queued_key) then has room, and the claim starts the replacement only
-- after a running predecessor's job is gone (sql/functions/claim_launch.sql). Returned as
-- occurrence_lock returns them: without their arguments, which a dispatch pass must not decode.
-- An ended one moves out of the default partition: the fragment occurrence_end says why.
WITH locked AS MATERIALIZED (
    SELECT id, status FROM occurrence
    WHERE task_id = %(task_id)s AND finished_at IS NULL AND status IN {{active_statuses}}
    ORDER BY id FOR UPDATE
), requested AS (
    UPDATE occurrence SET
        cancel_requested_at = coalesce(cancel_requested_at, %(now)s::timestamptz),
        cancel_reason = coalesce(cancel_reason, %(reason)s),
        requested_by = coalesce(%(requested_by)s, requested_by), updated_at = %(now)s
    WHERE finished_at IS NULL
      AND id IN (SELECT id FROM locked WHERE status = 'running') AND status = 'running'
    RETURNING {{occurrence_locked}}
), gone AS (
    DELETE FROM occurrence o
    WHERE o.finished_at IS NULL
      AND o.id IN (SELECT id FROM locked WHERE status <> 'running') AND o.status <> 'running'
    RETURNING o
), ended AS (
    INSERT INTO occurrence OVERRIDING SYSTEM VALUE
    SELECT r.* FROM gone g CROSS JOIN LATERAL jsonb_populate_record(g.o, jsonb_build_object(
        'status', 'cancelled', 'reason', %(reason)s::text,
        'lease_token', (g.o).lease_token + 1, 'claim_owner', NULL, 'claim_expires_at', NULL,
        'finished_at', %(now)s::timestamptz, 'cancel_requested_at', NULL, 'cancel_reason', NULL,
        'requested_by', coalesce(%(requested_by)s, (g.o).requested_by),
        'updated_at', %(now)s::timestamptz)) r
    RETURNING {{occurrence_locked}}
)
SELECT * FROM requested UNION ALL SELECT * FROM ended

-- name: occurrence_get :one
-- One occurrence with its task's name, its trigger's arguments as the connected role may see
-- them (occurrence_args_shown: the reader's secret ones masked, ADR 0031).
SELECT o.*, t.name AS task_name
FROM (SELECT {{occurrence_locked}}, {{occurrence_args_shown}}
      FROM occurrence o WHERE o.id = %(id)s) o
JOIN task t ON t.id = o.task_id

-- name: occurrence_executing_count :scalar
-- Occurrences holding a slot of the fleet budget; run after the budget lock, in its own statement.
SELECT count(*) FROM occurrence WHERE finished_at IS NULL AND status IN ('launching', 'running')

-- fragment: claim_launch
-- The claim's rows with their jsonb as text (payload, args): psycopg would decode them while
-- fetching, where one value too deep for the decoder failed the whole batch after its commit
-- (issue 44); `occurrence_store.launched` decodes each row's on its own, bounded.
SELECT free, id, task_id, occurrence_seq, scheduled_for, lease_token, task_name, executor,
    payload::text AS payload, run_timeout, run_id, attempt, started_at, idempotency_key, run_uuid,
    in_process, spread_start, args::text AS args
FROM sd_claim_launch_v6(%(key)s::bigint, %(slots)s::int, %(owner)s::text,
    %(ttl)s::interval, %(grace)s::interval, %(build_revision)s::text, %(known)s::text[],
    %(now)s::timestamptz)

-- name: occurrence_claim_launch :many
-- A whole claim in one round trip and one transaction (sent after the per-transaction limits
-- as one simple query, no BEGIN or COMMIT: `database.one_trip`), so the fleet budget's lock is
-- held for the server's work alone, never across a round trip. The claim is sd_claim_launch_v6:
-- sql/functions/claim_launch.sql says what it picks, how it fences and excludes, and why it is
-- planned as it is. Always one row at least: `free` is the number of slots the claim could
-- fill; a row with a NULL id means nothing was claimed.
{{claim_launch}}

-- name: occurrence_claim_launch_after_successes :many
-- occurrence_claim_launch sent after a batch of successes, in their transaction and round trip
-- (`run_store.succeed_many`): the successes free their slots and the claim fills them, under one
-- commit. The claim waits for the budget's lock as long as it does alone (`claim_lock_timeout`),
-- not the short first-try wait the successes' row locks get. The budget's lock is taken after
-- the successes' task, occurrence and run locks, and its holder waits for no row lock (its
-- picks skip locked rows, its writes are to rows it holds or inserts), so no cycle can form.
SELECT set_config('lock_timeout', %(claim_lock_timeout)s, true);
{{claim_launch}}

-- name: occurrence_release_claims :rowcount
-- Gives back this instance's claims that never launched (shutdown).
UPDATE occurrence SET status = 'queued', claim_owner = NULL, claim_expires_at = NULL,
    updated_at = clock_timestamp()
WHERE finished_at IS NULL
  AND id IN (SELECT id FROM occurrence
             WHERE finished_at IS NULL AND status = 'launching' AND claim_owner = %(owner)s
             ORDER BY id FOR UPDATE)

-- fragment: occurrence_locked
-- An occurrence row as the daemon locks it to write its outcome or repair it: the columns of
-- domain.occurrence.Occurrence but its trigger's arguments, which no such write reads (a value
-- nested deeper than the decoder recurses, written by SQL, failed every completion and
-- takeover of its run: issue 44).
id, task_id, occurrence_seq, scheduled_for, last_scheduled_for, firing_count, trigger, overlap,
    concurrency_key, status, reason, requested_by, attempts, interruptions, lease_token,
    claim_owner, claim_expires_at, not_before, error, created_at, updated_at, finished_at,
    cancel_requested_at, cancel_reason

-- fragment: occurrence_end
-- How a statement ends an occurrence (issue 47): never an UPDATE that sets `finished_at`, which
-- would move the row across partitions and make a concurrent writer waiting on it fail (SQLSTATE
-- 40001, "tuple to be locked was already moved to another partition") where it must match no
-- row ("fenced"); but `DELETE FROM occurrence WHERE finished_at IS NULL AND <fence> RETURNING o`
-- (pruned to the default partition) and an INSERT of the row with its new values through the
-- parent, which routes it to the partition of its `finished_at` (the default when none covers
-- it). A writer that waited on the row sees it deleted and matches nothing. The row keeps its id.
finished_at IS NULL

-- fragment: occurrence_args_shown
-- The trigger's arguments of the occurrence `o` as the connected role may see them: unmasked
-- to one that may select the column, the secret ones masked to the reader, which may not
-- select `o.args` (ADR 0031). One probe of occurrence_pkey per row.
(SELECT a.args FROM occurrence_args_shown a WHERE a.id = o.id) AS args

-- name: occurrence_lock :one
-- Locks one occurrence (after its task: the one lock order).
SELECT {{occurrence_locked}} FROM occurrence WHERE id = %(id)s FOR UPDATE

-- name: occurrence_lock_many :many
-- Locks a batch of occurrences in id order (after their tasks: the one lock order).
SELECT {{occurrence_locked}} FROM occurrence WHERE id = ANY(%(ids)s::bigint[])
ORDER BY id FOR UPDATE

-- name: occurrence_finish_many :many
-- Records the final status of a batch of occurrences, each fenced on the token its finishing
-- run holds; returns the ids written (a missing one was fenced). A move: the fragment
-- occurrence_end says why.
WITH gone AS (
    DELETE FROM occurrence o
    USING unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(statuses)s::text[],
                 %(errors)s::text[], %(reasons)s::text[]) AS f(id, token, status, error, reason)
    WHERE o.{{occurrence_end}} AND o.id = f.id AND o.status = 'running'
      AND o.lease_token = f.token
    RETURNING o, f.status, f.error, f.reason
)
INSERT INTO occurrence OVERRIDING SYSTEM VALUE
SELECT r.* FROM gone g CROSS JOIN LATERAL jsonb_populate_record(g.o, jsonb_build_object(
    'status', g.status, 'error', g.error, 'reason', g.reason,
    'finished_at', coalesce(%(now)s::timestamptz, clock_timestamp()),
    'updated_at', coalesce(%(now)s::timestamptz, clock_timestamp()), 'claim_owner', NULL)) r
RETURNING id

-- name: occurrence_finish :rowcount
-- Records an occurrence's final status, fenced on the token the finishing run holds. A move:
-- the fragment occurrence_end says why.
WITH gone AS (
    DELETE FROM occurrence o
    WHERE o.{{occurrence_end}} AND o.id = %(id)s AND o.status = 'running'
      AND o.lease_token = %(token)s
    RETURNING o
)
INSERT INTO occurrence OVERRIDING SYSTEM VALUE
SELECT r.* FROM gone g CROSS JOIN LATERAL jsonb_populate_record(g.o, jsonb_build_object(
    'status', %(status)s::text, 'error', %(error)s::text, 'reason', %(reason)s::text,
    'finished_at', clock_timestamp(), 'updated_at', clock_timestamp(), 'claim_owner', NULL)) r

-- name: occurrence_retry :rowcount
-- Puts an occurrence back in the queue for another attempt after `delay` (at most 36,525 days,
-- the longest duration any input takes: a backoff written by hand adds nothing past the
-- calendar); an interruption gives the attempt back and counts against the interruption bound
-- instead. The delay is recorded (`retry_delay`, shown by `runs show`): with `--backoff-max` it
-- is drawn per retry.
UPDATE occurrence SET status = 'queued', error = %(error)s, claim_owner = NULL,
    claim_expires_at = NULL,
    not_before = clock_timestamp() + least(%(delay)s::interval, interval '36525 days'),
    retry_delay = least(%(delay)s::interval, interval '36525 days'),
    attempts = attempts - %(refund)s, interruptions = interruptions + %(refund)s,
    updated_at = clock_timestamp()
WHERE finished_at IS NULL AND id = %(id)s AND status = 'running' AND lease_token = %(token)s

-- name: occurrence_queue_depth :scalar
-- Queued occurrences, fleet-wide.
SELECT count(*) FROM occurrence WHERE finished_at IS NULL AND status = 'queued'

-- name: occurrence_cancel :one
-- Cancels one occurrence of a locked task whose job has not started (a status in `not_started`:
-- queued or launching) and raises its token, fencing a launcher that has not started it yet.
-- A move: the fragment occurrence_end says why.
WITH gone AS (
    DELETE FROM occurrence o
    WHERE o.{{occurrence_end}} AND o.id = %(id)s AND o.status = ANY(%(not_started)s::text[])
    RETURNING o
)
INSERT INTO occurrence OVERRIDING SYSTEM VALUE
SELECT r.* FROM gone g CROSS JOIN LATERAL jsonb_populate_record(g.o, jsonb_build_object(
    'status', 'cancelled', 'reason', %(reason)s::text, 'requested_by', %(requested_by)s::text,
    'lease_token', (g.o).lease_token + 1, 'claim_owner', NULL, 'claim_expires_at', NULL,
    'updated_at', clock_timestamp(), 'finished_at', clock_timestamp())) r
RETURNING *

-- name: occurrence_request_cancel :one
-- Asks the owner of a running occurrence (task locked first) to stop its job: the occurrence
-- keeps its slot until the owner confirms the job is gone or its takeover point passes. A second
-- request keeps the first one's time and reason.
UPDATE occurrence SET cancel_requested_at = coalesce(cancel_requested_at, clock_timestamp()),
    cancel_reason = coalesce(cancel_reason, %(reason)s), requested_by = %(requested_by)s,
    updated_at = clock_timestamp()
WHERE finished_at IS NULL AND id = %(id)s AND status = 'running'
RETURNING *

-- name: occurrence_expired_claims :many
-- Claims that never launched and whose claim expired, a page at a time.
SELECT id, task_id, lease_token FROM occurrence
WHERE finished_at IS NULL AND status = 'launching' AND claim_expires_at < clock_timestamp() AND {{known_to_this_build}}
  AND id > %(after)s
ORDER BY id
LIMIT %(limit)s

-- name: occurrence_requeue_claim :rowcount
-- Gives an expired claim back to the queue, if it is still the claim that was seen.
UPDATE occurrence SET status = 'queued', claim_owner = NULL, claim_expires_at = NULL,
    updated_at = clock_timestamp()
WHERE finished_at IS NULL AND id = %(id)s AND status = 'launching' AND lease_token = %(token)s
  AND claim_expires_at < clock_timestamp()

-- name: occurrence_past_deadline :many
-- Queued occurrences past their start deadline (from their spread start, scheduled_for plus
-- its spread offset, or for a retry or a
-- backfill from its not-before time, when it was queued; a deadline written by hand counts as
-- 36,525 days at most, the longest any input takes, so none adds past the calendar), a page at
-- a time.
SELECT o.id, o.task_id FROM occurrence o JOIN task t ON t.id = o.task_id
WHERE o.finished_at IS NULL AND o.status = 'queued' AND t.start_deadline IS NOT NULL
  AND (o.needs_build IS NULL OR o.needs_build = ANY(%(known)s::text[]))
  AND clock_timestamp() > CASE WHEN o.attempts + o.interruptions > 0 OR o.trigger = 'backfill'
                               THEN o.not_before
                               ELSE o.scheduled_for + coalesce(o.spread_offset, interval '0') END
                          + least(t.start_deadline, interval '36525 days')
  AND o.id > %(after)s
ORDER BY o.id
LIMIT %(limit)s

-- name: occurrence_expire :one
-- Expires one queued occurrence past its start deadline (its task locked first); returned as
-- occurrence_lock returns it. A move: the fragment occurrence_end says why.
WITH gone AS (
    DELETE FROM occurrence o
    USING task t
    WHERE o.{{occurrence_end}} AND o.id = %(id)s AND t.id = o.task_id AND o.status = 'queued'
      AND t.start_deadline IS NOT NULL
      AND clock_timestamp() > CASE WHEN o.attempts + o.interruptions > 0 OR o.trigger = 'backfill'
                                   THEN o.not_before
                                   ELSE o.scheduled_for + coalesce(o.spread_offset, interval '0')
                              END
                              + least(t.start_deadline, interval '36525 days')
    RETURNING o
)
INSERT INTO occurrence OVERRIDING SYSTEM VALUE
SELECT r.* FROM gone g CROSS JOIN LATERAL jsonb_populate_record(g.o, jsonb_build_object(
    'status', 'expired', 'reason', 'start_deadline', 'finished_at', clock_timestamp(),
    'updated_at', clock_timestamp())) r
RETURNING {{occurrence_locked}}

-- name: occurrence_latest :one
-- The occurrence that decides a one-shot task's status, read after the task lock is held: its
-- newest firing (highest sequence; a manual trigger never decides it).
SELECT {{occurrence_locked}} FROM occurrence
WHERE task_id = %(task_id)s AND trigger <> 'manual'
ORDER BY occurrence_seq DESC LIMIT 1

-- name: occurrence_insert_many :many
-- Inserts occurrences `first_seq` .. `last_seq` of a task whose row lock the caller holds and
-- which allocated the sequence numbers, all due at `now` with the same trigger and status
-- (Client.trigger with a count: manual, queued), with the task's `needs_build`; in sequence
-- order.
INSERT INTO occurrence (
    task_id, occurrence_seq, scheduled_for, trigger, overlap, concurrency_key, status,
    requested_by, not_before, created_at, updated_at, idempotency_key, needs_build)
SELECT %(task_id)s, seq, %(now)s, %(trigger)s, %(overlap)s, %(concurrency_key)s, %(status)s,
    %(requested_by)s, %(now)s, %(now)s, %(now)s,
    sd_occurrence_key_v1(%(task_id)s, %(trigger)s, %(now)s), t.needs_build
FROM generate_series(%(first_seq)s::bigint, %(last_seq)s::bigint) AS seq
CROSS JOIN (SELECT needs_build FROM task WHERE id = %(task_id)s) t
ORDER BY seq
RETURNING id, occurrence_seq

-- name: occurrence_firings :many
-- The scheduled and backfill occurrences recorded for one task's firings in [low, high]: exact
-- rows and the skipped summaries that reach into the range (occurrence_task_window_idx, in each
-- partition).
SELECT scheduled_for, last_scheduled_for, occurrence_seq, status, trigger FROM occurrence
WHERE task_id = %(task_id)s AND trigger = 'schedule' AND scheduled_for <= %(high)s
  AND (scheduled_for >= %(low)s OR (firing_count > 1 AND last_scheduled_for >= %(low)s))
UNION ALL
SELECT scheduled_for, last_scheduled_for, occurrence_seq, status, trigger FROM occurrence
WHERE task_id = %(task_id)s AND trigger = 'backfill'
  AND scheduled_for BETWEEN %(low)s AND %(high)s

-- name: occurrence_insert_backfill :one
-- Queues a backfill occurrence of a locked task for one firing, startable now; a firing that has
-- one already is not inserted again (no row returned): its key goes into firing_key in the same
-- statement, and the occurrence only if the key went in (guarantee 2). With the task's
-- `needs_build`.
WITH keyed AS (
    INSERT INTO firing_key (task_id, scheduled_for, trigger)
    VALUES (%(task_id)s, %(scheduled_for)s, 'backfill')
    ON CONFLICT DO NOTHING
    RETURNING task_id
)
INSERT INTO occurrence (
    task_id, occurrence_seq, scheduled_for, trigger, overlap, concurrency_key, status,
    requested_by, not_before, created_at, updated_at, idempotency_key, needs_build)
SELECT %(task_id)s::bigint, %(occurrence_seq)s::bigint, %(scheduled_for)s::timestamptz,
    'backfill', %(overlap)s::text, %(concurrency_key)s::text, 'queued', %(requested_by)s::text,
    %(now)s::timestamptz, %(now)s::timestamptz, %(now)s::timestamptz,
    sd_occurrence_key_v1(%(task_id)s::bigint, 'backfill', %(scheduled_for)s::timestamptz),
    (SELECT needs_build FROM task WHERE id = %(task_id)s::bigint)
FROM keyed
RETURNING id, scheduled_for

-- name: occurrence_trigger :one
-- A manual occurrence of a task whose row lock the caller holds, due at `now`, in one statement:
-- allocates its sequence number on the task row (a one-shot task's status stays as it is: only
-- its firings decide it), inserts it (finished if its status is one of `finished`), and wakes
-- idle daemons on `channel` when the transaction commits. `args`: the trigger's arguments
-- (revision 0034), NULL for none. With the task's `needs_build`.
WITH bumped AS (
    UPDATE task SET occurrence_seq = occurrence_seq + 1
    WHERE id = %(task_id)s
    RETURNING id, occurrence_seq, needs_build
), wake AS (
    SELECT pg_notify(%(channel)s, %(reason_woken)s) FROM bumped
)
INSERT INTO occurrence (
    task_id, occurrence_seq, scheduled_for, trigger, overlap, concurrency_key, status, reason,
    requested_by, not_before, created_at, updated_at, finished_at, idempotency_key, args,
    needs_build)
SELECT bumped.id, bumped.occurrence_seq, %(now)s, 'manual', %(overlap)s, %(concurrency_key)s,
    %(status)s, %(reason)s, %(requested_by)s, %(now)s, %(now)s, %(now)s,
    CASE WHEN %(status)s = ANY(%(finished)s::text[]) THEN %(now)s::timestamptz END,
    sd_occurrence_key_v1(bumped.id, 'manual', %(now)s), %(args)s::jsonb, bumped.needs_build
FROM bumped CROSS JOIN wake
RETURNING *
