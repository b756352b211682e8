-- name: fleet_setting_list :many
-- Every fleet-wide setting (not the schema's compatibility record, which `migrate` writes), as
-- the connected role may see it (fleet_setting_shown: the reader's notify URL and headers
-- masked, ADR 0031).
SELECT key, value, updated_at, updated_by FROM fleet_setting_shown WHERE key <> 'schema_compat'
ORDER BY key

-- name: fleet_setting_set :one
-- Sets one fleet-wide setting.
INSERT INTO fleet_setting (key, value, updated_at, updated_by)
VALUES (%(key)s, %(value)s, now(), %(updated_by)s)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at,
    updated_by = EXCLUDED.updated_by
RETURNING key, value, updated_at, updated_by

-- name: fleet_budget :scalar
-- The fleet-wide budget of executing occurrences, read as the claim reads it
-- (sql/functions/claim_launch.sql): a JSON number, floored and capped to 0 .. 100,000 as a
-- bigint; anything else a hand or an older build wrote (a string, null, an array) is no budget,
-- as without the row. Through fleet_setting_shown, which every role may read (ADR 0031).
SELECT CASE WHEN jsonb_typeof(value) = 'number'
            THEN least(greatest(floor(value::numeric), 0), 100000)::bigint END
FROM fleet_setting_shown WHERE key = 'max_concurrent_runs'

-- name: fleet_history_retention :scalar
-- The fleet's history retention as the duration text `config set` stored (NULL: keep all),
-- through fleet_setting_shown, which every role may read (ADR 0031).
SELECT jsonb_build_array(value) ->> 0 FROM fleet_setting_shown WHERE key = 'history_retention'

-- name: fleet_budget_lock_holders :many
-- Who holds the fleet budget's advisory lock (the claim's `pg_advisory_xact_lock(p_key)`)
-- in this database, once per transaction: a bigint key is locked as classid (its high 32 bits),
-- objid (its low 32 bits), objsubid 1; shared holders too (one blocks a claim as well). pg_locks
-- is read live, not from the transaction's snapshot. pid, role and application_name are visible
-- to every role; state and xact_start of another role's session only to pg_read_all_stats
-- (NULL otherwise). A prepared transaction holds it with no pid (its vxid is -1/xid): its gid
-- and owner instead.
SELECT l.pid, l.virtualtransaction, coalesce(a.usename, p.owner::text) AS role,
    a.application_name, a.state, a.xact_start AS transaction_started_at,
    clock_timestamp() - coalesce(a.xact_start, p.prepared) AS in_transaction, p.gid AS prepared
FROM (SELECT DISTINCT pid, virtualtransaction FROM pg_locks
      WHERE locktype = 'advisory' AND granted
        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND classid = (%(key)s::bigint >> 32)::oid
        AND objid = (%(key)s::bigint & 4294967295)::oid
        AND objsubid = 1) l
LEFT JOIN pg_stat_activity a ON a.pid = l.pid
LEFT JOIN pg_prepared_xacts p ON l.pid IS NULL AND l.virtualtransaction = '-1/' || p.transaction
ORDER BY coalesce(a.xact_start, p.prepared), l.pid

-- name: fleet_partition_interval :scalar
-- The fleet's history partition interval as the duration text `config set` stored (NULL: the
-- default, 1 day; ADR 0033), through fleet_setting_shown, which every role may read.
SELECT jsonb_build_array(value) ->> 0 FROM fleet_setting_shown
WHERE key = 'history_partition_interval'
