-- name: roles_table_grantors :many
-- Each of `tables` (tables and views) in `schema` with its owner and whether the connected role
-- may grant on it as its owner does (a member of the owning role, or a superuser); one not there
-- has no row.
SELECT current_user AS role_name, c.relname AS table_name, pg_get_userbyid(c.relowner) AS owner,
    pg_has_role(current_user, c.relowner, 'USAGE') AS can_grant
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relname = ANY(%(tables)s::text[])
  AND c.relkind::text = ANY (ARRAY['r', 'p', 'v'])  -- tables, partitioned ones, views
ORDER BY c.relname

-- name: roles_creator :one
-- Whether the connected role may create roles, and may grant on `schema` as its owner does;
-- no row when the schema does not exist.
SELECT current_user AS role_name, pg_get_userbyid(n.nspowner) AS owner,
    pg_has_role(current_user, n.nspowner, 'USAGE') AS can_grant,
    (SELECT r.rolsuper OR r.rolcreaterole FROM pg_roles r WHERE r.rolname = current_user)
        AS can_create
FROM pg_namespace n WHERE n.nspname = %(schema)s
