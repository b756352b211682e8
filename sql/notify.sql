-- name: wakeup_notify :scalar
-- Wakes idle daemons (LISTEN scheduler_daemon_wakeup); delivered when the transaction commits.
SELECT pg_notify('scheduler_daemon_wakeup', %(reason)s)
