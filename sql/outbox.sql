-- name: outbox_enqueue :rowcount
-- Records the notifications the just-finished occurrences `ids` owe, in the transaction that
-- finished them (their rows locked): one per (occurrence, event), `ON CONFLICT DO NOTHING` so a
-- repeat writes none. The event is the occurrence's final status (failed or interrupted:
-- failure; timeout; skipped; expired); a row is written only for a task with a notify URL (its
-- own, else the fleet's `notify_url`) whose events (its own, else the fleet's `notify_on`, else
-- failure, timeout, expired and deadline) include it. The payload is what every POST carries.
INSERT INTO notification_outbox (occurrence_id, task_id, event, payload, created_at,
    next_attempt_at)
SELECT o.id, o.task_id, e.event,
    jsonb_build_object('event', e.event, 'task_id', t.id, 'task', t.name,
        'occurrence_id', o.id, 'scheduled_for', o.scheduled_for, 'outcome', o.status,
        'reason', coalesce(o.reason, o.error), 'attempt', o.attempts,
        'run_id', (SELECT max(r.id) FROM run r WHERE r.occurrence_id = o.id)),
    clock_timestamp(), clock_timestamp()
FROM occurrence o
JOIN task t ON t.id = o.task_id
CROSS JOIN LATERAL (
    SELECT CASE o.status WHEN 'failed' THEN 'failure' WHEN 'interrupted' THEN 'failure'
                         WHEN 'timeout' THEN 'timeout' WHEN 'skipped' THEN 'skipped'
                         WHEN 'expired' THEN 'expired' END AS event) e
WHERE o.id = ANY(%(ids)s::bigint[]) AND e.event IS NOT NULL
  AND coalesce(t.notify_url,
               (SELECT jsonb_build_array(value) ->> 0 FROM fleet_setting
                WHERE key = 'notify_url' AND jsonb_typeof(value) = 'string')) IS NOT NULL
  AND e.event = ANY(coalesce(
        t.notify_on,
        (SELECT ARRAY(SELECT jsonb_array_elements_text(value)) FROM fleet_setting
         WHERE key = 'notify_on' AND jsonb_typeof(value) = 'array'),
        ARRAY['failure', 'timeout', 'expired', 'deadline']))
ORDER BY o.id
ON CONFLICT (occurrence_id, event) DO NOTHING

-- name: outbox_claim :one
-- Claims the oldest due undelivered notification (SKIP LOCKED: one deliverer per row at a
-- time): its next attempt moves `lease` ahead, so another deliverer takes it again only after
-- this one's POST timed out or this daemon died, and its attempts go up by one, the token its
-- record is fenced on. Returns it with where to send it: the task's notify URL and headers,
-- else the fleet's `notify_url` (no headers). None: nothing is due.
WITH due AS MATERIALIZED (
    SELECT id FROM notification_outbox
    WHERE delivered_at IS NULL AND next_attempt_at <= clock_timestamp()
    ORDER BY next_attempt_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE notification_outbox n SET attempts = n.attempts + 1,
    next_attempt_at = clock_timestamp() + %(lease)s::interval
FROM due, task t
WHERE n.id = due.id AND t.id = n.task_id
RETURNING n.id, n.delivery_id, n.occurrence_id, n.task_id, n.event, n.payload, n.attempts,
    coalesce(t.notify_url, (SELECT jsonb_build_array(value) ->> 0 FROM fleet_setting
                            WHERE key = 'notify_url' AND jsonb_typeof(value) = 'string')) AS url,
    CASE WHEN t.notify_url IS NOT NULL THEN t.notify_headers END AS headers

-- name: outbox_delivered :rowcount
-- Records a notification's delivery, fenced on the attempt that claimed it (0: a later claim
-- took it over, or it was recorded already).
UPDATE notification_outbox SET delivered_at = clock_timestamp(), last_error = NULL
WHERE id = %(id)s AND attempts = %(attempts)s AND delivered_at IS NULL

