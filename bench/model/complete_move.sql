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
{{write_history}}
