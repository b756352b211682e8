-- pgbench script for bench/run.py: the lives of 10 jobs with the hot path batched, as PgQueuer
-- batches (and the rebuilt daemon): 10 inserted in one statement, 10 claimed with SKIP LOCKED in
-- one, 10 completed in one fenced multi-row update. Three transactions per 10 jobs.
INSERT INTO bench_job (status) SELECT 'queued' FROM generate_series(1, 10);
WITH picked AS MATERIALIZED (
    SELECT id FROM bench_job WHERE status = 'queued' ORDER BY id LIMIT 10 FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE bench_job j SET status = 'running', token = j.token + 1, started_at = clock_timestamp()
    FROM picked WHERE j.id = picked.id
    RETURNING j.id, j.token
)
SELECT coalesce(string_agg(id::text, ','), '') AS job_ids,
       coalesce(string_agg(token::text, ','), '') AS job_tokens FROM claimed \gset
UPDATE bench_job j SET status = 'done', finished_at = clock_timestamp()
FROM unnest(string_to_array(':job_ids', ',')::bigint[],
            string_to_array(':job_tokens', ',')::bigint[]) AS h(id, token)
WHERE j.id = h.id AND j.token = h.token AND j.status = 'running';
