-- name: health_jit_off :one
-- JIT off for the rest of the transaction (SET LOCAL semantics: fine through PgBouncer): the
-- health reads' plans cost past jit_above_cost at 10,000 tasks, and compiling them took 1.5 s of
-- a 1.8 s statement (EXPLAIN ANALYZE on bench/health.py's database) for a few ms of execution.
SELECT set_config('jit', 'off', true)

-- name: health_signals :many
-- What each live task's verdict is decided from (`tasks health`; domain/health.py), every task
-- or the one `id`, in the byte order of names: its row; its skipped and expired occurrences
-- scheduled in the window (now - window, now], grouped: the fleet's in one range of
-- occurrence_task_lost_idx (the window's lost rows only, whatever the number of tasks); its
-- queued occurrences past their start deadline (occurrence_task_active_idx, the reconciler's
-- rule); the statuses of its newest `attempts` finished runs, newest first, from its newest
-- `scan` outcomes (occurrence_task_outcome_idx backwards), read only when its newest outcome
-- is not a success. Bounded per task by its active rows
-- and `attempts` runs, and for the fleet by the window's lost rows. With `after` and `batch`
-- (the console's verdict filter, ADR 0023): the next `batch` tasks by name after `after`, one
-- range of task_name_c_idx (`batch` NULL: no LIMIT).
WITH clock AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
lost AS (
    SELECT g.task_id, jsonb_agg(jsonb_build_object('status', g.status, 'reason', g.reason,
        'overlap', g.overlap, 'rows', g.n, 'firings', g.firings)) AS groups
    FROM (SELECT o.task_id, o.status, o.reason, o.overlap, count(*) AS n,
              sum(o.firing_count) AS firings
          FROM clock, occurrence o
          WHERE o.status IN ('skipped', 'expired')
            AND o.scheduled_for > clock.now - %(window)s::interval
            AND o.scheduled_for <= clock.now
            AND (%(id)s::bigint IS NULL OR o.task_id = %(id)s::bigint)
          GROUP BY o.task_id, o.status, o.reason, o.overlap) g
    GROUP BY g.task_id
)
SELECT t.id, t.name, t.paused, t.parked_at, t.park_error, t.status, t.misfire, t.next_run_at,
    CASE WHEN t.misfire_grace > interval '36525 days' THEN interval '36525 days'
         ELSE t.misfire_grace END AS misfire_grace,
    clock.now, lost.groups AS lost,
    coalesce(deadline.n, 0) AS queued_past_deadline,
    coalesce(recent.statuses, ARRAY[]::text[]) AS recent_attempts
FROM clock CROSS JOIN task t
LEFT JOIN lost ON lost.task_id = t.id
LEFT JOIN LATERAL (
    SELECT count(*) AS n FROM occurrence o
    WHERE o.task_id = t.id AND o.finished_at IS NULL AND o.status IN {{active_statuses}}
      AND o.status = 'queued' AND t.start_deadline IS NOT NULL
      AND clock.now > CASE WHEN o.attempts + o.interruptions > 0 OR o.trigger = 'backfill'
                           THEN o.not_before
                           ELSE o.scheduled_for + coalesce(o.spread_offset, interval '0') END
                      + least(t.start_deadline, interval '36525 days')
) deadline ON true
LEFT JOIN LATERAL (
    SELECT status FROM occurrence
    WHERE task_id = t.id AND finished_at IS NOT NULL AND status <> 'skipped'
    ORDER BY occurrence_seq DESC LIMIT 1
) newest ON true
LEFT JOIN LATERAL (
    -- None when the newest outcome succeeded: its last run did, so no streak of failures ends
    -- the history (most tasks: no run is read). No ORDER BY above the join: a nested loop over
    -- the newest outcomes, in order, stops at the `attempts`-th run (a sort would read all
    -- `scan`); the aggregate orders what it got.
    SELECT array_agg(a.status ORDER BY a.seq DESC, a.run_id DESC) AS statuses
    FROM (SELECT o.occurrence_seq AS seq, r.id AS run_id, r.status
          FROM (SELECT id, occurrence_seq FROM occurrence
                WHERE task_id = t.id AND finished_at IS NOT NULL AND status <> 'skipped'
                  AND newest.status <> 'success'
                ORDER BY occurrence_seq DESC LIMIT %(scan)s) o
          CROSS JOIN LATERAL (
              SELECT r.id, r.status FROM run r
              WHERE r.occurrence_id = o.id AND r.status <> 'running'
              ORDER BY r.id DESC LIMIT %(attempts)s) r
          LIMIT %(attempts)s) a
) recent ON true
WHERE t.deleted_at IS NULL AND (%(id)s::bigint IS NULL OR t.id = %(id)s::bigint)
  AND (%(after)s::text IS NULL OR t.name COLLATE "C" > %(after)s)
ORDER BY t.name COLLATE "C"
LIMIT %(batch)s

-- name: health_window :many
-- The window's figures of the tasks `ids` (a page's): their rows as the daemon reads them (their
-- secrets as task_secrets shows them to the connected role: the reader's masked, ADR 0031);
-- their occurrences scheduled in (now - window, now] grouped by trigger, status, reason and
-- overlap, with each group's newest end (one index-only range of occurrence_task_window_idx per
-- task); and over the runs of their newest `sample` firings of the window
-- (occurrence_task_scheduled_for_idx backwards): queue wait (first attempt's start - scheduled
-- time) and run time p50/p99 in seconds, how many runs, and how many ran past the next firing's
-- scheduled time (the next firing row's, or the task's next_run_at for the newest).
WITH clock AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
SELECT {{task_defined}}, secrets.notify_url, secrets.payload::text AS payload,
    secrets.notify_headers::text AS notify_headers,
    notify_header_refs::text AS notify_header_refs, last_outcome_seq, last_occurrence_id,
    last_scheduled_for, last_status, last_finished_at, last_error,
    clock.now, coalesce(w.groups, '[]'::jsonb) AS groups,
    s.runs, s.outlasting, s.wait_p50, s.wait_p99, s.run_p50, s.run_p99
FROM clock CROSS JOIN task t {{task_secrets}}
LEFT JOIN LATERAL (
    SELECT jsonb_agg(jsonb_build_object('trigger', g.trigger, 'status', g.status,
        'reason', g.reason, 'overlap', g.overlap, 'rows', g.n, 'firings', g.firings,
        'last_finished_at', g.last_finished_at)) AS groups
    FROM (SELECT o.trigger, o.status, o.reason, o.overlap, count(*) AS n,
              sum(o.firing_count) AS firings, max(o.finished_at) AS last_finished_at
          FROM occurrence o
          WHERE o.task_id = t.id AND o.scheduled_for > clock.now - %(window)s::interval
            AND o.scheduled_for <= clock.now
          GROUP BY o.trigger, o.status, o.reason, o.overlap) g
) w ON true
LEFT JOIN LATERAL (
    SELECT count(r.id) AS runs,
        count(r.id) FILTER (WHERE coalesce(r.finished_at, clock.now) > f.next_for) AS outlasting,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM r.started_at - f.scheduled_for))
            FILTER (WHERE r.attempt = 1) AS wait_p50,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM r.started_at - f.scheduled_for))
            FILTER (WHERE r.attempt = 1) AS wait_p99,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM r.finished_at - r.started_at))
            AS run_p50,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM r.finished_at - r.started_at))
            AS run_p99
    FROM (SELECT n.id, n.scheduled_for,
              lead(n.scheduled_for, 1, t.next_run_at) OVER (ORDER BY n.scheduled_for) AS next_for
          FROM (SELECT id, scheduled_for FROM occurrence
                WHERE task_id = t.id AND trigger = 'schedule'
                  AND scheduled_for > clock.now - %(window)s::interval
                  AND scheduled_for <= clock.now
                ORDER BY scheduled_for DESC LIMIT %(sample)s) n) f
    JOIN run r ON r.occurrence_id = f.id
) s ON true
WHERE t.id = ANY(%(ids)s::bigint[])
