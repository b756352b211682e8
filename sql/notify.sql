-- name: wakeup_notify :scalar
-- Wakes idle daemons listening on `channel`; delivered when the transaction commits.
SELECT pg_notify(%(channel)s, %(reason)s)
