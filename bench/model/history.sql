-- Alternatives B, C, E and F: history written once. B, E and F partition it by the time a row
-- ended (`PARTITION BY RANGE (finished_at)` replaces the marker below; price.py creates the daily
-- partitions around now); C leaves it one table. No unique index: on a partitioned table one
-- would have to include finished_at, which guarantees nothing. Uniqueness lives in the hot set
-- and firing_key.
-- Today's columns and NOT NULLs, no key, no CHECK (a moved row passed them in the hot table).
CREATE TABLE occurrence_history (LIKE occurrence) /*PARTITION*/;
-- tasks show / the outbox / the console by id; a task's history by sequence (ADR 0011's newest
-- outcome, run_history paging); ADR 0026's newest success and failures since; the window read
-- (health_window, audit's firings in a range).
CREATE INDEX occurrence_history_id_idx ON occurrence_history (id);
CREATE INDEX occurrence_history_task_seq_idx ON occurrence_history (task_id, occurrence_seq);
CREATE INDEX occurrence_history_success_idx ON occurrence_history (task_id, occurrence_seq)
    WHERE status = 'success';
CREATE INDEX occurrence_history_failure_idx ON occurrence_history (task_id, occurrence_seq)
    WHERE status IN ('failed', 'timeout', 'interrupted');
CREATE INDEX occurrence_history_window_idx ON occurrence_history (task_id, scheduled_for)
    INCLUDE (trigger, status, reason, overlap, firing_count);
CREATE INDEX occurrence_history_lost_idx ON occurrence_history (scheduled_for, task_id)
    INCLUDE (status, reason, overlap, firing_count) WHERE status IN ('skipped', 'expired');

CREATE TABLE run_history (LIKE run) /*PARTITION*/;
CREATE INDEX run_history_id_idx ON run_history (id);
CREATE INDEX run_history_occurrence_idx ON run_history (occurrence_id, id);
