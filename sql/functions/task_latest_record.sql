-- task_latest_record: the trigger function that keeps `task_latest`, one row per task holding
-- its newest outcome and its newest success by sequence (ADR 0011, ADR 0026, issue 47), so
-- that `tasks list/show`, `tasks health` and the per-task gauges read one row per task however
-- the occurrences are stored (one table today; partitions by `finished_at` later, where a read
-- of "the newest by occurrence_seq" probes every partition).
--
-- Fired by three triggers, so every writer, of any build, is recorded:
-- - `task_latest_on_task_insert` (AFTER INSERT ON task): the task's row, empty (sequence 0).
--   Every task has its row from its first moment, so the writers below find it to lock and
--   never race to insert it (a first insert waits on another's, in no order).
-- - `occurrence_latest_on_insert` (AFTER INSERT ON occurrence, WHEN the row is ended and not
--   `skipped`): an ended row written whole (an expired firing; a row moved into history).
-- - `occurrence_latest_on_end` (AFTER UPDATE ON occurrence, WHEN the row was not ended and now
--   is, and is not `skipped`): today's ends.
-- A trigger made on a partitioned parent is cloned to each partition, present and future, and
-- an UPDATE that moves a row to another partition fires AFTER INSERT there (PostgreSQL 15).
-- Each part moves only to a HIGHER sequence (guarantee 9): a late writer of a lower
-- occurrence_seq changes nothing, and the same row written twice (a move) is a no-op. The newest
-- outcome is every ended status but `skipped` (no writer ever showed a skipped firing), its
-- `error` the occurrence's error, else its reason; the newest success keeps its sequence, its
-- finish and when its row was created (the failures since it finished after that: the bound
-- that lets the gauges' count skip older history). A plain UPDATE where the row is newer, not an
-- upsert: ON CONFLICT DO UPDATE writes a lock record before its update, 54 B a job. An updated
-- row stays locked until the writer commits: the batch success (succeed_runs.sql) locks its
-- tasks' rows first, in task id order, when it holds more than one task.
-- It runs as the writer: a role that ends occurrences or adds tasks needs INSERT and UPDATE on
-- `task_latest` (storage/roles.py).
--
-- Since the baseline 0038 (issue 47). This file is the live text (ADR 0028).

CREATE OR REPLACE FUNCTION task_latest_record()
RETURNS trigger
LANGUAGE plpgsql
AS $function$
DECLARE
    v_success boolean := NEW.status = 'success';
BEGIN
    IF TG_TABLE_NAME = 'task' THEN
        INSERT INTO task_latest (task_id) VALUES (NEW.id) ON CONFLICT (task_id) DO NOTHING;
        RETURN NULL;
    END IF;
    -- The row is there (made with its task): an UPDATE guarded by the sequences, rechecked on
    -- the newest version after a wait, and writing nothing (no lock either) when not newer.
    UPDATE task_latest l SET
        occurrence_seq = CASE WHEN NEW.occurrence_seq > l.occurrence_seq
                              THEN NEW.occurrence_seq ELSE l.occurrence_seq END,
        occurrence_id = CASE WHEN NEW.occurrence_seq > l.occurrence_seq
                             THEN NEW.id ELSE l.occurrence_id END,
        scheduled_for = CASE WHEN NEW.occurrence_seq > l.occurrence_seq
                             THEN NEW.scheduled_for ELSE l.scheduled_for END,
        status = CASE WHEN NEW.occurrence_seq > l.occurrence_seq
                      THEN NEW.status ELSE l.status END,
        finished_at = CASE WHEN NEW.occurrence_seq > l.occurrence_seq
                           THEN NEW.finished_at ELSE l.finished_at END,
        error = CASE WHEN NEW.occurrence_seq > l.occurrence_seq
                     THEN coalesce(NEW.error, NEW.reason) ELSE l.error END,
        success_seq = CASE WHEN v_success AND NEW.occurrence_seq > l.success_seq
                           THEN NEW.occurrence_seq ELSE l.success_seq END,
        success_finished_at = CASE WHEN v_success AND NEW.occurrence_seq > l.success_seq
                                   THEN NEW.finished_at ELSE l.success_finished_at END,
        success_created_at = CASE WHEN v_success AND NEW.occurrence_seq > l.success_seq
                                  THEN NEW.created_at ELSE l.success_created_at END
    WHERE l.task_id = NEW.task_id
      AND (NEW.occurrence_seq > l.occurrence_seq
           OR (v_success AND NEW.occurrence_seq > l.success_seq));
    IF FOUND OR EXISTS (SELECT 1 FROM task_latest WHERE task_id = NEW.task_id) THEN
        RETURN NULL;
    END IF;
    -- No row (a task made by hand without its trigger, say): made here, or, when another
    -- writer made it meanwhile, moved on by the same guards.
    INSERT INTO task_latest AS l (task_id, occurrence_seq, occurrence_id, scheduled_for, status,
                                  finished_at, error, success_seq, success_finished_at,
                                  success_created_at)
    VALUES (NEW.task_id, NEW.occurrence_seq, NEW.id, NEW.scheduled_for, NEW.status,
            NEW.finished_at, coalesce(NEW.error, NEW.reason),
            CASE WHEN v_success THEN NEW.occurrence_seq ELSE 0 END,
            CASE WHEN v_success THEN NEW.finished_at END,
            CASE WHEN v_success THEN NEW.created_at END)
    ON CONFLICT (task_id) DO UPDATE SET
        occurrence_seq = CASE WHEN excluded.occurrence_seq > l.occurrence_seq
                              THEN excluded.occurrence_seq ELSE l.occurrence_seq END,
        occurrence_id = CASE WHEN excluded.occurrence_seq > l.occurrence_seq
                             THEN excluded.occurrence_id ELSE l.occurrence_id END,
        scheduled_for = CASE WHEN excluded.occurrence_seq > l.occurrence_seq
                             THEN excluded.scheduled_for ELSE l.scheduled_for END,
        status = CASE WHEN excluded.occurrence_seq > l.occurrence_seq
                      THEN excluded.status ELSE l.status END,
        finished_at = CASE WHEN excluded.occurrence_seq > l.occurrence_seq
                           THEN excluded.finished_at ELSE l.finished_at END,
        error = CASE WHEN excluded.occurrence_seq > l.occurrence_seq
                     THEN excluded.error ELSE l.error END,
        success_seq = CASE WHEN excluded.success_seq > l.success_seq
                           THEN excluded.success_seq ELSE l.success_seq END,
        success_finished_at = CASE WHEN excluded.success_seq > l.success_seq
                                   THEN excluded.success_finished_at
                                   ELSE l.success_finished_at END,
        success_created_at = CASE WHEN excluded.success_seq > l.success_seq
                                  THEN excluded.success_created_at
                                  ELSE l.success_created_at END
    WHERE excluded.occurrence_seq > l.occurrence_seq OR excluded.success_seq > l.success_seq;
    RETURN NULL;
END
$function$;
