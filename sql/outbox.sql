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
