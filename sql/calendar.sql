-- name: calendar_insert :one
-- Creates a calendar, or with `replace` rewrites the one of that name (its dates are written
-- after, `calendar_dates_replace`); no row when it exists and `replace` is false (the caller's
-- Conflict). Locks the row it returns: a concurrent `calendars delete` waits for the commit.
INSERT INTO calendar AS c (name, source_kind, first_day, last_day, created_at, updated_at)
VALUES (%(name)s, %(source_kind)s, %(first_day)s, %(last_day)s,
        coalesce(%(now)s::timestamptz, now()), coalesce(%(now)s::timestamptz, now()))
ON CONFLICT (name) DO UPDATE SET source_kind = EXCLUDED.source_kind,
    first_day = EXCLUDED.first_day, last_day = EXCLUDED.last_day,
    updated_at = EXCLUDED.updated_at
    WHERE %(replace)s::boolean
RETURNING c.id, c.name, c.source_kind, c.first_day, c.last_day, c.created_at, c.updated_at,
    (c.xmax::text <> '0') AS replaced

-- name: calendar_dates_replace :scalar
-- A calendar's dates become `days` (a date array): the ones not given are deleted, the new ones
-- inserted, in one statement. Returns how many the calendar holds.
WITH gone AS (
    DELETE FROM calendar_date d
    WHERE d.calendar_id = %(id)s AND d.day <> ALL (%(days)s::date[])
), added AS (
    INSERT INTO calendar_date (calendar_id, day)
    SELECT %(id)s, day FROM unnest(%(days)s::date[]) AS day
    ON CONFLICT DO NOTHING
)
SELECT cardinality(%(days)s::date[])

-- name: calendar_list :many
-- Every calendar by name, with how many dates it holds and how many live tasks name it.
SELECT c.id, c.name, c.source_kind, c.first_day, c.last_day, c.created_at, c.updated_at,
    (SELECT count(*) FROM calendar_date d WHERE d.calendar_id = c.id) AS date_count,
    (SELECT count(*) FROM task_calendar tc JOIN task t ON t.id = tc.task_id
     WHERE tc.calendar_id = c.id AND t.deleted_at IS NULL) AS task_count
FROM calendar c
ORDER BY c.name COLLATE "C"

-- name: calendar_find :one
-- One calendar by name, with its dates (in order) and the live tasks naming it.
SELECT c.id, c.name, c.source_kind, c.first_day, c.last_day, c.created_at, c.updated_at,
    ARRAY(SELECT d.day FROM calendar_date d WHERE d.calendar_id = c.id ORDER BY d.day) AS days,
    ARRAY(SELECT t.name FROM task_calendar tc JOIN task t ON t.id = tc.task_id
          WHERE tc.calendar_id = c.id AND t.deleted_at IS NULL ORDER BY t.name) AS tasks
FROM calendar c
WHERE c.name = %(name)s

-- name: calendar_lock :scalar
-- Locks a calendar by name, returning its id: a task's link to it (the foreign key's FOR KEY
-- SHARE) waits for the deletion, and the deletion waits for a link not yet committed.
SELECT c.id FROM calendar c WHERE c.name = %(name)s FOR UPDATE OF c

-- name: calendar_users :many
-- The live tasks naming a calendar, read after its lock (a statement of its own, so its
-- snapshot sees a link committed while the lock was awaited).
SELECT t.name FROM task_calendar tc JOIN task t ON t.id = tc.task_id
WHERE tc.calendar_id = %(id)s AND t.deleted_at IS NULL
ORDER BY t.name

-- name: calendar_delete :rowcount
-- Deletes a locked calendar no live task names: the links of deleted tasks go first (their
-- history keeps its rows; the calendar's RESTRICT would refuse otherwise), its dates with it.
WITH unlinked AS (
    DELETE FROM task_calendar tc USING task t
    WHERE tc.calendar_id = %(id)s AND t.id = tc.task_id AND t.deleted_at IS NOT NULL
)
DELETE FROM calendar WHERE id = %(id)s

-- name: task_calendars_set :many
-- A locked task's calendars become the named ones (an empty array: none), in one statement;
-- returns the names found, so the caller refuses an unknown one (and rolls back). Each named
-- calendar is locked FOR KEY SHARE by the link's foreign key: a concurrent delete waits.
WITH wanted AS (
    SELECT c.id, c.name FROM calendar c WHERE c.name = ANY (%(names)s::text[])
), gone AS (
    DELETE FROM task_calendar tc
    WHERE tc.task_id = %(task_id)s AND tc.calendar_id NOT IN (SELECT id FROM wanted)
), added AS (
    INSERT INTO task_calendar (task_id, calendar_id)
    SELECT %(task_id)s, w.id FROM wanted w
    ON CONFLICT DO NOTHING
)
SELECT name FROM wanted

-- name: task_calendar_days :many
-- The dispatcher's read, in its transaction, for a task with calendars: the excluded dates of
-- all its calendars in [low, high] (an index range of calendar_date's key per calendar).
SELECT DISTINCT d.day
FROM task_calendar tc
JOIN calendar_date d ON d.calendar_id = tc.calendar_id
WHERE tc.task_id = %(task_id)s AND d.day BETWEEN %(low)s AND %(high)s

-- name: task_calendar_days_named :many
-- `tasks next`: as task_calendar_days, each date with the calendars that hold it.
SELECT d.day, array_agg(c.name ORDER BY c.name) AS calendars
FROM task_calendar tc
JOIN calendar c ON c.id = tc.calendar_id
JOIN calendar_date d ON d.calendar_id = tc.calendar_id
WHERE tc.task_id = %(task_id)s AND d.day BETWEEN %(low)s AND %(high)s
GROUP BY d.day

-- name: calendar_newest_scheduled_row :one
-- The task's newest scheduled row (occurrence_task_scheduled_for_idx, one probe a partition) and the last
-- firing it records: the dispatcher extends an excluded run's row with the excluded firings
-- that follow it (ADR 0025).
SELECT id, status, reason, coalesce(last_scheduled_for, scheduled_for) AS ends
FROM occurrence
WHERE task_id = %(task_id)s AND trigger = 'schedule'
ORDER BY scheduled_for DESC
LIMIT 1

-- name: calendar_extend_excluded_row :one
-- Extends the locked task's excluded run by the `count` firings after it, up to `last`; the row
-- keeps its first firing (its key), so consecutive excluded firings stay one row.
UPDATE occurrence SET firing_count = firing_count + %(count)s, last_scheduled_for = %(last)s,
    updated_at = %(now)s
WHERE id = %(id)s AND status = 'skipped' AND reason = 'excluded'
RETURNING id
