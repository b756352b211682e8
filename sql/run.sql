-- name: run_history :many
-- Runs and never-run occurrences, newest first: one row per run attempt plus one per occurrence
-- that never ran.
SELECT * FROM (
    SELECT r.id, o.id AS occurrence_id, o.occurrence_seq, o.task_id, t.name AS task_name,
        o.scheduled_for, o.trigger, r.attempt, r.status, o.reason, r.owner AS instance_id,
        r.started_at, r.finished_at, r.exit_code, r.http_status, r.error, o.firing_count,
        o.last_scheduled_for, r.lease_token,
        CASE WHEN r.status = 'running' THEN o.cancel_requested_at END AS cancel_requested_at,
        coalesce(r.started_at, o.created_at) AS sort_at
    FROM run r JOIN occurrence o ON o.id = r.occurrence_id JOIN task t ON t.id = o.task_id
    WHERE (%(task_id)s::bigint IS NULL OR o.task_id = %(task_id)s)
    UNION ALL
    SELECT NULL, o.id, o.occurrence_seq, o.task_id, t.name, o.scheduled_for, o.trigger, NULL,
        o.status, o.reason, o.claim_owner, NULL, o.finished_at, NULL, NULL, o.error,
        o.firing_count, o.last_scheduled_for, NULL, NULL, o.created_at
    FROM occurrence o JOIN task t ON t.id = o.task_id
    WHERE (%(task_id)s::bigint IS NULL OR o.task_id = %(task_id)s)
      AND NOT EXISTS (SELECT 1 FROM run r WHERE r.occurrence_id = o.id)
) history
WHERE %(status)s::text IS NULL OR status = %(status)s
ORDER BY sort_at DESC, occurrence_id DESC, id DESC NULLS LAST
LIMIT %(limit)s

-- name: run_get :one
-- One run with its occurrence and task.
SELECT r.*, o.occurrence_seq, o.task_id, t.name AS task_name, o.scheduled_for, o.trigger,
    o.reason, o.status AS occurrence_status, o.firing_count, o.last_scheduled_for,
    CASE WHEN r.status = 'running' THEN o.cancel_requested_at END AS cancel_requested_at
FROM run r JOIN occurrence o ON o.id = r.occurrence_id JOIN task t ON t.id = o.task_id
WHERE r.id = %(id)s

-- name: run_list_for_occurrence :many
-- The runs of one occurrence, oldest first.
SELECT * FROM run WHERE occurrence_id = %(occurrence_id)s ORDER BY id

-- name: run_renew :many
-- Renews exactly the (run, token) pairs this process holds, in id order, touching only run rows;
-- a pair missing from the result was taken over or cancelled: its holder is fenced. A renewed
-- pair whose occurrence has a cancel request tells the owner to stop the job (and keep renewing
-- until it has confirmed the job is gone).
WITH held AS (
    SELECT r.id FROM run r
    JOIN unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS h(id, token)
      ON r.id = h.id AND r.lease_token = h.token
    WHERE r.owner = %(owner)s AND r.status = 'running'
    ORDER BY r.id FOR UPDATE OF r
)
UPDATE run SET lease_expires_at = clock_timestamp() + %(ttl)s,
    takeover_at = clock_timestamp() + %(ttl)s + %(grace)s
FROM held, occurrence o WHERE run.id = held.id AND o.id = run.occurrence_id
RETURNING run.id, o.cancel_requested_at IS NOT NULL AS cancel_requested

-- name: run_lock :one
-- Locks one run (after its occurrence: the one lock order).
SELECT * FROM run WHERE id = %(id)s FOR UPDATE

-- name: run_finish :rowcount
-- Records a run's outcome; fenced: only the owner holding the current token may write it.
UPDATE run SET status = %(status)s, exit_code = %(exit_code)s, http_status = %(http_status)s,
    output_tail = %(output_tail)s, error = %(error)s, finished_at = clock_timestamp(),
    finished_by = %(owner)s
WHERE id = %(id)s AND owner = %(owner)s AND lease_token = %(token)s AND status = 'running'

-- name: run_finish_many :many
-- Records the outcomes of a batch of runs in id order; each is fenced: only the owner holding
-- the current token may write it. Returns the ids written; a missing one was fenced.
WITH mine AS MATERIALIZED (
    SELECT r.id FROM run r
    JOIN unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS h(id, token)
      ON r.id = h.id AND r.lease_token = h.token
    WHERE r.owner = %(owner)s AND r.status = 'running'
    ORDER BY r.id FOR UPDATE OF r
)
UPDATE run SET status = f.status, exit_code = f.exit_code, http_status = f.http_status,
    output_tail = f.output_tail, error = f.error,
    finished_at = coalesce(%(now)s::timestamptz, clock_timestamp()), finished_by = %(owner)s
FROM mine, unnest(%(ids)s::bigint[], %(statuses)s::text[], %(exit_codes)s::int[],
                  %(http_statuses)s::int[], %(output_tails)s::text[], %(errors)s::text[])
         AS f(id, status, exit_code, http_status, output_tail, error)
WHERE run.id = mine.id AND f.id = mine.id
RETURNING run.id

-- name: run_takeover_candidates :many
-- Runs past their takeover point (database clock), a page at a time in id order; none while the
-- server is younger than the quiet period, so owners cut off by a restart can renew first.
SELECT r.id, r.occurrence_id, o.task_id, r.lease_token, r.owner FROM run r
JOIN occurrence o ON o.id = r.occurrence_id
WHERE r.status = 'running' AND r.takeover_at < clock_timestamp()
  AND clock_timestamp() > pg_postmaster_start_time() + %(restart_quiet)s
  AND r.id > %(after)s
ORDER BY r.id
LIMIT %(limit)s

-- name: run_take_over :rowcount
-- Compare-and-set on the token: ends a run whose owner stopped renewing, only if nothing changed
-- since it was seen and its takeover point has passed.
UPDATE run SET status = 'interrupted', finished_at = clock_timestamp(), finished_by = %(by)s,
    error = %(error)s
WHERE id = %(id)s AND lease_token = %(token)s AND status = 'running'
  AND takeover_at < clock_timestamp()
  AND clock_timestamp() > pg_postmaster_start_time() + %(restart_quiet)s

-- name: run_running_by_build :many
-- Executing runs per build (`status` during a rollout); NULL: a build before revision 0004.
SELECT build_revision, count(*) AS runs FROM run WHERE status = 'running'
GROUP BY build_revision ORDER BY build_revision NULLS FIRST
