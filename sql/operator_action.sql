-- name: operator_action_insert :one
-- Records one action an operator took (after it committed), on the database clock; the trigger
-- operator_action_session_user_on_insert records the role that logged in (`session_role`,
-- whatever a writer supplies: sql/functions/operator_action_session_user.sql).
INSERT INTO operator_action (actor, action, source, task_id, occurrence_id, detail)
VALUES (%(actor)s, %(action)s, %(source)s, %(task_id)s, %(occurrence_id)s, %(detail)s)
RETURNING id, at, actor, action, source, task_id, occurrence_id, detail, session_role

-- name: operator_action_recent :many
-- The newest actions, of one task when `task_id` is given, newest first (the primary key
-- backwards, or operator_action_task_idx), at most `limit`. `actor`: who the CLI or console
-- says acted; `session_role`: the database role that wrote it (NULL: recorded before 0038).
SELECT a.id, a.at, a.actor, a.action, a.source, a.task_id, t.name AS task_name, a.occurrence_id,
    a.detail, a.session_role
FROM operator_action a LEFT JOIN task t ON t.id = a.task_id
WHERE %(task_id)s::bigint IS NULL OR a.task_id = %(task_id)s
ORDER BY a.id DESC
LIMIT %(limit)s
