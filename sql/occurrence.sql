-- name: occurrence_insert :one
-- Inserts an occurrence of a task whose row lock the caller holds.
INSERT INTO occurrence (
    task_id, occurrence_seq, scheduled_for, last_scheduled_for, firing_count, trigger, overlap,
    concurrency_key, status, reason, requested_by, not_before, created_at, updated_at, finished_at)
VALUES (
    %(task_id)s, %(occurrence_seq)s, %(scheduled_for)s, %(last_scheduled_for)s, %(firing_count)s,
    %(trigger)s, %(overlap)s, %(concurrency_key)s, %(status)s, %(reason)s, %(requested_by)s,
    %(scheduled_for)s, %(now)s, %(now)s,
    CASE WHEN %(status)s IN ('skipped', 'expired', 'cancelled') THEN %(now)s::timestamptz END)
RETURNING *

-- name: occurrence_active_count :scalar
-- How many occurrences of a task are queued, launching or running.
SELECT count(*) FROM occurrence
WHERE task_id = %(task_id)s AND status IN ('queued', 'launching', 'running')

-- name: occurrence_cancel_active :many
-- Cancels every active occurrence of a locked task and raises its token, fencing any holder.
UPDATE occurrence SET status = 'cancelled', reason = %(reason)s, requested_by = %(requested_by)s,
    lease_token = lease_token + 1, claim_owner = NULL, claim_expires_at = NULL,
    updated_at = %(now)s, finished_at = %(now)s
WHERE id IN (
    SELECT id FROM occurrence
    WHERE task_id = %(task_id)s AND status IN ('queued', 'launching', 'running')
    ORDER BY id FOR UPDATE)
RETURNING id, occurrence_seq

-- name: occurrence_get :one
-- One occurrence with its task's name.
SELECT o.*, t.name AS task_name FROM occurrence o JOIN task t ON t.id = o.task_id
WHERE o.id = %(id)s
