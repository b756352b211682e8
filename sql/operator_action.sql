-- name: operator_action_insert :one
-- Records one action an operator took (after it committed), on the database clock.
INSERT INTO operator_action (actor, action, source, task_id, occurrence_id, detail)
VALUES (%(actor)s, %(action)s, %(source)s, %(task_id)s, %(occurrence_id)s, %(detail)s)
RETURNING id, at, actor, action, source, task_id, occurrence_id, detail

-- name: operator_action_recent :many
-- The newest actions, of one task when `task_id` is given, newest first (the primary key
-- backwards, or operator_action_task_idx), at most `limit`.
SELECT a.id, a.at, a.actor, a.action, a.source, a.task_id, t.name AS task_name, a.occurrence_id,
    a.detail
FROM operator_action a LEFT JOIN task t ON t.id = a.task_id
WHERE %(task_id)s::bigint IS NULL OR a.task_id = %(task_id)s
ORDER BY a.id DESC
LIMIT %(limit)s
