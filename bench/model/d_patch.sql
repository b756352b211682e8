-- Alternative D: today's one table, less the indexes only history reads use (their readers
-- would fall back on the others or on scans). An upper bound on what dropping indexes saves:
-- every exclusion and uniqueness index stays, which is why D cannot be partitioned either.
DROP INDEX occurrence_lost_idx;
DROP INDEX occurrence_own_row_idx;
DROP INDEX occurrence_task_failure_idx;
DROP INDEX occurrence_task_success_idx;
DROP INDEX occurrence_task_outcome_idx;
DROP INDEX occurrence_task_window_idx;
DROP INDEX occurrence_task_history_idx;
DROP INDEX run_status_history_idx;
