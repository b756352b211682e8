-- name: outbox_enqueue :rowcount
-- Records the notifications the just-finished occurrences `ids` owe, in the transaction that
-- finished them (their rows locked). The event is the occurrence's final status (failed or
-- interrupted: failure; timeout; skipped; expired); a row is written only for a task with a
-- notify URL (its own, else the fleet's `notify_url`) whose events (its own, else the fleet's
-- `notify_on`, else failure, timeout, expired and deadline) include it. `grouped` (the
-- dispatcher's skipped firings): one notification per task, event and reason, keyed on its
-- first occurrence (by scheduled time), its payload counting the firings (`firing_count`, a
-- summary row's included) and their span (`first_scheduled_for`, `last_scheduled_for`): the
-- catch-up after an outage is one POST, not one per coalesced firing. Otherwise one per
-- occurrence. Keyed on (occurrence, event), `ON CONFLICT DO NOTHING`: a repeat writes none.
-- The payload is what every POST carries.
INSERT INTO notification_outbox (occurrence_id, task_id, event, payload, created_at,
    next_attempt_at)
SELECT o.id, o.task_id, g.event,
    jsonb_build_object('event', g.event, 'task_id', t.id, 'task', t.name,
        'occurrence_id', o.id, 'scheduled_for', o.scheduled_for, 'outcome', o.status,
        'reason', g.reason, 'attempt', o.attempts,
        'run_id', (SELECT max(r.id) FROM run r WHERE r.occurrence_id = o.id),
        'firing_count', g.firing_count, 'first_scheduled_for', g.first_scheduled_for,
        'last_scheduled_for', g.last_scheduled_for),
    clock_timestamp(), clock_timestamp()
FROM (
    SELECT o.task_id, e.event, coalesce(o.reason, o.error) AS reason,
        (array_agg(o.id ORDER BY o.scheduled_for, o.id))[1] AS first_id,
        sum(o.firing_count) AS firing_count, min(o.scheduled_for) AS first_scheduled_for,
        max(coalesce(o.last_scheduled_for, o.scheduled_for)) AS last_scheduled_for
    FROM occurrence o
    JOIN task t ON t.id = o.task_id
    CROSS JOIN LATERAL (
        SELECT CASE o.status WHEN 'failed' THEN 'failure' WHEN 'interrupted' THEN 'failure'
                             WHEN 'timeout' THEN 'timeout' WHEN 'skipped' THEN 'skipped'
                             WHEN 'expired' THEN 'expired' END AS event) e
    WHERE o.id = ANY(%(ids)s::bigint[]) AND e.event IS NOT NULL
      AND {{outbox_task_notifies}}
    GROUP BY o.task_id, e.event, coalesce(o.reason, o.error),
        CASE WHEN %(grouped)s::boolean THEN NULL ELSE o.id END
) g
JOIN occurrence o ON o.id = g.first_id
JOIN task t ON t.id = g.task_id
ORDER BY o.id
ON CONFLICT (occurrence_id, event) DO NOTHING

-- fragment: outbox_task_notifies
-- Whether task `t` notifies event `e.event`: it has a notify URL (its own, else the fleet's
-- `notify_url`) and its events (its own, else the fleet's `notify_on`, else failure, timeout,
-- expired and deadline) include the event.
coalesce(t.notify_url,
         (SELECT jsonb_build_array(value) ->> 0 FROM fleet_setting
          WHERE key = 'notify_url' AND jsonb_typeof(value) = 'string')) IS NOT NULL
  AND e.event = ANY(coalesce(
        t.notify_on,
        (SELECT ARRAY(SELECT jsonb_array_elements_text(value)) FROM fleet_setting
         WHERE key = 'notify_on' AND jsonb_typeof(value) = 'array'),
        ARRAY['failure', 'timeout', 'expired', 'deadline']))

-- name: outbox_claim :one
-- Claims the oldest due undelivered notification (SKIP LOCKED: one deliverer per row at a
-- time): its next attempt moves `lease` ahead, so another deliverer takes it again only after
-- this one's POST timed out or this daemon died, and its attempts go up by one, the token its
-- record is fenced on. Returns it with where to send it: the task's notify URL and headers,
-- else the fleet's `notify_url` and `notify_headers` (a JSON object, name → value); the
-- payload and headers as text, decoded row by row (a value too deep to decode is that row's
-- error, not the pass's). None:
-- nothing is due. Rows bound for a URL in `full` (as many POSTs in flight there as this
-- deliverer lets one receiver hold) wait: one slow receiver never holds every worker.
WITH due AS MATERIALIZED (
    SELECT n.id FROM notification_outbox n
    WHERE n.delivered_at IS NULL AND n.next_attempt_at <= clock_timestamp()
      AND (cardinality(%(full)s::text[]) = 0
           OR NOT EXISTS (
               SELECT 1 FROM task t WHERE t.id = n.task_id
                 AND coalesce(t.notify_url,
                              (SELECT jsonb_build_array(value) ->> 0 FROM fleet_setting
                               WHERE key = 'notify_url' AND jsonb_typeof(value) = 'string'))
                     = ANY(%(full)s::text[])))
    ORDER BY n.next_attempt_at, n.id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE notification_outbox n SET attempts = n.attempts + 1,
    next_attempt_at = clock_timestamp() + %(lease)s::interval
FROM due, task t
WHERE n.id = due.id AND t.id = n.task_id
RETURNING n.id, n.delivery_id, n.occurrence_id, n.task_id, n.event,
    n.payload::text AS payload, n.attempts,
    coalesce(t.notify_url, (SELECT jsonb_build_array(value) ->> 0 FROM fleet_setting
                            WHERE key = 'notify_url' AND jsonb_typeof(value) = 'string')) AS url,
    (CASE WHEN t.notify_url IS NOT NULL
          THEN CASE WHEN jsonb_typeof(t.notify_headers) = 'object' THEN t.notify_headers END
          ELSE (SELECT value FROM fleet_setting
                WHERE key = 'notify_headers' AND jsonb_typeof(value) = 'object') END)::text
        AS headers

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

-- fragment: outbox_deadline_not_owed_yet
-- Occurrence `o` has no `deadline` notification yet: none keyed on it, and, for a scheduled
-- firing, none keyed on its task and scheduled time (written by the unrecorded scan before the
-- firing had a row).
NOT EXISTS (SELECT 1 FROM notification_outbox n
            WHERE n.occurrence_id = o.id AND n.event = 'deadline')
  AND NOT EXISTS (SELECT 1 FROM notification_outbox n
                  WHERE o.trigger = 'schedule' AND n.task_id = o.task_id
                    AND n.scheduled_for = o.scheduled_for AND n.event = 'deadline')

-- fragment: outbox_deadline_row
-- The `deadline` notification of occurrence `o` of task `t`, as the columns occurrence_id,
-- task_id, scheduled_for, event, payload, created_at, next_attempt_at: a scheduled firing's
-- carries its scheduled time, its identity (notification_outbox_firing_deadline_key, revision
-- 0030); a manual or backfill occurrence's none (the occurrence is its identity). The payload's
-- `outcome` is the occurrence's status at that moment.
SELECT o.id, o.task_id, CASE WHEN o.trigger = 'schedule' THEN o.scheduled_for END, e.event,
    jsonb_build_object('event', e.event, 'task_id', t.id, 'task', t.name,
        'occurrence_id', o.id, 'scheduled_for', o.scheduled_for, 'outcome', o.status,
        'reason', 'not succeeded within its deadline of '
            || extract(epoch FROM least(t.deadline, interval '36525 days'))::bigint || ' s',
        'attempt', o.attempts,
        'run_id', (SELECT max(r.id) FROM run r WHERE r.occurrence_id = o.id),
        'firing_count', o.firing_count, 'first_scheduled_for', o.scheduled_for,
        'last_scheduled_for', coalesce(o.last_scheduled_for, o.scheduled_for)),
    clock_timestamp(), clock_timestamp()

-- name: outbox_enqueue_deadlines :rowcount
-- Records a `deadline` notification for each firing of a live task with a `deadline` whose
-- scheduled time plus the deadline falls in (`after`, `until`] and that had not succeeded by
-- then, whatever it is now (queued, launching, running, retrying, or ended otherwise, a firing
-- skipped behind a running `forbid` job included, one its calendar excluded not), once: the NOT
-- EXISTS on either key and the unique keys. The window is an index range of
-- occurrence_task_window_idx per task of task_deadline_idx (`after` and `until` are parameters,
-- so they bound the range); at most `limit` rows; only for a task with a notify URL that selects
-- `deadline`.
INSERT INTO notification_outbox (occurrence_id, task_id, scheduled_for, event, payload,
    created_at, next_attempt_at)
{{outbox_deadline_row}}
FROM task t
CROSS JOIN (VALUES ('deadline')) e(event)
JOIN occurrence o ON o.task_id = t.id
    AND o.scheduled_for <= %(until)s::timestamptz - least(t.deadline, interval '36525 days')
    AND o.scheduled_for > %(after)s::timestamptz - least(t.deadline, interval '36525 days')
WHERE t.deadline IS NOT NULL AND t.deleted_at IS NULL
  AND NOT (o.status = 'success'
           AND o.finished_at <= o.scheduled_for + least(t.deadline, interval '36525 days'))
  -- A firing its task's calendar excluded (revision 0036) was never meant to run (ADR 0025).
  AND o.reason IS DISTINCT FROM 'excluded'
  -- A scheduled firing a dispatch recorded past its deadline (at `created_at`, the dispatch's
  -- now) was judged by that dispatch, with the others it recorded late, in one notification
  -- (`outbox_enqueue_late_deadlines`); the firings an operator's command recorded (`operator`:
  -- paused, parked, rescheduled, deleted) are judged here.
  AND NOT (o.trigger = 'schedule'
           AND o.created_at >= o.scheduled_for + least(t.deadline, interval '36525 days')
           AND coalesce(o.reason, '') <> ALL(%(operator)s::text[]))
  AND {{outbox_task_notifies}}
  AND {{outbox_deadline_not_owed_yet}}
ORDER BY o.id
LIMIT %(limit)s
ON CONFLICT DO NOTHING

-- name: outbox_enqueue_late_deadlines :rowcount
-- In the transaction that just recorded the firings `ids` (the dispatcher's, their task locked):
-- ONE `deadline` notification per task for those whose scheduled time plus its task's deadline
-- has passed (`now`, the database clock the transaction read), keyed on the first of them not
-- notified yet (a firing notified before its row existed, by the unrecorded scan, is left out),
-- its payload counting them (`firing_count`, a summary row's firings included) and their span
-- (`first_scheduled_for`, `last_scheduled_for`): the catch-up after an outage of any length is
-- judged here, in one POST per task, and the scan leaves these firings alone (it skips the ones
-- a dispatch recorded past their deadline). 0 when the first's key is taken by a row committed
-- meanwhile (a scan's): the caller runs it once more, and the rest are keyed on the next.
INSERT INTO notification_outbox (occurrence_id, task_id, scheduled_for, event, payload,
    created_at, next_attempt_at)
SELECT o.id, o.task_id, CASE WHEN o.trigger = 'schedule' THEN o.scheduled_for END, 'deadline',
    jsonb_build_object('event', 'deadline', 'task_id', t.id, 'task', t.name,
        'occurrence_id', o.id, 'scheduled_for', o.scheduled_for, 'outcome', o.status,
        'reason', 'not succeeded within its deadline of '
            || extract(epoch FROM least(t.deadline, interval '36525 days'))::bigint || ' s',
        'attempt', o.attempts,
        'run_id', (SELECT max(r.id) FROM run r WHERE r.occurrence_id = o.id),
        'firing_count', g.firing_count, 'first_scheduled_for', g.first_scheduled_for,
        'last_scheduled_for', g.last_scheduled_for),
    clock_timestamp(), clock_timestamp()
FROM (
    SELECT o.task_id, (array_agg(o.id ORDER BY o.scheduled_for, o.id))[1] AS first_id,
        sum(o.firing_count) AS firing_count, min(o.scheduled_for) AS first_scheduled_for,
        max(coalesce(o.last_scheduled_for, o.scheduled_for)) AS last_scheduled_for
    FROM occurrence o
    JOIN task t ON t.id = o.task_id
    CROSS JOIN (VALUES ('deadline')) e(event)
    WHERE o.id = ANY(%(ids)s::bigint[]) AND t.deadline IS NOT NULL
      AND o.scheduled_for <= coalesce(%(now)s::timestamptz, now())
                             - least(t.deadline, interval '36525 days')
      AND {{outbox_task_notifies}}
      AND {{outbox_deadline_not_owed_yet}}
    GROUP BY o.task_id
) g
JOIN occurrence o ON o.id = g.first_id
JOIN task t ON t.id = g.task_id
ON CONFLICT DO NOTHING

-- name: outbox_enqueue_unrecorded_deadlines :rowcount
-- Records a `deadline` notification for the next firing (`next_run_at`) of each live, enabled,
-- unpaused task with a deadline (task_deadline_idx; a parked one included: its firing is not
-- dispatched) that is due and not recorded past its deadline (database clock, `now()`: the
-- transaction's first statement): a firing never dispatched, while the dispatch is held (a
-- parked task, a row held by another session) or before the catch-up after an outage. Keyed by
-- the firing (task_id, scheduled_for), with no occurrence: when it is recorded, neither the
-- scan nor the dispatcher writes another. `outcome` is null, `attempt` 0. At most `limit`.
INSERT INTO notification_outbox (occurrence_id, task_id, scheduled_for, event, payload,
    created_at, next_attempt_at)
SELECT NULL, t.id, t.next_run_at, e.event,
    jsonb_build_object('event', e.event, 'task_id', t.id, 'task', t.name,
        'occurrence_id', NULL, 'scheduled_for', t.next_run_at, 'outcome', NULL,
        'reason', 'not dispatched within its deadline of '
            || extract(epoch FROM least(t.deadline, interval '36525 days'))::bigint || ' s',
        'attempt', 0, 'run_id', NULL, 'firing_count', 1,
        'first_scheduled_for', t.next_run_at, 'last_scheduled_for', t.next_run_at),
    clock_timestamp(), clock_timestamp()
FROM task t
CROSS JOIN (VALUES ('deadline')) e(event)
WHERE t.deadline IS NOT NULL AND t.deleted_at IS NULL AND NOT t.paused AND t.status = 'enabled'
  AND t.next_run_at <= now() - least(t.deadline, interval '36525 days')
  AND {{outbox_task_notifies}}
  AND NOT EXISTS (SELECT 1 FROM notification_outbox n
                  WHERE n.task_id = t.id AND n.scheduled_for = t.next_run_at
                    AND n.event = 'deadline')
  AND NOT EXISTS (SELECT 1 FROM occurrence o
                  WHERE o.task_id = t.id AND o.scheduled_for = t.next_run_at
                    AND o.trigger = 'schedule')
  -- A firing on a date its task's calendars exclude is owed no deadline (ADR 0025).
  AND NOT EXISTS (SELECT 1 FROM task_calendar tc
                  JOIN calendar_date cd ON cd.calendar_id = tc.calendar_id
                  WHERE tc.task_id = t.id
                    AND cd.day = (t.next_run_at AT TIME ZONE t.timezone)::date)
ORDER BY t.id
LIMIT %(limit)s
ON CONFLICT DO NOTHING

-- name: deadline_mark_window :one
-- The window of firings' deadlines a scan judges next (database clock: the transaction's first
-- statement): from `lookback` before the fleet's mark (a firing recorded by a transaction that
-- committed after the scan that passed it; firings recorded by an operator's command), to at
-- most `lookback` after it, and not past now; `caught_up` when that reaches now. Without the
-- row (deleted by hand): the last `lookback`, as before revision 0030.
SELECT least(m.judged_through, now()) - %(lookback)s::interval AS after,
    least(now(), m.judged_through + %(lookback)s::interval) AS until,
    m.judged_through + %(lookback)s::interval >= now() AS caught_up
FROM (SELECT coalesce(max(judged_through), now() - %(lookback)s::interval) AS judged_through
      FROM deadline_mark) m

-- name: deadline_mark_advance :rowcount
-- Raises the fleet's mark to `until` once every deadline up to it was judged (never lowers it:
-- two daemons scanning at once both raise it).
UPDATE deadline_mark SET judged_through = %(until)s, updated_at = clock_timestamp()
WHERE judged_through < %(until)s

-- name: outbox_prune_unrecorded :rowcount
-- Deletes `deadline` notifications written before their firing had a row (no occurrence, so no
-- cascade) once older than their task's history retention (its own, else `retention`, the
-- fleet's; either capped at 36,525 days; NULL: kept), as the firing's row would be: a range of
-- notification_outbox_unrecorded_idx below the shortest retention any task has
-- (`min_retention`), at most `limit`, rows held elsewhere skipped.
DELETE FROM notification_outbox WHERE id IN (
    SELECT n.id FROM notification_outbox n JOIN task t ON t.id = n.task_id
    WHERE n.occurrence_id IS NULL
      AND n.created_at < now() - least(%(min_retention)s::interval, interval '36525 days')
      AND n.created_at < now() - least(coalesce(t.history_retention, %(retention)s::interval),
                                       interval '36525 days')
    ORDER BY n.created_at
    LIMIT %(limit)s
    FOR UPDATE OF n SKIP LOCKED)
