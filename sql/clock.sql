-- name: clock_now :scalar
-- The database clock, or the pinned time a test passes; the only clock coordination reads.
SELECT coalesce(%(now)s::timestamptz, now())
