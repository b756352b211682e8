-- fleet_setting_event_record: the trigger function that appends every write of a fleet setting
-- (the budget `max_concurrent_runs` among them) to `fleet_setting_event`, which `audit` reads
-- for the budget in force at each instant.
--
-- Fired by the trigger `fleet_setting_event_on_change` (AFTER INSERT OR UPDATE ON
-- fleet_setting), so every writer, of any build, is recorded. It runs as the writer: a role
-- that writes `fleet_setting` needs INSERT on `fleet_setting_event`.
--
-- Since migration 0002, which creates the trigger. This file is the live text (ADR 0028).

CREATE OR REPLACE FUNCTION fleet_setting_event_record()
RETURNS trigger
LANGUAGE plpgsql
AS $function$
BEGIN
    INSERT INTO fleet_setting_event (key, value, at, updated_by)
    VALUES (NEW.key, NEW.value, clock_timestamp(), NEW.updated_by);
    RETURN NULL;
END
$function$;
