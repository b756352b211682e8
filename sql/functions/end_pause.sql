-- sd_end_pause_v1: ends a task's `--until` pause whose instant has passed on the database clock
-- (and only such a pause), and records it in `operator_action` as action `resume` by actor and
-- source `scheduler`, in the caller's transaction; returns false when there is nothing to end
-- (resumed, paused again or deleted since).
--
-- Called by the named query `task_end_pause` (sql/task.sql), from the reconciler, with the
-- next firing and status `tasks resume` would give the task.
--
-- SECURITY DEFINER: the daemon role may neither write `paused` (what runs when stays the
-- operator's) nor insert into `operator_action`; this is the one change of them it may make.
-- So, after the function itself, this file (as migration 0035 did):
-- - pins its search path to the schema it is created in, then `pg_temp`, last, so that no
--   temporary table can stand in for `task`. The schema's name is known only where it runs, so
--   a DO block sets it with ALTER FUNCTION (CREATE OR REPLACE clears it, in the same
--   transaction).
-- - revokes EXECUTE from PUBLIC, and grants it to the roles that may register an instance (the
--   daemon roles; `db roles` grants it by name: storage/roles.py DEFINER_FUNCTIONS). A
--   re-create keeps the function's privileges; the grant matters on a new database.
--
-- Since migrations 0033 and 0035. This file is the live text (ADR 0028).

CREATE OR REPLACE FUNCTION sd_end_pause_v1(
    p_id bigint, p_next_run_at timestamptz, p_status text, p_error text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
AS $function$
DECLARE
    v_until timestamptz;
BEGIN
    SELECT t.paused_until INTO v_until FROM task t
    WHERE t.id = p_id AND t.paused AND t.paused_until <= now() AND t.deleted_at IS NULL
    FOR UPDATE;
    IF v_until IS NULL THEN
        RETURN false;  -- resumed, paused again or deleted since: nothing to end
    END IF;
    UPDATE task SET paused = false, paused_until = NULL, next_run_at = p_next_run_at,
        status = p_status, last_error = coalesce(p_error, last_error), updated_at = now()
    WHERE id = p_id;
    INSERT INTO operator_action (actor, action, source, task_id, detail)
    VALUES ('scheduler', 'resume', 'scheduler', p_id, 'pause ended at ' || v_until);
    RETURN true;
END
$function$;

DO $do$
BEGIN
    EXECUTE format('ALTER FUNCTION sd_end_pause_v1(bigint, timestamptz, text, text) '
                   'SET search_path = %I, pg_temp', current_schema());
END
$do$;

REVOKE EXECUTE ON FUNCTION sd_end_pause_v1(bigint, timestamptz, text, text) FROM PUBLIC;

DO $do$
DECLARE r record;
BEGIN
    FOR r IN SELECT rolname FROM pg_roles
             WHERE rolname NOT LIKE 'pg\_%' AND has_table_privilege(oid, 'instance', 'INSERT')
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION '
                       'sd_end_pause_v1(bigint, timestamptz, text, text) TO %I', r.rolname);
    END LOOP;
END
$do$;
