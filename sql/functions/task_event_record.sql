-- task_event_record: the trigger function that appends a task's schedule history to
-- `task_event` (`created`, `changed`, `deleted`), which `audit` checks the occurrences against.
--
-- Fired by the triggers `task_event_on_insert` (AFTER INSERT ON task) and `task_event_on_change`
-- (AFTER UPDATE ON task, when the schedule, `paused`, parked or deleted state changed), so every
-- writer, of any build, is recorded. `active` is the schedule firing: not paused, not parked,
-- not deleted. It runs as the writer: a role that writes `task` needs INSERT on `task_event`.
--
-- Since migration 0002, which creates the triggers. This file is the live text (ADR 0028).

CREATE OR REPLACE FUNCTION task_event_record()
RETURNS trigger
LANGUAGE plpgsql
AS $function$
BEGIN
    INSERT INTO task_event (task_id, at, kind, schedule_kind, cron_expr, every, run_at, anchor_at,
                            timezone, dst_gap, dst_overlap, active)
    VALUES (NEW.id, now(),
            CASE WHEN TG_OP = 'INSERT' THEN 'created'
                 WHEN NEW.deleted_at IS NOT NULL THEN 'deleted' ELSE 'changed' END,
            NEW.schedule_kind, NEW.cron_expr, NEW.every, NEW.run_at, NEW.anchor_at, NEW.timezone,
            NEW.dst_gap, NEW.dst_overlap,
            NOT NEW.paused AND NEW.parked_at IS NULL AND NEW.deleted_at IS NULL);
    RETURN NULL;
END
$function$;
