-- pgbench script for bench/run.py: one job's whole life, the ceiling a queue on this server has.
-- A producer inserts it; a worker claims the oldest queued one with SKIP LOCKED (in a MATERIALIZED
-- CTE, as ours does) and completes it, fenced on its token. Three statements, three transactions.
-- A claim that finds nothing (a race with another client's claim) returns id 0 and completes
-- nothing, so the client goes on.
INSERT INTO bench_job (status) VALUES ('queued');
WITH picked AS MATERIALIZED (
    SELECT id FROM bench_job WHERE status = 'queued' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE bench_job j SET status = 'running', token = j.token + 1, started_at = clock_timestamp()
    FROM picked WHERE j.id = picked.id
    RETURNING j.id, j.token
)
SELECT coalesce((SELECT id FROM claimed), 0) AS job_id,
       coalesce((SELECT token FROM claimed), 0) AS job_token \gset
UPDATE bench_job SET status = 'done', finished_at = clock_timestamp()
WHERE id = :job_id AND token = :job_token AND status = 'running';
