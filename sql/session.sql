-- name: clock_now :scalar
-- The database clock, or the pinned time a test passes; the only clock coordination reads.
SELECT coalesce(%(now)s::timestamptz, now())

-- fragment: transaction_limits
SELECT set_config('lock_timeout', %(lock_timeout)s, true),
       set_config('statement_timeout', %(statement_timeout)s, true),
       set_config('idle_in_transaction_session_timeout', %(idle_timeout)s, true)

-- name: session_limits :one
-- Per-transaction limits (SET LOCAL semantics, so they pass PgBouncer in transaction mode): a lock
-- wait, a statement or an idle transaction cannot hold the daemon or the server for long.
{{transaction_limits}}

-- name: session_begin :rowcount
-- Begins a transaction with the per-transaction limits of session_limits, in one round trip (a
-- simple query of two statements, parameters bound client-side; fine through PgBouncer).
BEGIN;
{{transaction_limits}}

-- name: session_begin_snapshot :rowcount
-- Begins one read-only snapshot transaction (every statement in it sees the same moment, and
-- nothing in it can write) with the limits of session_limits, in one round trip.
BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY;
{{transaction_limits}}

-- name: session_begin_clock :rowcount
-- Begins a transaction with the limits of session_limits and reads its clock (now(), fixed for
-- the whole transaction, or the pinned time a test passes), in one round trip; the Client's
-- Session may append the transaction's first statement to the same simple query.
BEGIN;
{{transaction_limits}},
       coalesce(%(now)s::timestamptz, now()) AS db_now

-- name: session_jit_off :one
-- No JIT compilation for the rest of this transaction: a statement over every live task is
-- costed high enough to be compiled, and compiling took longer than running it (0.7 s of 0.9 s
-- at 10,000 tasks, bench/task_metrics.py).
SELECT set_config('jit', 'off', true)
