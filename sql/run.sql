-- name: run_cancel_for_occurrences :rowcount
-- Ends the running runs of occurrences that were just cancelled; their owners are fenced.
UPDATE run SET status = 'cancelled', finished_at = %(now)s, finished_by = %(requested_by)s,
    error = %(reason)s
WHERE id IN (
    SELECT id FROM run WHERE occurrence_id = ANY(%(occurrence_ids)s) AND status = 'running'
    ORDER BY id FOR UPDATE)

-- name: run_history :many
-- Runs and never-run occurrences, newest first: one row per run attempt plus one per occurrence
-- that never ran.
SELECT * FROM (
    SELECT r.id, o.id AS occurrence_id, o.occurrence_seq, o.task_id, t.name AS task_name,
        o.scheduled_for, o.trigger, r.attempt, r.status, o.reason, r.owner AS instance_id,
        r.started_at, r.finished_at, r.exit_code, r.http_status, r.error, o.firing_count,
        o.last_scheduled_for, r.lease_token, coalesce(r.started_at, o.created_at) AS sort_at
    FROM run r JOIN occurrence o ON o.id = r.occurrence_id JOIN task t ON t.id = o.task_id
    WHERE (%(task_id)s::bigint IS NULL OR o.task_id = %(task_id)s)
    UNION ALL
    SELECT NULL, o.id, o.occurrence_seq, o.task_id, t.name, o.scheduled_for, o.trigger, NULL,
        o.status, o.reason, o.claim_owner, NULL, o.finished_at, NULL, NULL, o.error,
        o.firing_count, o.last_scheduled_for, NULL, o.created_at
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
    o.reason, o.status AS occurrence_status
FROM run r JOIN occurrence o ON o.id = r.occurrence_id JOIN task t ON t.id = o.task_id
WHERE r.id = %(id)s

-- name: run_list_for_occurrence :many
-- The runs of one occurrence, oldest first.
SELECT * FROM run WHERE occurrence_id = %(occurrence_id)s ORDER BY id