-- name: outbox_failed :rowcount
-- Records a failed POST: the notification is due again after `delay` (the backoff), fenced on
-- the attempt that claimed it.
UPDATE notification_outbox SET last_error = %(error)s,
    next_attempt_at = clock_timestamp() + %(delay)s::interval
WHERE id = %(id)s AND attempts = %(attempts)s AND delivered_at IS NULL

-- name: outbox_counts :one
-- What `status` shows of the outbox: notifications not yet delivered, those among them whose
-- last POST failed, and the age in seconds of the oldest (database clock; NULL: none).
SELECT count(*) AS undelivered, count(*) FILTER (WHERE last_error IS NOT NULL) AS failing,
    round(extract(epoch FROM clock_timestamp() - min(created_at)), 3)::float8
        AS oldest_undelivered_seconds
FROM notification_outbox WHERE delivered_at IS NULL

-- name: outbox_exists :scalar
-- Whether the schema has the outbox (revision 0025): `status` reads a schema not migrated yet.
SELECT to_regclass('notification_outbox') IS NOT NULL

-- name: outbox_enqueue_deadlines :rowcount
-- Records a `deadline` notification for each firing of a task with a `deadline` that has not
-- succeeded by its scheduled time plus the deadline (database clock, `now()`: the transaction's
-- first statement), whatever it is now
-- (queued, launching, running, retrying, or ended otherwise, a firing skipped behind a running
-- `forbid` job included), once: NOT EXISTS and the unique key. Only firings whose deadline
-- passed within `lookback` are read (occurrence_task_window_idx), at most `limit` rows; only
-- for a task with a notify URL (its own, else the fleet's) that selects `deadline` (its own
-- events, else the fleet's, else the default).
INSERT INTO notification_outbox (occurrence_id, task_id, event, payload, created_at,
    next_attempt_at)
SELECT o.id, o.task_id, 'deadline',
    jsonb_build_object('event', 'deadline', 'task_id', t.id, 'task', t.name,
        'occurrence_id', o.id, 'scheduled_for', o.scheduled_for, 'outcome', o.status,
        'reason', 'not succeeded within its deadline of '
            || extract(epoch FROM least(t.deadline, interval '36525 days'))::bigint || ' s',
        'attempt', o.attempts,
        'run_id', (SELECT max(r.id) FROM run r WHERE r.occurrence_id = o.id)),
    clock_timestamp(), clock_timestamp()
FROM task t
JOIN occurrence o ON o.task_id = t.id
    -- now(), not clock_timestamp(): a volatile bound is no index condition, and this is the
    -- first statement of its short transaction, so the two are the same instant.
    AND o.scheduled_for <= now() - least(t.deadline, interval '36525 days')
    AND o.scheduled_for > now() - least(t.deadline, interval '36525 days') - %(lookback)s::interval
WHERE t.deadline IS NOT NULL AND t.deleted_at IS NULL
  AND NOT (o.status = 'success'
           AND o.finished_at <= o.scheduled_for + least(t.deadline, interval '36525 days'))
  AND coalesce(t.notify_url,
               (SELECT jsonb_build_array(value) ->> 0 FROM fleet_setting
                WHERE key = 'notify_url' AND jsonb_typeof(value) = 'string')) IS NOT NULL
  AND 'deadline' = ANY(coalesce(
        t.notify_on,
        (SELECT ARRAY(SELECT jsonb_array_elements_text(value)) FROM fleet_setting
         WHERE key = 'notify_on' AND jsonb_typeof(value) = 'array'),
        ARRAY['failure', 'timeout', 'expired', 'deadline']))
  AND NOT EXISTS (SELECT 1 FROM notification_outbox n
                  WHERE n.occurrence_id = o.id AND n.event = 'deadline')
ORDER BY o.id
LIMIT %(limit)s
ON CONFLICT (occurrence_id, event) DO NOTHING
