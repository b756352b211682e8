-- sd_occurrence_key_v1: the idempotency key an occurrence keeps for all its attempts, computed
-- once when the occurrence is inserted (sql/occurrence.sql: insert, dispatch, insert_many,
-- backfill, trigger) and handed to every job of it (SCHEDULER_IDEMPOTENCY_KEY).
--
-- - A scheduled or backfill firing: `scheduler-daemon:{task uuid}:{trigger}:{scheduled time,
--   UTC ISO}`, with microseconds only when the time has them. Task ids, occurrence ids and
--   tokens can repeat after a failover that lost commits; the task's uuid and the firing's
--   time cannot, so a firing keeps its key across a failover (issue 32).
-- - A manual trigger: a random UUID.
-- - Never NULL since the squash (issue 45): the branch that returned NULL while a build before
--   migration 0019 was registered is gone. An occurrence stored with NULL before then keeps the
--   legacy `scheduler-daemon-occurrence-{id}` for every attempt (sd_claim_launch_v6 falls back
--   to it).
--
-- LANGUAGE sql: its body is checked when it is created, so it loads after the tables it reads.
-- Since migration 0019. This file is the live text (ADR 0028).

CREATE OR REPLACE FUNCTION sd_occurrence_key_v1(
    p_task_id bigint, p_trigger text, p_scheduled_for timestamptz)
RETURNS text
LANGUAGE sql VOLATILE
AS $function$
    SELECT CASE
        WHEN p_trigger = 'manual' THEN gen_random_uuid()::text
        ELSE (SELECT 'scheduler-daemon:' || t.uuid || ':' || p_trigger || ':'
                  || to_char(p_scheduled_for AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
                  || CASE WHEN date_trunc('second', p_scheduled_for) = p_scheduled_for THEN ''
                          ELSE to_char(p_scheduled_for AT TIME ZONE 'UTC', '.US') END
                  || 'Z'
              FROM task t WHERE t.id = p_task_id)
    END
$function$;
