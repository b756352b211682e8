-- name: partitions_keep_up :scalar
-- One partition upkeep (sql/functions/partitions.sql, ADR 0033): creates the history's
-- partitions ahead and for rows fallen into the DEFAULT partition, drops those past the
-- retention (NULL: none), and returns what it did as JSON (`busy` when another session does
-- it now; `error` and `sqlstate` when it gave up, its work undone).
SELECT sd_partitions_v1(%(interval)s::interval, %(ahead)s::interval, %(retention)s::interval)

-- name: partition_list :many
-- The partitions of the history's tables (`occurrence`, `run`), oldest first per table, the
-- DEFAULT one last: bounds parsed from the catalog, and the planner's estimate of rows (-1 or 0
-- before the first ANALYZE). Read from the catalog, which every role may read; the reader
-- still reads no partition by name (none is granted).
SELECT p.relname AS table_name, c.relname AS partition, b[1]::timestamptz AS lower_bound,
    b[2]::timestamptz AS upper_bound, c.oid = t.partdefid AS is_default,
    greatest(c.reltuples, 0)::bigint AS rows_estimate
FROM pg_partitioned_table t
JOIN pg_class p ON p.oid = t.partrelid
JOIN pg_inherits i ON i.inhparent = t.partrelid
JOIN pg_class c ON c.oid = i.inhrelid
LEFT JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid),
                               $re$FROM \('([^']+)'\) TO \('([^']+)'\)$re$) b ON true
WHERE p.relnamespace = current_schema()::regnamespace
  AND p.relname = ANY (ARRAY['occurrence', 'run'])
ORDER BY p.relname, c.oid = t.partdefid, 3

-- name: partition_status :one
-- What `status` shows of the upkeep: the dated partitions not yet past (the one being written
-- included) of the table that has fewer, read live (NULL: history not partitioned), and the
-- last upkeep's success and error as sd_partitions_v1 recorded them.
WITH ahead AS (
    SELECT count(b) AS n
    FROM pg_partitioned_table t
    JOIN pg_class p ON p.oid = t.partrelid
    LEFT JOIN pg_inherits i ON i.inhparent = t.partrelid
    LEFT JOIN pg_class c ON c.oid = i.inhrelid
    LEFT JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                   $re$FROM \('([^']+)'\) TO \('([^']+)'\)$re$) b
        ON b[2]::timestamptz > now()
    WHERE p.relnamespace = current_schema()::regnamespace
      AND p.relname = ANY (ARRAY['occurrence', 'run'])
    GROUP BY p.relname
)
SELECT (SELECT min(n) FROM ahead)::integer AS partitions_ahead, u.last_success_at,
    u.last_error, u.last_error_at, u.last_sqlstate
FROM (SELECT 1) one LEFT JOIN partition_upkeep u ON true

-- name: partition_in_use :scalar
-- Whether the history (`occurrence`) is partitioned by time (ADR 0033): then the row-by-row
-- prune leaves what a partition drop will remove.
SELECT EXISTS (SELECT 1 FROM pg_partitioned_table
               WHERE partrelid = to_regclass(quote_ident(current_schema()) || '.occurrence'))
