-- Alternative C: the completion updates the hot row in place (as today) and a mover takes ended
-- rows to an unpartitioned history in batches, so ended rows stay a while: the exclusion
-- indexes keep today's status predicates, and the mover finds them by finished_at.
DROP INDEX occurrence_forbid_active_key;
CREATE UNIQUE INDEX occurrence_forbid_active_key ON occurrence (task_id)
    WHERE overlap = 'forbid' AND status IN ('queued', 'launching', 'running');
CREATE INDEX occurrence_finished_idx ON occurrence (finished_at, id) WHERE finished_at IS NOT NULL;
DROP INDEX run_occurrence_key;
CREATE UNIQUE INDEX run_occurrence_running_key ON run (occurrence_id) WHERE status = 'running';
CREATE INDEX run_occurrence_idx ON run (occurrence_id, id);
DROP INDEX run_takeover_idx;
CREATE INDEX run_takeover_idx ON run (takeover_at) WHERE status = 'running';
-- retention deletes history row by row, oldest first
CREATE INDEX occurrence_history_finished_idx ON occurrence_history (finished_at, id);
CREATE INDEX run_history_finished_idx ON run_history (finished_at, id);
