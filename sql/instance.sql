-- name: instance_register :one
-- Registers this process start as a new instance.
INSERT INTO instance (id, hostname, pid, version, schema_revision, concurrency, lease_ttl,
    lease_grace, reconcile_interval, clock_drift, started_at, heartbeat_at)
VALUES (%(id)s, %(hostname)s, %(pid)s, %(version)s, %(schema_revision)s, %(concurrency)s,
    %(lease_ttl)s, %(lease_grace)s, %(reconcile_interval)s, %(clock_drift)s, clock_timestamp(),
    clock_timestamp())
RETURNING *

-- name: instance_heartbeat :one
-- Marks this instance alive and publishes its slot use and clock drift; returns the database
-- clock for the next drift measurement, or no row when a reconciler removed this instance.
UPDATE instance SET heartbeat_at = clock_timestamp(), slots_in_use = %(slots_in_use)s,
    clock_drift = %(clock_drift)s, stopping = %(stopping)s
WHERE id = %(id)s
RETURNING clock_timestamp() AS db_now

-- name: instance_deregister :rowcount
-- Removes this instance from the registry at a clean shutdown.
DELETE FROM instance WHERE id = %(id)s

-- name: instance_list :many
-- Live instances for `status`, with how long ago each was heard from (database clock).
SELECT *, clock_timestamp() - heartbeat_at AS silent_for FROM instance ORDER BY started_at

-- name: instance_clock :one
-- The database clock for measuring this host's drift.
SELECT clock_timestamp() AS db_now

-- name: instance_remove_dead :many
-- Removes instances not heard from for `dead_after` (database clock); their runs are handled by
-- lease expiry, never by this.
DELETE FROM instance WHERE heartbeat_at < clock_timestamp() - %(dead_after)s RETURNING id

-- name: instance_dead :many
-- The instances `instance_remove_dead` would remove (for `recover --dry-run`).
SELECT id FROM instance WHERE heartbeat_at < clock_timestamp() - %(dead_after)s ORDER BY id

-- name: instance_before_revision :many
-- The registered instances (live, or not yet expired) of builds whose schema head is before
-- `revision` (revisions are numbered in order): those that cannot run what it added. First the
-- schema compatibility lock (`key`, exclusive, for the transaction), which every registration
-- takes shared: one in progress is waited for, and read by the next statement, whose snapshot
-- is taken after the wait; a later one waits until the caller's transaction ends.
SELECT pg_advisory_xact_lock(%(key)s);
SELECT *, clock_timestamp() - heartbeat_at AS silent_for FROM instance
WHERE schema_revision < %(revision)s ORDER BY started_at, id
