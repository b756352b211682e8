-- operator_action_session_user: the trigger function that records, on every action appended to
-- `operator_action`, the database role that logged in to write it (`session_user`), whatever
-- the writer supplied: the claimed `actor` is what the CLI or the console says (a console's
-- signed-in viewer, `--actor`), `session_user` is what PostgreSQL authenticated.
--
-- Fired by the trigger `operator_action_session_user_on_insert` (BEFORE INSERT ON
-- operator_action), so every writer, of any build, is recorded. `session_user` is the role
-- that authenticated: SET ROLE and a SECURITY DEFINER function (sd_end_pause_v1) change
-- `current_user`, not it, and only a superuser may SET SESSION AUTHORIZATION. The writers hold
-- INSERT only on the table (no UPDATE, DELETE or TRIGGER: storage/roles.py), so none may
-- change the row afterwards or drop the trigger.
--
-- Since revision 0038 (issue 46). This file is the live text (ADR 0028).

CREATE OR REPLACE FUNCTION operator_action_session_user()
RETURNS trigger
LANGUAGE plpgsql
AS $function$
BEGIN
    NEW.session_role := session_user;
    RETURN NEW;
END
$function$;
