-- name: audit_clock :scalar
-- The database clock the audit window is resolved against (`now`: a test's pinned time).
SELECT coalesce(%(now)s::timestamptz, now())

-- name: audit_firing_recorded_twice :many
-- Firings (task, scheduled_for) with more than one scheduled, or more than one backfill,
-- occurrence.
SELECT task_id, scheduled_for, trigger, array_agg(id ORDER BY id) AS occurrence_ids
FROM occurrence
WHERE trigger <> 'manual'
  AND scheduled_for >= coalesce(%(since)s::timestamptz, '-infinity')
GROUP BY task_id, scheduled_for, trigger
HAVING count(*) > 1
ORDER BY task_id, scheduled_for, trigger

-- name: audit_task_events :many
-- Every task's definition history: schedule and active state, in the order they were written;
-- `either_days` false for the rows written before revision 0026 (their cron day fields read as
-- croniter reads them).
SELECT id, task_id, at, active, schedule_kind, cron_expr, every, run_at, anchor_at, timezone,
    dst_gap, dst_overlap, coalesce(either_days, false) AS either_days
FROM task_event
ORDER BY task_id, id

-- name: audit_task_pruned :many
-- Per task that may have lost history to the prune: the instant its retention keeps from (now
-- minus its own retention, else `retention`, the fleet's; capped at 36,525 days as the prune caps
-- it; NULL with neither) and the newest scheduled firing a prune recorded deleting (task_pruned,
-- revision 0016; NULL when none did, or only builds before it).
SELECT t.id AS task_id,
    now() - CASE WHEN coalesce(t.history_retention, %(retention)s::interval)
                      > interval '36525 days'
                 THEN interval '36525 days'
                 ELSE coalesce(t.history_retention, %(retention)s::interval) END AS retained_from,
    p.pruned_through
FROM task t LEFT JOIN task_pruned p ON p.task_id = t.id
WHERE t.history_retention IS NOT NULL OR %(retention)s::interval IS NOT NULL
   OR p.task_id IS NOT NULL
ORDER BY t.id

-- name: audit_task_next_run :many
-- Each task's next_run_at: the firing its dispatch reaches next. Firings at or after it are
-- owed, not missing (the dispatcher records the ones it passes when it advances it).
SELECT id AS task_id, next_run_at FROM task WHERE next_run_at IS NOT NULL ORDER BY id

-- name: audit_scheduled_occurrences :many
-- The scheduled firings one task recorded in [low, high]: exact rows and summary ranges.
SELECT scheduled_for, last_scheduled_for FROM occurrence
WHERE task_id = %(task_id)s AND trigger = 'schedule' AND scheduled_for <= %(high)s
  AND (scheduled_for >= %(low)s OR (firing_count > 1 AND last_scheduled_for >= %(low)s))

-- name: audit_forbid_active_twice :many
-- `forbid` tasks with more than one active occurrence right now.
SELECT task_id, array_agg(id ORDER BY id) AS occurrence_ids FROM occurrence
WHERE overlap = 'forbid' AND status IN {{active_statuses}}
GROUP BY task_id
HAVING count(*) > 1
ORDER BY task_id

-- name: audit_exclusive_runs :many
-- Runs that must not overlap their group's: by task for `forbid` and `replace` occurrences
-- and for backfill ones queued one at a time (a `forbid` or `replace` task's backfill is
-- recorded as `queue`), by
-- concurrency key for keyed ones; only runs still executing at or after `since`.
SELECT 'task' AS scope, o.task_id::text AS group_key, r.id, r.started_at, r.finished_at
FROM run r JOIN occurrence o ON o.id = r.occurrence_id
WHERE (o.overlap = 'forbid' OR o.overlap = 'replace'
       OR (o.trigger = 'backfill' AND o.overlap = 'queue'))
  AND coalesce(r.finished_at, 'infinity') > coalesce(%(since)s::timestamptz, '-infinity')
UNION ALL
SELECT 'concurrency_key', o.concurrency_key, r.id, r.started_at, r.finished_at
FROM run r JOIN occurrence o ON o.id = r.occurrence_id
WHERE o.concurrency_key IS NOT NULL
  AND coalesce(r.finished_at, 'infinity') > coalesce(%(since)s::timestamptz, '-infinity')
ORDER BY 1, 2, 4, 3

-- name: audit_fifo_order :many
-- Occurrences whose first run started while an older one of their concurrency key (or of their
-- `queue` task), already queued, still waited for its first run. "Already queued" is exact where
-- both rows have it: the older one's inserting transaction was visible to the younger one's
-- first claim. Rows from before revision 0003 fall back to `created_at` (a transaction's start).
WITH first_run AS (
    SELECT DISTINCT ON (occurrence_id) occurrence_id, id, started_at FROM run
    ORDER BY occurrence_id, started_at, id
), started AS (
    SELECT y.id, y.task_id, y.concurrency_key, y.overlap, y.occurrence_seq, y.scheduled_for,
        y.created_at, y.first_claim_snapshot, f.id AS run_id, f.started_at
    FROM occurrence y JOIN first_run f ON f.occurrence_id = y.id
    WHERE f.started_at >= coalesce(%(since)s::timestamptz, '-infinity')
      AND (y.concurrency_key IS NOT NULL OR y.overlap = 'queue')
)
SELECT 'concurrency_key' AS scope, y.concurrency_key AS group_key, y.id AS occurrence_id,
    y.run_id, y.started_at, x.id AS waiting_id, fx.started_at AS waiting_first_started_at,
    x.finished_at AS waiting_finished_at
FROM started y
JOIN occurrence x ON x.concurrency_key = y.concurrency_key
    AND (x.scheduled_for, x.id) < (y.scheduled_for, y.id)
    AND CASE WHEN x.created_xid IS NULL OR y.first_claim_snapshot IS NULL
             THEN x.created_at < y.created_at
             ELSE pg_visible_in_snapshot(x.created_xid, y.first_claim_snapshot) END
    AND (x.finished_at IS NULL OR x.finished_at > y.started_at)
LEFT JOIN first_run fx ON fx.occurrence_id = x.id
WHERE fx.started_at IS NULL OR fx.started_at > y.started_at
UNION ALL
SELECT 'queue_task', y.task_id::text, y.id, y.run_id, y.started_at, x.id, fx.started_at,
    x.finished_at
FROM started y
JOIN occurrence x ON x.task_id = y.task_id
    AND x.occurrence_seq < y.occurrence_seq
    AND CASE WHEN x.created_xid IS NULL OR y.first_claim_snapshot IS NULL
             THEN x.created_at < y.created_at
             ELSE pg_visible_in_snapshot(x.created_xid, y.first_claim_snapshot) END
    AND (x.finished_at IS NULL OR x.finished_at > y.started_at)
LEFT JOIN first_run fx ON fx.occurrence_id = x.id
WHERE y.overlap = 'queue' AND (fx.started_at IS NULL OR fx.started_at > y.started_at)
ORDER BY 1, 2, 5, 3, 6

-- name: audit_budget_runs :many
-- Runs executing at or after `since`, for the budget sweep.
SELECT id, started_at, finished_at FROM run
WHERE coalesce(finished_at, 'infinity') > coalesce(%(since)s::timestamptz, '-infinity')
ORDER BY started_at, id

-- name: audit_budget_changes :many
-- Every value the fleet budget took, and when.
SELECT at, value FROM fleet_setting_event_shown WHERE key = 'max_concurrent_runs'
ORDER BY at, id

-- name: audit_success_twice :many
-- Occurrences with more than one successful run.
SELECT occurrence_id, array_agg(id ORDER BY id) AS run_ids FROM run
WHERE status = 'success'
GROUP BY occurrence_id
HAVING count(*) > 1
   AND max(started_at) >= coalesce(%(since)s::timestamptz, '-infinity')
ORDER BY occurrence_id

-- name: audit_takeover_overdue :many
-- Running runs that a live instance should have taken over: past their takeover point (or the
-- instance's start, or the end of the quiet period after a restart or a failover, whichever is
-- last) by more than that instance's reconcile interval plus `slack`, on the database clock
-- (`now`: a test's pinned time, so a test controls where the quiet period ends).
SELECT r.id AS run_id, r.occurrence_id, r.owner, r.takeover_at,
    array_agg(i.id ORDER BY i.id) AS live_instance_ids, c.at AS checked_at
FROM run r
CROSS JOIN (SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS at) c
CROSS JOIN (
    SELECT {{quiet_from}} + coalesce(max(lease_ttl + lease_grace), interval '0')
        AS quiet_until
    FROM instance
) q
JOIN instance i ON NOT i.stopping AND i.heartbeat_at + i.lease_ttl > c.at
    AND greatest(r.takeover_at, i.started_at, q.quiet_until) + i.reconcile_interval + %(slack)s
        < c.at
WHERE r.status = 'running'
GROUP BY r.id, r.occurrence_id, r.owner, r.takeover_at, c.at
ORDER BY r.id

-- name: audit_one_shots :many
-- Live one-shot tasks past `enabled`, with the occurrence that decides their status (their
-- newest firing by sequence; a manual trigger never decides it), if any.
SELECT t.id AS task_id, t.status, o.id AS occurrence_id, o.occurrence_seq,
    o.status AS occurrence_status
FROM task t
LEFT JOIN LATERAL (
    SELECT id, occurrence_seq, status FROM occurrence
    WHERE task_id = t.id AND trigger <> 'manual'
    ORDER BY occurrence_seq DESC LIMIT 1
) o ON true
WHERE t.schedule_kind = 'once' AND t.status <> 'enabled' AND t.deleted_at IS NULL
ORDER BY t.id

-- name: audit_lease_token_order :many
-- Runs whose lease token is not above that of the run of their occurrence that started before.
SELECT occurrence_id, previous_id, id AS run_id, previous_token, lease_token FROM (
    SELECT occurrence_id, id, lease_token, started_at,
        lag(id) OVER w AS previous_id, lag(lease_token) OVER w AS previous_token
    FROM run
    WHERE occurrence_id IN (
        SELECT occurrence_id FROM run
        WHERE started_at >= coalesce(%(since)s::timestamptz, '-infinity'))
    WINDOW w AS (PARTITION BY occurrence_id ORDER BY started_at, lease_token, id)
) ordered
WHERE previous_token >= lease_token
  AND started_at >= coalesce(%(since)s::timestamptz, '-infinity')
ORDER BY occurrence_id, run_id

-- name: audit_cancelled_run_still_running :many
-- Cancelled occurrences with a run still running.
SELECT o.id AS occurrence_id, o.task_id, array_agg(r.id ORDER BY r.id) AS run_ids
FROM occurrence o JOIN run r ON r.occurrence_id = o.id
WHERE o.status = 'cancelled' AND r.status = 'running'
GROUP BY o.id, o.task_id
ORDER BY o.id

-- name: audit_started_before_spread :many
-- Runs started before their occurrence's recorded spread start (scheduled_for plus the spread
-- offset its dispatch drew, `--spread`), at or after `since`.
SELECT r.id AS run_id, r.occurrence_id, o.task_id, r.started_at,
    o.scheduled_for + o.spread_offset AS spread_start
FROM occurrence o JOIN run r ON r.occurrence_id = o.id
WHERE o.spread_offset IS NOT NULL
  AND r.started_at < o.scheduled_for + o.spread_offset
  AND r.started_at >= coalesce(%(since)s::timestamptz, '-infinity')
ORDER BY r.id

-- name: audit_epoch_change_reruns :many
-- Per failover the fleet saw (epoch_changes, sql/epoch.sql; oldest first): the occurrences
-- created before its first sighting with a run started after it (and at or after `since`).
-- Their claims on the lost branch may have run too: their count, and the first `shown` ids.
SELECT e.timeline, e.first_seen_at, count(DISTINCT o.id) AS occurrence_count,
    (array_agg(DISTINCT o.id ORDER BY o.id))[1:%(shown)s] AS occurrence_ids
FROM {{epoch_changes}} e
JOIN run r ON r.started_at > e.first_seen_at
    AND r.started_at >= coalesce(%(since)s::timestamptz, '-infinity')
JOIN occurrence o ON o.id = r.occurrence_id AND o.created_at < e.first_seen_at
GROUP BY e.system_identifier, e.timeline, e.first_seen_at
ORDER BY e.first_seen_at, e.timeline
