-- name: retention_min_override :scalar
-- The shortest history retention a task overrides the fleet's with (task_retention_idx), capped
-- at 36,525 days (100 years, domain.limit.MAX_DURATION): a longer one, written by hand, is one no
-- row outlives, and it would not subtract from now() (nor fit a Python timedelta).
SELECT CASE WHEN min(history_retention) > interval '36525 days' THEN interval '36525 days'
            ELSE min(history_retention) END
FROM task WHERE history_retention IS NOT NULL

-- name: retention_prune :one
-- Deletes one batch of terminal occurrences, with their runs, older than their task's retention
-- (its own, else `retention`, the fleet's; NULL: kept). The scan walks occurrence_finished_idx
-- oldest first from the cursor (`after_at`, `after_id`), at most `scan` rows, below the oldest
-- cutoff any task can have (`min_retention`). A live task keeps its latest outcome and every
-- occurrence newer than it (one-shot status, `tasks show`: retention_doomed); a deleted task
-- keeps nothing. Rows another transaction holds are skipped, and nothing with a running run is
-- touched. In the same
-- statement, each task's newest deleted scheduled firing (a summary row's last) raises its
-- task_pruned mark (revision 0016; `audit` owes no firing at or before it), in task id order so
-- two prunes never wait on each other's marks in a cycle. The pruned occurrences' notifications
-- and firing keys are deleted with them. Returns the counts and the cursor to go
-- on from (NULL when the scan reached the end).
WITH scanned AS MATERIALIZED (
    {{retention_scanned}}
), doomed AS MATERIALIZED (
    {{retention_doomed}}
    ORDER BY o.id
    LIMIT %(limit)s
    FOR UPDATE OF o SKIP LOCKED
), runs AS (
    DELETE FROM run r USING doomed WHERE r.occurrence_id = doomed.id RETURNING r.id
), occurrences AS (
    DELETE FROM occurrence o USING doomed WHERE o.id = doomed.id
    RETURNING o.id, o.task_id, o.trigger, o.scheduled_for,
        coalesce(o.last_scheduled_for, o.scheduled_for) AS firing
), notifications AS (
    -- What a foreign key's ON DELETE CASCADE did before issue 47 (nothing refers to a
    -- partitioned occurrence by key).
    DELETE FROM notification_outbox n USING occurrences o WHERE n.occurrence_id = o.id
), keys AS (
    -- A pruned firing's key goes with it (guarantee 2 is kept as long as the firing's row).
    DELETE FROM firing_key k USING occurrences o
    WHERE k.task_id = o.task_id AND k.scheduled_for = o.scheduled_for AND k.trigger = o.trigger
), marked AS (
    INSERT INTO task_pruned AS p (task_id, pruned_through, updated_at)
    SELECT task_id, max(firing), coalesce(%(now)s::timestamptz, now()) FROM occurrences
    WHERE trigger = 'schedule'
    GROUP BY task_id
    ORDER BY task_id
    ON CONFLICT (task_id) DO UPDATE
        SET pruned_through = greatest(p.pruned_through, excluded.pruned_through),
            updated_at = excluded.updated_at
), last AS (
    SELECT finished_at, id FROM scanned ORDER BY finished_at DESC, id DESC LIMIT 1
)
SELECT (SELECT count(*) FROM occurrences) AS occurrences, (SELECT count(*) FROM runs) AS runs,
    (SELECT count(*) FROM scanned) AS scanned,
    (SELECT finished_at FROM last) AS after_at, (SELECT id FROM last) AS after_id

-- name: retention_preview :one
-- What retention_prune would delete in the same scan, without locking or deleting anything.
WITH scanned AS MATERIALIZED (
    {{retention_scanned}}
), doomed AS MATERIALIZED (
    {{retention_doomed}}
), last AS (
    SELECT finished_at, id FROM scanned ORDER BY finished_at DESC, id DESC LIMIT 1
)
SELECT (SELECT count(*) FROM doomed) AS occurrences,
    (SELECT count(*) FROM run r JOIN doomed d ON d.id = r.occurrence_id) AS runs,
    (SELECT count(*) FROM scanned) AS scanned,
    (SELECT finished_at FROM last) AS after_at, (SELECT id FROM last) AS after_id

-- fragment: retention_scanned
-- One bounded step of the scan retention_prune and retention_preview share: up to `scan`
-- finished occurrences older than the shortest retention, after the cursor, in
-- occurrence_finished_idx order.
SELECT o.id, o.finished_at FROM occurrence o
    WHERE o.finished_at < coalesce(%(now)s::timestamptz, now())
                          - least(%(min_retention)s::interval, interval '36525 days')
      AND (o.finished_at, o.id) > (%(after_at)s::timestamptz, %(after_id)s::bigint)
    ORDER BY o.finished_at, o.id
    LIMIT %(scan)s

-- fragment: retention_doomed
-- Of the scanned, those past their task's retention (or the fleet's; either capped at 36,525
-- days, so no value written by hand subtracts past the calendar) that are neither the task's
-- latest outcome nor newer, and have no running run; a deleted task keeps nothing. The latest
-- outcome is read from the occurrences, as `tasks show` reads it (a newer finished one, not
-- `skipped`: occurrence_task_outcome_idx, revision 0021), never from the task row's
-- `last_outcome_seq`, which a recurring task's successes no longer write. With
-- `task_id`, only that task's (the pruner's fallback when a batch cannot delete one task's rows).
SELECT o.id FROM occurrence o
    JOIN scanned s ON s.id = o.id
    JOIN task t ON t.id = o.task_id
    WHERE o.finished_at < coalesce(%(now)s::timestamptz, now()) - CASE
            WHEN coalesce(t.history_retention, %(retention)s::interval) > interval '36525 days'
            THEN interval '36525 days'
            ELSE coalesce(t.history_retention, %(retention)s::interval) END
      AND (%(task_id)s::bigint IS NULL OR o.task_id = %(task_id)s::bigint)
      AND (t.deleted_at IS NOT NULL OR EXISTS (
            SELECT 1 FROM occurrence newer
            WHERE newer.task_id = o.task_id AND newer.occurrence_seq > o.occurrence_seq
              AND newer.finished_at IS NOT NULL AND newer.status <> 'skipped'))
      AND NOT EXISTS (SELECT 1 FROM run r WHERE r.finished_at IS NULL AND r.occurrence_id = o.id
                        AND r.status = 'running')

-- name: retention_window :one
-- One step of retention_prune's scan (the same cursor and bound), without locking or deleting:
-- the ids of the tasks whose occurrences it reads, in id order (the units the pruner prunes one
-- at a time when a batch fails on one task's rows), how many rows it read, and the cursor after
-- it.
WITH scanned AS MATERIALIZED (
    {{retention_scanned}}
), last AS (
    SELECT finished_at, id FROM scanned ORDER BY finished_at DESC, id DESC LIMIT 1
)
SELECT (SELECT coalesce(array_agg(DISTINCT o.task_id ORDER BY o.task_id), ARRAY[]::bigint[])
        FROM occurrence o JOIN scanned s ON s.id = o.id) AS task_ids,
    (SELECT count(*) FROM scanned) AS scanned,
    (SELECT finished_at FROM last) AS after_at, (SELECT id FROM last) AS after_id

-- name: retention_jit_off :one
-- JIT off for the rest of the prune's transaction (SET LOCAL semantics: fine through PgBouncer):
-- over a history of 400 partitions the prune's plan was JIT-compiled (7,373 functions) and no
-- pass finished (bench/history_scale.py, issue 47).
SELECT set_config('jit', 'off', true)
