-- name: fleet_setting_list :many
-- Every fleet-wide setting (not the schema's compatibility record, which `migrate` writes).
SELECT key, value, updated_at, updated_by FROM fleet_setting WHERE key <> 'schema_compat'
ORDER BY key

-- name: fleet_setting_set :one
-- Sets one fleet-wide setting.
INSERT INTO fleet_setting (key, value, updated_at, updated_by)
VALUES (%(key)s, %(value)s, now(), %(updated_by)s)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at,
    updated_by = EXCLUDED.updated_by
RETURNING key, value, updated_at, updated_by

-- name: fleet_budget :scalar
-- The fleet-wide budget of executing occurrences, read as the claim reads it (sd_claim_launch_v1,
-- revision 0015): a JSON number, floored and capped to 0 .. 100,000 as a bigint; anything else a
-- hand or an older build wrote (a string, null, an array) is no budget, as without the row.
SELECT CASE WHEN jsonb_typeof(value) = 'number'
            THEN least(greatest(floor(value::numeric), 0), 100000)::bigint END
FROM fleet_setting WHERE key = 'max_concurrent_runs'

-- name: fleet_history_retention :scalar
-- The fleet's history retention as the duration text `config set` stored (NULL: keep all).
SELECT jsonb_build_array(value) ->> 0 FROM fleet_setting WHERE key = 'history_retention'
