-- The completion that moves (B): the same lock and fence, then in the same statement the hot
-- run and occurrence are deleted and written once to their history (the partition of now).
WITH mine AS MATERIALIZED (
    SELECT r.id, r.occurrence_id FROM run r JOIN occurrence o ON o.id = r.occurrence_id
    WHERE r.id = :run_id AND r.occurrence_id = :occ_id AND r.lease_token = :tok
      AND r.owner = 'bench' AND o.status = 'running' AND o.lease_token = :tok
    FOR UPDATE OF r, o
), ended AS (
    DELETE FROM run r USING mine WHERE r.id = mine.id RETURNING r.*
), occ AS (
    DELETE FROM occurrence o USING mine WHERE o.id = mine.occurrence_id RETURNING o.*
), runs AS (
    INSERT INTO run_history (id, occurrence_id, attempt, owner, lease_token, status, exit_code,
        http_status, output_tail, error, finished_by, started_at, finished_at, build_revision,
        uuid)
    SELECT e.id, e.occurrence_id, e.attempt, e.owner, e.lease_token, 'success', 0, NULL, NULL,
        NULL, 'bench', e.started_at, clock_timestamp(), e.build_revision, e.uuid
    FROM ended e
)
INSERT INTO occurrence_history ({{history_columns}})
SELECT {{history_values}}
FROM occ o;
