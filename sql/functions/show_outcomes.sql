-- sd_show_outcomes_v1: shows final outcomes on their tasks, the one home of the rule; returns
-- the number of tasks changed.
--
-- One-shot tasks only (issue 45): a recurring task's newest outcome is read from its
-- occurrences (`task_outcome`, sql/task.sql), and its `last_*` fields stay empty.
--
-- The rule: per task, the newest outcome by sequence is shown in the task's `last_*` fields,
-- only if it is newer than the one shown (a late writer never overwrites a newer result); and a
-- one-shot task still `running` takes the lifecycle (`p_lifecycles`) of its newest deciding
-- outcome once no newer firing of its schedule exists. A deciding outcome (`p_decides`) is a
-- firing of the schedule (`schedule` or `backfill`), never a manual trigger: a manual
-- occurrence never decides a one-shot task's status, whether it ran, failed, was cancelled or
-- expired, though it is still shown in `last_*` when it is the newest outcome (issue 31).
--
-- The caller holds the tasks' row locks. Every writer of a final outcome calls it: the
-- completer's unit and batch writes (`task_record_outcome_many`, sql/task.sql), the success
-- function for one-shot tasks (succeed_runs.sql), `runs cancel`, and the reconciler's takeover,
-- expiry and finalizer. The arrays are parallel, one element per outcome.
--
-- Since migration 0017 (issue 30). The comment in the body still names that migration's RULE,
-- where the rule was written before it moved here. This file is the live text (ADR 0028).

CREATE OR REPLACE FUNCTION sd_show_outcomes_v1(
    p_task_ids bigint[], p_occurrence_ids bigint[], p_seqs bigint[],
    p_scheduled_fors timestamptz[], p_statuses text[], p_errors text[], p_lifecycles text[],
    p_decides boolean[], p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql
AS $function$
-- Shows final outcomes on their tasks, whose rows the caller has locked (the rule: migration
-- 0017's RULE); returns the number of tasks changed.
DECLARE
    v_changed integer;
BEGIN
    WITH given AS (
        SELECT * FROM unnest(p_task_ids, p_occurrence_ids, p_seqs, p_scheduled_fors, p_statuses,
                             p_errors, p_lifecycles, p_decides)
                 AS g(task_id, occurrence_id, seq, scheduled_for, status, error, lifecycle,
                      decides)
    ),
    newest AS (
        SELECT DISTINCT ON (task_id) * FROM given ORDER BY task_id, seq DESC
    ), deciding AS (
        SELECT DISTINCT ON (task_id) task_id, seq, lifecycle FROM given WHERE decides
        ORDER BY task_id, seq DESC
    ), shown AS (
        UPDATE task SET
            last_outcome_seq = greatest(task.last_outcome_seq, n.seq),
            last_occurrence_id = CASE WHEN n.seq > task.last_outcome_seq
                                      THEN n.occurrence_id ELSE task.last_occurrence_id END,
            last_scheduled_for = CASE WHEN n.seq > task.last_outcome_seq
                                      THEN n.scheduled_for ELSE task.last_scheduled_for END,
            last_status = CASE WHEN n.seq > task.last_outcome_seq
                               THEN n.status ELSE task.last_status END,
            last_finished_at = CASE WHEN n.seq > task.last_outcome_seq
                                    THEN coalesce(p_now, clock_timestamp())
                                    ELSE task.last_finished_at END,
            last_error = CASE WHEN n.seq > task.last_outcome_seq
                              THEN n.error ELSE task.last_error END,
            status = CASE WHEN d.task_id IS NOT NULL AND task.schedule_kind = 'once'
                               AND task.status = 'running'
                               AND NOT EXISTS (
                                   SELECT 1 FROM occurrence newer
                                   WHERE newer.task_id = task.id
                                     AND newer.occurrence_seq > d.seq
                                     AND newer.trigger <> 'manual')
                          THEN d.lifecycle ELSE task.status END,
            updated_at = coalesce(p_now, clock_timestamp())
        FROM newest n LEFT JOIN deciding d ON d.task_id = n.task_id
        WHERE task.id = n.task_id AND task.schedule_kind = 'once'
          AND (n.seq > task.last_outcome_seq
               OR (d.task_id IS NOT NULL AND task.schedule_kind = 'once'
                   AND task.status = 'running'))
        RETURNING task.id
    )
    SELECT count(*) INTO v_changed FROM shown;
    RETURN v_changed;
END
$function$;
