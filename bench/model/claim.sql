-- The worker's claim (A, B, C, D), as sd_claim_launch_v6 writes it: the oldest queued firing
-- with SKIP LOCKED in a MATERIALIZED CTE, running at the next token, and its run row. The fleet
-- budget's count, the advisory lock and the epoch reads are left out (reads, the same in every
-- alternative). A claim that finds nothing gives zeros and the completion after it does nothing.
{{picked}}, launched AS (
    UPDATE occurrence o SET status = 'running', lease_token = o.lease_token + 1,
        attempts = o.attempts + 1, claim_owner = 'bench', claim_expires_at = NULL,
        first_claim_snapshot = coalesce(o.first_claim_snapshot, pg_current_snapshot()),
        updated_at = clock_timestamp()
    FROM picked WHERE o.id = picked.id
    RETURNING o.id, o.lease_token, o.attempts
), runs AS (
    INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at, takeover_at,
        started_at, build_revision)
    SELECT l.id, l.attempts, 'bench', l.lease_token, clock_timestamp() + interval '9 s',
        clock_timestamp() + interval '12 s', clock_timestamp(), 'bench-rev'
    FROM launched l
    RETURNING id, occurrence_id, lease_token
)
SELECT coalesce((SELECT id FROM runs), 0) AS run_id,
       coalesce((SELECT occurrence_id FROM runs), 0) AS occ_id,
       coalesce((SELECT lease_token FROM runs), 0) AS tok \gset
