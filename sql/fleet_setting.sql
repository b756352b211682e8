-- name: fleet_setting_list :many
-- Every fleet-wide setting.
SELECT key, value, updated_at, updated_by FROM fleet_setting ORDER BY key

-- name: fleet_setting_set :one
-- Sets one fleet-wide setting.
INSERT INTO fleet_setting (key, value, updated_at, updated_by)
VALUES (%(key)s, %(value)s, now(), %(updated_by)s)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at,
    updated_by = EXCLUDED.updated_by
RETURNING key, value, updated_at, updated_by
