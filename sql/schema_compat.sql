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

-- name: schema_shape :scalar
-- The shape of the schema (ADR 0027, "as built"): sha256 of one line per table, column (type,
-- NOT NULL, default, identity), constraint, index, trigger and view (its columns and what it
-- reads) of the current schema, sorted bytewise (COLLATE "C": the same in every database). Not
-- the functions, which `migrate` keeps equal to their files by checksum (ADR 0028), nor the
-- grants, which `db roles` applies again. Views by their columns and dependencies, not their
-- text: PostgreSQL 16 prints a view's text otherwise than 15, so the same schema would differ.
-- Index and trigger definitions name their table with its schema, which is left out.
WITH rel AS (
    SELECT c.oid, c.relname, c.relkind, ' ON ' || quote_ident(n.nspname) || '.' AS qualified
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = current_schema()
      AND c.relkind::text = ANY (ARRAY['r', 'p', 'v'])  -- tables, partitioned ones, views
      AND c.relname <> 'scheduler_daemon_alembic_version'
      -- a partition only if it is a default one: the dated ones come and go (partition upkeep)
      AND (NOT c.relispartition OR pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT')
), line AS (
    SELECT CASE r.relkind WHEN 'v' THEN 'view ' ELSE 'table ' END || r.relname AS text
    FROM rel r
    UNION ALL
    SELECT 'partitioned ' || r.relname || ' ' || pg_get_partkeydef(r.oid)
    FROM rel r WHERE r.relkind = 'p'
    UNION ALL
    SELECT 'partition ' || r.relname || ' of ' || p.inhparent::regclass::text || ' '
        || pg_get_expr(c.relpartbound, c.oid)
    FROM rel r JOIN pg_class c ON c.oid = r.oid JOIN pg_inherits p ON p.inhrelid = r.oid
    WHERE c.relispartition
    UNION ALL
    SELECT 'column ' || r.relname || '.' || a.attname || ' '
        || format_type(a.atttypid, a.atttypmod)
        || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
        || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
        || CASE a.attidentity WHEN 'a' THEN ' identity always'
                              WHEN 'd' THEN ' identity by default' ELSE '' END
        || CASE WHEN a.attgenerated <> '' THEN ' generated' ELSE '' END
    FROM rel r
    -- Not a partition's: they are its parent's, but PostgreSQL 17 and later copy the parent's
    -- identity onto them and 15 does not, so the same schema would differ (the embedded server).
    JOIN pg_class pc ON pc.oid = r.oid AND NOT pc.relispartition
    JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
    LEFT JOIN pg_attrdef d ON d.adrelid = r.oid AND d.adnum = a.attnum
    UNION ALL
    SELECT 'constraint ' || r.relname || '.' || k.conname || ' ' || pg_get_constraintdef(k.oid)
    FROM rel r JOIN pg_constraint k ON k.conrelid = r.oid
    WHERE k.contype <> 'n'
    UNION ALL
    SELECT 'index ' || r.relname || '.' || ic.relname || ' '
        || replace(pg_get_indexdef(i.indexrelid), r.qualified, ' ON ')
    FROM rel r JOIN pg_index i ON i.indrelid = r.oid JOIN pg_class ic ON ic.oid = i.indexrelid
    UNION ALL
    SELECT 'trigger ' || r.relname || '.' || t.tgname || ' '
        || replace(pg_get_triggerdef(t.oid), r.qualified, ' ON ')
    FROM rel r JOIN pg_trigger t ON t.tgrelid = r.oid
    WHERE NOT t.tgisinternal
    UNION ALL
    SELECT DISTINCT 'view ' || r.relname || ' reads '
        || CASE WHEN dep.refclassid = 'pg_proc'::regclass THEN dep.refobjid::regprocedure::text
                ELSE dep.refobjid::regclass::text || '.' || ra.attname END
    FROM rel r
    JOIN pg_rewrite w ON w.ev_class = r.oid
    JOIN pg_depend dep ON dep.classid = 'pg_rewrite'::regclass AND dep.objid = w.oid
        AND dep.refobjid <> r.oid
    LEFT JOIN pg_attribute ra ON dep.refclassid = 'pg_class'::regclass
        AND ra.attrelid = dep.refobjid AND ra.attnum = dep.refobjsubid
    WHERE r.relkind = 'v'
)
SELECT encode(sha256(convert_to(string_agg(text, E'\n' ORDER BY text COLLATE "C"), 'UTF8')),
              'hex')
FROM line
