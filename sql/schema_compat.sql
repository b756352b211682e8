-- name: schema_compat_lock_shared :scalar
-- Held by a registration for its transaction: `migrate --contract` waits for it, and it waits
-- for a contract in progress, so no build registers against a schema it has not judged.
SELECT pg_advisory_xact_lock_shared(%(key)s)

-- name: schema_compat_lock :scalar
-- Held by `migrate --contract` while it checks the registered instances and contracts.
SELECT pg_advisory_xact_lock(%(key)s)

-- name: schema_compat_record :scalar
-- The compatibility record `migrate` wrote (ADR 0002); NULL before the first such migrate.
-- On a schema without fleet_setting_shown (before revision 0038): the reader may select the
-- whole table there.
SELECT value FROM fleet_setting WHERE key = 'schema_compat'

-- name: schema_compat_record_shown :scalar
-- The same through fleet_setting_shown, which every role may read (the reader may not select
-- fleet_setting.value: ADR 0031); the record is no secret, so it reads unmasked.
SELECT value FROM fleet_setting_shown WHERE key = 'schema_compat'

-- name: schema_compat_record_set :rowcount
-- Writes the compatibility record (a row of fleet_setting, hidden from `config show`).
INSERT INTO fleet_setting (key, value, updated_at, updated_by)
VALUES ('schema_compat', %(value)s, now(), %(updated_by)s)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at,
    updated_by = EXCLUDED.updated_by

-- name: schema_functions :many
-- The functions of the current schema with these signatures (`name(type, ...)`, as the files of
-- sql/functions declare them), each with its definition as the schema snapshot renders it and
-- its comment, where `migrate` records the file it was made from (storage/functions.py). A NULL
-- definition: no such function in the current schema.
SELECT s.signature, p.oid::regprocedure::text AS regprocedure,
    pg_get_functiondef(p.oid) AS definition, obj_description(p.oid, 'pg_proc') AS comment
FROM unnest(%(signatures)s::text[]) AS s(signature)
LEFT JOIN pg_proc p
    ON p.oid = to_regprocedure(quote_ident(current_schema()) || '.' || s.signature)

-- name: schema_functions_lock :scalar
-- Held by `migrate` while it compares the functions with their files and re-creates those that
-- differ (storage/functions.py): a second `migrate` at once waits, then finds them recorded.
SELECT pg_advisory_xact_lock(%(key)s)
