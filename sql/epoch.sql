-- name: epoch_sight :one
-- Records when the fleet first saw the database's current epoch: its system identifier and its
-- timeline, `ON CONFLICT DO NOTHING` (revision 0018), unless the epoch is older than one already
-- seen: a later timeline of the same system recorded here, or `seen_timeline` of `seen_system`
-- (the latest this process reached; NULL: none), so an older epoch is refused without a write. Returns the epoch,
-- when it was first seen (NULL for an older epoch never recorded), whether this statement was
-- the first sighting, and the newest timeline recorded for the system before it. On a standby
-- pg_current_wal_lsn() fails (recovery is in progress): no epoch is recorded there.
WITH current AS (
    SELECT s.system_identifier, {{epoch_timeline}} AS timeline,
        (SELECT max(e.timeline) FROM fleet_epoch e
         WHERE e.system_identifier = s.system_identifier) AS newest_timeline
    FROM pg_control_system() s
), sighted AS (
    INSERT INTO fleet_epoch (system_identifier, timeline, first_seen_at)
    SELECT system_identifier, timeline, now() FROM current
    WHERE timeline >= coalesce(greatest(newest_timeline, CASE
        WHEN system_identifier = %(seen_system)s::bigint THEN %(seen_timeline)s::bigint END), 0)
    ON CONFLICT DO NOTHING
    RETURNING first_seen_at
)
SELECT c.system_identifier, c.timeline, c.newest_timeline,
    coalesce((SELECT first_seen_at FROM sighted),
             (SELECT e.first_seen_at FROM fleet_epoch e
              WHERE e.system_identifier = c.system_identifier AND e.timeline = c.timeline))
        AS first_seen_at,
    EXISTS (SELECT 1 FROM sighted) AS new
FROM current c

-- fragment: epoch_timeline
-- The server's timeline, from the current WAL file's name (a promotion changes it at once;
-- pg_control_checkpoint() lags it by minutes). It fails on a standby (recovery is in progress).
('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint

-- fragment: epoch_changes
-- The fleet's first sightings of epochs later than the first it ever recorded: its failovers,
-- as fleet_epoch rows. The first epoch a fleet records (its first pass after revision 0018) is no
-- change of life.
(SELECT system_identifier, timeline, first_seen_at FROM fleet_epoch
 WHERE first_seen_at > (SELECT min(first_seen_at) FROM fleet_epoch))

-- fragment: failover_seen
-- The fleet's latest first sighting of an epoch later than the first it ever recorded (a
-- promotion); NULL when it has seen one epoch.
(SELECT max(first_seen_at) FROM {{epoch_changes}} changes)

-- fragment: quiet_from
-- When the quiet period after the database's latest change of life began: its server's start,
-- or the last failover the fleet saw if later. No run is taken over within TTL + grace of it,
-- so owners cut off by a restart or a failover renew first.
greatest(pg_postmaster_start_time(), {{failover_seen}})

-- name: epoch_status :one
-- What `status` says of the database's epoch, writing nothing: its system identifier, its
-- timeline (NULL on a standby, which has no current WAL position), whether it is in recovery,
-- whether it names synchronous standbys, and the fleet's sightings: the first epoch it recorded
-- and the latest first sighting (a failover when they differ).
SELECT s.system_identifier,
    CASE WHEN pg_is_in_recovery() THEN NULL ELSE {{epoch_timeline}} END AS timeline,
    pg_is_in_recovery() AS in_recovery,
    current_setting('synchronous_standby_names') <> '' AS synchronous,
    (SELECT min(first_seen_at) FROM fleet_epoch) AS first_recorded_at,
    {{failover_seen}} AS last_failover_seen_at
FROM pg_control_system() s
