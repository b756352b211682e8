-- Alternative E, after history.sql: the firing's history row holds its last attempt's fields
-- beside the firing's (the hot row's run columns came with LIKE), and the attempts that ended
-- without ending their firing have a table of today's run shape. No run table while it runs.
ALTER TABLE occurrence_history RENAME TO firing_history;
ALTER TABLE firing_history ADD COLUMN owner text, ADD COLUMN exit_code integer,
    ADD COLUMN http_status integer, ADD COLUMN output_tail text, ADD COLUMN finished_by text;
CREATE INDEX firing_history_run_idx ON firing_history (run_id) WHERE run_id IS NOT NULL;
ALTER TABLE run_history RENAME TO attempt_history;
DROP TABLE run;
