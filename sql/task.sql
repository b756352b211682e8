-- name: task_insert :one
-- Inserts a task; next_run_at was computed from the database clock by the caller.
INSERT INTO task (
    name, schedule_kind, cron_expr, every, run_at, anchor_at, timezone, dst_gap, dst_overlap,
    executor, payload, concurrency_key, overlap, misfire, misfire_grace, catchup_limit,
    catchup_window, start_deadline, run_timeout, max_attempts, backoff, paused, next_run_at,
    created_at, updated_at)
VALUES (
    %(name)s, %(schedule_kind)s, %(cron_expr)s, %(every)s, %(run_at)s, %(anchor_at)s, %(timezone)s,
    %(dst_gap)s, %(dst_overlap)s, %(executor)s, %(payload)s, %(concurrency_key)s, %(overlap)s,
    %(misfire)s, %(misfire_grace)s, %(catchup_limit)s, %(catchup_window)s, %(start_deadline)s,
    %(run_timeout)s, %(max_attempts)s, %(backoff)s, %(paused)s, %(next_run_at)s,
    %(anchor_at)s, %(anchor_at)s)
RETURNING *

-- name: task_find :one
-- A task by id (deleted ones too, for history) or by the name of a live task.
SELECT * FROM task
WHERE (id = %(id)s) OR (%(id)s::bigint IS NULL AND name = %(name)s AND deleted_at IS NULL)

-- name: task_lock :one
-- Locks a task row, deleted or not: the parent lock every multi-row change takes first (the
-- outcome of a job of a task deleted while it ran is still recorded).
SELECT * FROM task WHERE id = %(id)s FOR UPDATE

-- name: task_lock_many :many
-- Locks a batch of task rows in id order, deleted or not: the parent locks a batch of
-- completions takes first.
SELECT * FROM task WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id FOR UPDATE

-- name: task_list :many
-- Live tasks by name.
SELECT * FROM task WHERE deleted_at IS NULL ORDER BY name

-- name: task_update :one
-- Rewrites a locked task's definition; takes effect from its next firing.
UPDATE task SET
    schedule_kind = %(schedule_kind)s, cron_expr = %(cron_expr)s, every = %(every)s,
    run_at = %(run_at)s, anchor_at = %(anchor_at)s, timezone = %(timezone)s, dst_gap = %(dst_gap)s,
    dst_overlap = %(dst_overlap)s, executor = %(executor)s, payload = %(payload)s,
    concurrency_key = %(concurrency_key)s, overlap = %(overlap)s, misfire = %(misfire)s,
    misfire_grace = %(misfire_grace)s, catchup_limit = %(catchup_limit)s,
    catchup_window = %(catchup_window)s, start_deadline = %(start_deadline)s,
    run_timeout = %(run_timeout)s, max_attempts = %(max_attempts)s, backoff = %(backoff)s,
    paused = %(paused)s, next_run_at = %(next_run_at)s, status = %(status)s,
    updated_at = %(now)s
WHERE id = %(id)s AND deleted_at IS NULL
RETURNING *

-- name: task_set_paused :one
-- Pauses or resumes a locked task; resume passes the next firing from now (paused firings are not owed).
UPDATE task SET paused = %(paused)s, next_run_at = %(next_run_at)s, status = %(status)s,
    last_error = coalesce(%(last_error)s, last_error), updated_at = %(now)s
WHERE id = %(id)s AND deleted_at IS NULL
RETURNING *

-- name: task_next_seq :scalar
-- Allocates the next occurrence sequence number of a task whose row lock the caller holds.
UPDATE task SET occurrence_seq = occurrence_seq + 1 WHERE id = %(id)s RETURNING occurrence_seq

-- name: task_delete :rowcount
-- Soft-deletes a locked task: its history stays queryable by id and its name becomes free.
UPDATE task SET deleted_at = %(now)s, next_run_at = NULL, updated_at = %(now)s
WHERE id = %(id)s AND deleted_at IS NULL

-- name: task_claim_due :many
-- Locks a batch of due, enabled, unpaused tasks; tasks another dispatcher holds are skipped.
SELECT * FROM task
WHERE deleted_at IS NULL AND NOT paused AND status = 'enabled' AND parked_at IS NULL
  AND next_run_at <= coalesce(%(now)s::timestamptz, now())
ORDER BY next_run_at, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: task_advance :rowcount
-- Moves a dispatched task to its next firing (and a fired one-shot task to running).
UPDATE task SET next_run_at = %(next_run_at)s, status = %(status)s, updated_at = %(now)s
WHERE id = %(id)s

