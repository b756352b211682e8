-- E's completion: the hot row, fenced on owner, token and run, deleted and written once as the
-- firing's history row (one row a job); the delete is its own row lock. F also shows the outcome
-- on the task's narrow task_latest row, only if it is newer by sequence (guarantee 9).
WITH occ AS (
    DELETE FROM occurrence o
    WHERE o.id = :occ_id AND o.run_id = :run_id AND o.lease_token = :tok
      AND o.claim_owner = 'bench' AND o.status = 'running'
    RETURNING o.*
), hist AS (
    INSERT INTO firing_history ({{history_columns}}, run_id, run_uuid, owner, started_at,
        exit_code, http_status, output_tail, build_revision, finished_by)
    SELECT {{history_values}}, o.run_id, o.run_uuid, o.claim_owner, o.started_at, 0, NULL,
        NULL, o.build_revision, 'bench'
    FROM occ o
    RETURNING task_id, occurrence_seq, id, status, finished_at, error
){{latest}}
SELECT count(*) FROM hist;
