-- E's claim: the hot row itself becomes the running attempt (its run id, uuid and lease on it):
-- one row version written, no run row.
{{picked}}, launched AS (
    UPDATE occurrence o SET status = 'running', lease_token = o.lease_token + 1,
        attempts = o.attempts + 1, claim_owner = 'bench', claim_expires_at = NULL,
        first_claim_snapshot = coalesce(o.first_claim_snapshot, pg_current_snapshot()),
        updated_at = clock_timestamp(), run_id = nextval('attempt_id_seq'),
        run_uuid = gen_random_uuid(), lease_expires_at = clock_timestamp() + interval '9 s',
        takeover_at = clock_timestamp() + interval '12 s', started_at = clock_timestamp(),
        build_revision = 'bench-rev'
    FROM picked WHERE o.id = picked.id
    RETURNING o.id, o.lease_token, o.run_id
)
SELECT coalesce((SELECT run_id FROM launched), 0) AS run_id,
       coalesce((SELECT id FROM launched), 0) AS occ_id,
       coalesce((SELECT lease_token FROM launched), 0) AS tok \gset