-- name: task_record_outcome :rowcount
-- Shows an occurrence's final outcome on its task, only if it is newer than the one shown; a
-- one-shot task's lifecycle follows it only when no newer occurrence exists (manual triggers
-- skipped at creation aside): an older one never decides the status.
UPDATE task SET last_outcome_seq = %(occurrence_seq)s, last_occurrence_id = %(occurrence_id)s,
    last_scheduled_for = %(scheduled_for)s, last_status = %(status)s,
    last_finished_at = clock_timestamp(), last_error = %(error)s,
    status = CASE WHEN schedule_kind = 'once' AND status = 'running' AND NOT EXISTS (
                      SELECT 1 FROM occurrence newer
                      WHERE newer.task_id = task.id AND newer.occurrence_seq > %(occurrence_seq)s
                        AND NOT (newer.trigger = 'manual' AND newer.status = 'skipped'))
                  THEN %(lifecycle)s ELSE status END,
    updated_at = clock_timestamp()
WHERE id = %(id)s AND last_outcome_seq < %(occurrence_seq)s

-- name: task_record_outcome_many :rowcount
-- task_record_outcome for a batch of locked tasks, each task once (its newest outcome of the
-- batch): shown only if newer than the one shown; a one-shot task's lifecycle follows it only
-- when no newer occurrence exists (manual triggers skipped at creation aside).
UPDATE task SET last_outcome_seq = o.occurrence_seq, last_occurrence_id = o.occurrence_id,
    last_scheduled_for = o.scheduled_for, last_status = o.status,
    last_finished_at = coalesce(%(now)s::timestamptz, clock_timestamp()), last_error = o.error,
    status = CASE WHEN task.schedule_kind = 'once' AND task.status = 'running' AND NOT EXISTS (
                      SELECT 1 FROM occurrence newer
                      WHERE newer.task_id = task.id AND newer.occurrence_seq > o.occurrence_seq
                        AND NOT (newer.trigger = 'manual' AND newer.status = 'skipped'))
                  THEN o.lifecycle ELSE task.status END,
    updated_at = coalesce(%(now)s::timestamptz, clock_timestamp())
FROM unnest(%(task_ids)s::bigint[], %(occurrence_ids)s::bigint[], %(seqs)s::bigint[],
            %(scheduled_fors)s::timestamptz[], %(statuses)s::text[], %(errors)s::text[],
            %(lifecycles)s::text[])
     AS o(task_id, occurrence_id, occurrence_seq, scheduled_for, status, error, lifecycle)
WHERE task.id = o.task_id AND task.last_outcome_seq < o.occurrence_seq

-- name: task_next_due :scalar
-- When the earliest enabled task falls due, for the loop's sleep.
SELECT min(next_run_at) FROM task
WHERE deleted_at IS NULL AND NOT paused AND status = 'enabled' AND parked_at IS NULL

-- name: task_unfinished_one_shots :many
-- One-shot tasks still `running` with no active occurrence, a page at a time.
SELECT t.id FROM task t
WHERE t.schedule_kind = 'once' AND t.status = 'running' AND t.deleted_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM occurrence o WHERE o.task_id = t.id
                  AND o.status IN ('queued', 'launching', 'running'))
  AND t.id > %(after)s
ORDER BY t.id
LIMIT %(limit)s

-- name: task_finish_lifecycle :rowcount
-- Ends a locked one-shot task's lifecycle.
UPDATE task SET status = %(status)s, last_error = coalesce(%(error)s, last_error),
    updated_at = clock_timestamp()
WHERE id = %(id)s AND schedule_kind = 'once' AND status = 'running'

-- name: task_park :rowcount
-- Takes a task the dispatcher cannot plan out of the due scan, with its error, until an update.
UPDATE task SET parked_at = %(now)s, park_error = %(error)s, updated_at = %(now)s
WHERE id = %(id)s AND parked_at IS NULL

-- name: task_unpark :rowcount
-- Puts a parked task back in the due scan (the update that fixes it).
UPDATE task SET parked_at = NULL, park_error = NULL WHERE id = %(id)s AND parked_at IS NOT NULL

-- name: task_set_next_run :rowcount
-- Moves a locked task's next firing (after its past-due firings were recorded as skipped).
UPDATE task SET next_run_at = %(next_run_at)s, status = %(status)s WHERE id = %(id)s

-- name: task_list_parked :many
-- Live parked tasks, for `status`.
SELECT id, name, parked_at, park_error FROM task
WHERE parked_at IS NOT NULL AND deleted_at IS NULL ORDER BY id
