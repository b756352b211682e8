-- The completion in place (A, C, D), as sd_succeed_runs_v4 writes it: both rows locked, fenced
-- on owner and token, the run and the occurrence updated to success.
WITH mine AS MATERIALIZED (
    SELECT r.id, r.occurrence_id FROM run r JOIN occurrence o ON o.id = r.occurrence_id
    WHERE r.id = :run_id AND r.occurrence_id = :occ_id AND r.lease_token = :tok
      AND r.owner = 'bench' AND r.finished_at IS NULL
      AND o.status = 'running' AND o.lease_token = :tok
    FOR UPDATE OF r, o
), ended AS (
    UPDATE run r SET status = 'success', exit_code = 0, finished_at = clock_timestamp(),
        finished_by = 'bench'
    FROM mine WHERE r.id = mine.id
    RETURNING r.occurrence_id
)
UPDATE occurrence o SET status = 'success', error = NULL, reason = NULL,
    finished_at = clock_timestamp(), updated_at = clock_timestamp(), claim_owner = NULL
FROM ended WHERE o.id = ended.occurrence_id;
