-- C's mover, about once per 100 jobs (a random draw), up to 500 ended rows a batch: the ended
-- hot rows and their runs deleted and written to the unpartitioned history in one statement.
\set draw random(1, 100)
\if :draw = 1
WITH moved AS MATERIALIZED (
    SELECT id FROM occurrence WHERE finished_at IS NOT NULL
    ORDER BY finished_at, id LIMIT 500 FOR UPDATE SKIP LOCKED
), ended AS (
    DELETE FROM run r USING moved WHERE r.occurrence_id = moved.id RETURNING r.*
), occ AS (
    DELETE FROM occurrence o USING moved WHERE o.id = moved.id RETURNING o.*
), runs AS (
    INSERT INTO run_history (id, occurrence_id, attempt, owner, lease_token, status, exit_code,
        http_status, output_tail, error, finished_by, started_at, finished_at, build_revision,
        uuid)
    SELECT e.id, e.occurrence_id, e.attempt, e.owner, e.lease_token, e.status, e.exit_code,
        e.http_status, e.output_tail, e.error, e.finished_by, e.started_at, e.finished_at,
        e.build_revision, e.uuid
    FROM ended e
)
INSERT INTO occurrence_history ({{history_columns}})
SELECT {{history_values}}
FROM occ o;
\endif
