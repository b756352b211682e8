-- fragment: run_row
-- The run row of docs/cli.md (domain.run.HistoryRow; tests/unit/test_rows.py holds them equal),
-- over `run r JOIN occurrence o JOIN task t`: run_history, run_get, run_list_for_occurrence.
r.id, o.id AS occurrence_id, o.occurrence_seq, o.task_id, t.name AS task_name,
    o.scheduled_for, o.trigger, r.attempt, r.status, o.reason, r.owner AS instance_id,
    r.started_at, r.finished_at, r.exit_code, r.http_status, r.error, o.firing_count,
    o.last_scheduled_for, r.lease_token,
    CASE WHEN r.status = 'running' THEN o.cancel_requested_at END AS cancel_requested_at,
    {{occurrence_args_shown}}

-- fragment: occurrence_own_row
-- An occurrence's own row in run_history, in run_row's columns (run ones NULL), over `occurrence o
-- JOIN task t`: the occurrence side of both its branches.
NULL::bigint AS id, o.id AS occurrence_id, o.occurrence_seq, o.task_id, t.name,
    o.scheduled_for, o.trigger, NULL::integer AS attempt, o.status, o.reason, o.claim_owner,
    NULL::timestamptz AS started_at, o.finished_at, NULL::integer AS exit_code,
    NULL::integer AS http_status, o.error, o.firing_count, o.last_scheduled_for,
    NULL::bigint AS lease_token, NULL::timestamptz AS cancel_requested_at,
    {{occurrence_args_shown}}

-- name: run_history :many
-- One page of history, newest occurrence first: within an occurrence its own row first, then its
-- runs, newest first. A run row per attempt, plus an occurrence row (id NULL) for an occurrence
-- whose status its latest run does not show (it never ran, waits for its next attempt after a
-- retry or a takeover, or ended in the queue); only OWN_HISTORY_ROW can be such a status.
-- Keyset: rows after (after_occurrence, after_run), after_run NULL meaning "after that
-- occurrence's own row". Each side has two branches, one of which a NULL or non-NULL parameter
-- rules out at planning (One-Time Filter: false):
-- - the fleet's (no task, or a task with a status): the run side walks run_occurrence_idx (or
--   run_status_history_idx with a status) backwards; the occurrence side walks
--   occurrence_own_row_idx (its statuses written out: OWN_HISTORY_ROW) backwards;
-- - one task's (`runs list --task`, the console's task page): both sides walk that task's range
--   of occurrence_task_history_idx (task_id, id) backwards, the run side reading each
--   occurrence's runs by run_occurrence_idx. The range is written as row comparisons on
--   (task_id, id) and the order as (task_id, id), not `task_id = X` and `id`: with the equality
--   the planner may walk occurrence_pkey backwards instead, filtering on the task, and a task
--   whose occurrences are the oldest ids (a per-second task among a fleet) read every newer row
--   first (900,000 of them in bench/console_pages.py: 956 ms).
-- The occurrence side reads no further down than the run side's page reached when that page is
-- full, so neither scans the whole history. Its columns are the run row of docs/cli.md
-- (run_row below, domain.run.HistoryRow); run_get and run_list_for_occurrence select it too.
WITH runs AS MATERIALIZED (
    (SELECT {{run_row}}
     FROM run r JOIN occurrence o ON o.id = r.occurrence_id JOIN task t ON t.id = o.task_id
     WHERE (%(task_id)s::bigint IS NULL OR %(status)s::text IS NOT NULL)
       AND (%(status)s::text IS NULL OR r.status = %(status)s)
       AND (%(status)s::text IS NULL OR %(status)s = ANY(%(run_statuses)s::text[]))
       AND (%(task_id)s::bigint IS NULL OR o.task_id = %(task_id)s)
       AND (%(after_occurrence)s::bigint IS NULL
            OR (r.occurrence_id, r.id) < (%(after_occurrence)s::bigint,
                                          coalesce(%(after_run)s::bigint, 9223372036854775807)))
       -- the same bound on the occurrence side, so a join walking both keys starts at the cursor
       AND (%(after_occurrence)s::bigint IS NULL OR o.id <= %(after_occurrence)s::bigint)
     ORDER BY r.occurrence_id DESC, r.id DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT {{run_row}}
     FROM task t CROSS JOIN occurrence o  -- t is the task: no join on o.task_id (see above)
     CROSS JOIN LATERAL (
         SELECT * FROM run r WHERE r.occurrence_id = o.id
           AND (%(after_occurrence)s::bigint IS NULL
                OR (r.occurrence_id, r.id) < (%(after_occurrence)s::bigint,
                                              coalesce(%(after_run)s::bigint,
                                                       9223372036854775807)))
         ORDER BY r.id DESC LIMIT %(limit)s) r
     WHERE %(task_id)s::bigint IS NOT NULL AND %(status)s::text IS NULL
       AND t.id = %(task_id)s
       AND (o.task_id, o.id) >= (%(task_id)s::bigint, 0)
       AND (o.task_id, o.id) <= (%(task_id)s::bigint,
                                 coalesce(%(after_occurrence)s::bigint, 9223372036854775807))
     ORDER BY o.task_id DESC, o.id DESC, r.id DESC
     LIMIT %(limit)s)
), reach AS (
    SELECT coalesce(min(occurrence_id), 0) AS low FROM runs HAVING count(*) >= %(limit)s
), occurrences AS MATERIALIZED (
    (SELECT {{occurrence_own_row}}
     FROM occurrence o JOIN task t ON t.id = o.task_id
     LEFT JOIN LATERAL (
         SELECT r.status FROM run r WHERE r.occurrence_id = o.id
         ORDER BY r.id DESC LIMIT 1) latest ON true
     WHERE (%(task_id)s::bigint IS NULL OR %(status)s::text IS NOT NULL)
       AND o.status IN ('queued', 'launching', 'skipped', 'expired', 'cancelled')
       AND (%(status)s::text IS NULL OR o.status = %(status)s)
       AND (%(status)s::text IS NULL
            OR %(status)s IN ('queued', 'launching', 'skipped', 'expired', 'cancelled'))
       AND (%(task_id)s::bigint IS NULL OR o.task_id = %(task_id)s)
       AND (%(after_occurrence)s::bigint IS NULL OR o.id < %(after_occurrence)s)
       AND o.id >= coalesce((SELECT low FROM reach), 0)
       AND o.status IS DISTINCT FROM latest.status
     ORDER BY o.id DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT {{occurrence_own_row}}
     FROM task t CROSS JOIN occurrence o
     LEFT JOIN LATERAL (
         SELECT r.status FROM run r WHERE r.occurrence_id = o.id
         ORDER BY r.id DESC LIMIT 1) latest ON true
     WHERE %(task_id)s::bigint IS NOT NULL AND %(status)s::text IS NULL
       AND t.id = %(task_id)s
       AND o.status IN ('queued', 'launching', 'skipped', 'expired', 'cancelled')
       AND (o.task_id, o.id) >= (%(task_id)s::bigint, coalesce((SELECT low FROM reach), 0))
       AND (o.task_id, o.id) < (%(task_id)s::bigint,
                                coalesce(%(after_occurrence)s::bigint, 9223372036854775807))
       AND o.status IS DISTINCT FROM latest.status
     ORDER BY o.task_id DESC, o.id DESC
     LIMIT %(limit)s)
)
SELECT * FROM (SELECT * FROM runs UNION ALL SELECT * FROM occurrences) history
ORDER BY occurrence_id DESC, id DESC NULLS FIRST
LIMIT %(limit)s

-- name: run_get :one
-- One run as a run row plus the run detail of docs/cli.md (domain.run.RunDetail).
SELECT {{run_row}},
    o.status AS occurrence_status, r.lease_expires_at, r.takeover_at, r.finished_by, r.output_tail,
    o.not_before AS occurrence_not_before,
    extract(epoch FROM o.retry_delay)::float8 AS occurrence_retry_delay_seconds
FROM run r JOIN occurrence o ON o.id = r.occurrence_id JOIN task t ON t.id = o.task_id
WHERE r.id = %(id)s

-- name: run_list_for_occurrence :many
-- The runs of one occurrence, oldest first, in run_get's shape.
SELECT {{run_row}},
    o.status AS occurrence_status, r.lease_expires_at, r.takeover_at, r.finished_by, r.output_tail,
    o.not_before AS occurrence_not_before,
    extract(epoch FROM o.retry_delay)::float8 AS occurrence_retry_delay_seconds
FROM run r JOIN occurrence o ON o.id = r.occurrence_id JOIN task t ON t.id = o.task_id
WHERE r.occurrence_id = %(occurrence_id)s
ORDER BY r.id

-- name: run_renew :many
-- Renews, without waiting for any row, the held (run, occurrence, token) triples this process
-- holds, in id order, touching only run rows; returns every triple with its outcome: `renewed`
-- (with whether its occurrence has a cancel request: the owner stops that job and keeps renewing
-- until it is gone), `locked` (another session holds the row: not renewed, not lost either;
-- `run_renew_one` tries it again) or `fenced` (not this owner's at that token: taken over or
-- cancelled). One row held by someone else delays only its own renewal. A renewed run says too
-- whether someone follows its output (`followed_at` within `follow_window` of the database's
-- clock): read from the row the update holds, so an unfollowed run costs no more.
WITH held AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(occurrence_ids)s::bigint[], %(tokens)s::bigint[])
        AS h(id, occurrence_id, token)
), mine AS MATERIALIZED (
    SELECT r.id FROM run r
    JOIN held h ON r.id = h.id AND r.occurrence_id = h.occurrence_id AND r.lease_token = h.token
    WHERE r.finished_at IS NULL AND r.owner = %(owner)s AND r.status = 'running'
    ORDER BY r.id FOR UPDATE OF r SKIP LOCKED
), renewed AS (
    UPDATE run SET lease_expires_at = clock_timestamp() + %(ttl)s,
        takeover_at = clock_timestamp() + %(ttl)s + %(grace)s
    FROM mine, occurrence o
    WHERE run.finished_at IS NULL AND o.finished_at IS NULL
      AND run.id = mine.id AND o.id = run.occurrence_id
    RETURNING run.id, o.cancel_requested_at IS NOT NULL AS cancel_requested,
        run.followed_at > clock_timestamp() - %(follow_window)s AS followed
)
SELECT h.id, coalesce(n.cancel_requested, false) AS cancel_requested,
    coalesce(n.followed, false) AS followed,
    CASE WHEN n.id IS NOT NULL THEN 'renewed' WHEN r.id IS NOT NULL THEN 'locked'
        ELSE 'fenced' END AS outcome
FROM held h
LEFT JOIN renewed n ON n.id = h.id
LEFT JOIN run r ON r.finished_at IS NULL AND r.id = h.id AND r.occurrence_id = h.occurrence_id
    AND r.lease_token = h.token AND r.owner = %(owner)s AND r.status = 'running'
ORDER BY h.id

-- name: run_renew_one :one
-- Renews one held (run, occurrence, token) triple that `run_renew` found locked, waiting for its
-- row up to the transaction's lock timeout (a lock error: still locked, not lost); no row: fenced.
-- Whether it is followed as in `run_renew`.
UPDATE run SET lease_expires_at = clock_timestamp() + %(ttl)s,
    takeover_at = clock_timestamp() + %(ttl)s + %(grace)s
FROM occurrence o
WHERE run.finished_at IS NULL AND o.finished_at IS NULL
  AND run.id = %(id)s AND run.occurrence_id = %(occurrence_id)s AND run.lease_token = %(token)s
  AND run.owner = %(owner)s AND run.status = 'running' AND o.id = run.occurrence_id
RETURNING run.id, o.cancel_requested_at IS NOT NULL AS cancel_requested,
    coalesce(run.followed_at > clock_timestamp() - %(follow_window)s, false) AS followed

-- name: run_write_output :rowcount
-- The owner writes a followed running run's output so far (the storable last 64 KiB), fenced on
-- owner and token: 0 rows means the run is no longer this owner's at that token, and nothing
-- was written.
UPDATE run SET output_tail = %(output_tail)s
WHERE finished_at IS NULL AND id = %(id)s AND occurrence_id = %(occurrence_id)s AND lease_token = %(token)s
  AND owner = %(owner)s AND status = 'running'

-- name: run_follow :one
-- A follower (`runs logs -f`) reads one run's status and output tail (the owner's live writes
-- while it runs, the final one after), and marks a running run followed at the database's clock
-- when its mark is older than `refresh` (a follower polling often writes the row no more often).
WITH mark AS (
    UPDATE run SET followed_at = clock_timestamp()
    WHERE finished_at IS NULL AND id = %(id)s AND status = 'running'
      AND (followed_at IS NULL OR followed_at < clock_timestamp() - %(refresh)s)
    RETURNING id
)
SELECT r.id, r.status, r.output_tail, r.owner, r.exit_code, r.http_status, r.error
FROM run r WHERE r.id = %(id)s

-- name: run_output :one
-- One run's status and output tail, for `runs logs` without -f (nothing written).
SELECT id, status, output_tail, owner, exit_code, http_status, error FROM run WHERE id = %(id)s

-- name: run_lock :one
-- Locks one run (after its occurrence: the one lock order).
SELECT * FROM run WHERE id = %(id)s FOR UPDATE

-- fragment: run_end
-- How a statement ends a run (issue 47), as occurrence_end (sql/occurrence.sql) ends an
-- occurrence: `DELETE FROM run WHERE finished_at IS NULL AND <fence> RETURNING r` and an INSERT
-- of the row with its outcome through the parent, never an UPDATE of `finished_at` (a writer
-- that waited on the row would fail with SQLSTATE 40001 instead of matching nothing: fenced).
finished_at IS NULL

-- name: run_finish :rowcount
-- Records a run's outcome; fenced: only the owner holding the current token may write it. A
-- move: the fragment run_end says why.
WITH gone AS (
    DELETE FROM run r
    WHERE r.{{run_end}} AND r.id = %(id)s AND r.owner = %(owner)s AND r.lease_token = %(token)s
      AND r.status = 'running'
    RETURNING r
)
INSERT INTO run OVERRIDING SYSTEM VALUE
SELECT n.* FROM gone g CROSS JOIN LATERAL jsonb_populate_record(g.r, jsonb_build_object(
    'status', %(status)s::text, 'exit_code', %(exit_code)s::int,
    'http_status', %(http_status)s::int, 'output_tail', %(output_tail)s::text,
    'error', %(error)s::text, 'finished_at', clock_timestamp(),
    'finished_by', %(owner)s::text)) n

-- name: run_finish_many :many
-- Records the outcomes of a batch of runs in id order; each is fenced: only the owner holding
-- the current token may write it. Returns the ids written; a missing one was fenced. A move:
-- the fragment run_end says why.
WITH mine AS MATERIALIZED (
    SELECT r.id FROM run r
    JOIN unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS h(id, token)
      ON r.id = h.id AND r.lease_token = h.token
    WHERE r.{{run_end}} AND r.owner = %(owner)s AND r.status = 'running'
    ORDER BY r.id FOR UPDATE OF r
), gone AS (
    DELETE FROM run r USING mine
    WHERE r.{{run_end}} AND r.id = mine.id
    RETURNING r
)
INSERT INTO run OVERRIDING SYSTEM VALUE
SELECT n.* FROM gone g
JOIN unnest(%(ids)s::bigint[], %(statuses)s::text[], %(exit_codes)s::int[],
            %(http_statuses)s::int[], %(output_tails)s::text[], %(errors)s::text[])
     AS f(id, status, exit_code, http_status, output_tail, error) ON f.id = (g.r).id
CROSS JOIN LATERAL jsonb_populate_record(g.r, jsonb_build_object(
    'status', f.status, 'exit_code', f.exit_code, 'http_status', f.http_status,
    'output_tail', f.output_tail, 'error', f.error,
    'finished_at', coalesce(%(now)s::timestamptz, clock_timestamp()),
    'finished_by', %(owner)s::text)) n
RETURNING id

-- name: run_takeover_candidates :many
-- Runs past their takeover point (database clock), a page at a time in id order; none within the
-- quiet period after the server's start or the fleet's first sighting of its epoch (a promotion),
-- so owners cut off by a restart or a failover can renew first.
SELECT r.id, r.occurrence_id, o.task_id, r.lease_token, r.owner FROM run r
JOIN occurrence o ON o.id = r.occurrence_id
WHERE r.finished_at IS NULL AND o.finished_at IS NULL
  AND r.status = 'running' AND r.takeover_at < clock_timestamp()
  AND (o.needs_build IS NULL OR o.needs_build = ANY(%(known)s::text[]))
  AND clock_timestamp() > {{quiet_from}} + %(restart_quiet)s
  AND r.id > %(after)s
ORDER BY r.id
LIMIT %(limit)s

-- name: run_inside_lease :many
-- Running runs, each with the point from which it can be taken over (its takeover point, or the
-- end of the quiet period after a database restart or a failover if later) and whether its owner still
-- renews: its instance is registered and renewed this lease within `overdue` TTLs of its own
-- TTL. All on the database clock, which it returns too (`recover`).
SELECT r.id, r.occurrence_id, o.task_id, r.owner, r.lease_expires_at,
    greatest(r.takeover_at, {{quiet_from}} + %(restart_quiet)s) AS takeover_from,
    (i.id IS NOT NULL
     AND r.lease_expires_at - i.lease_ttl > clock_timestamp() - i.lease_ttl * %(overdue)s)
        AS renewing,
    clock_timestamp() AS db_now
FROM run r JOIN occurrence o ON o.id = r.occurrence_id LEFT JOIN instance i ON i.id = r.owner
WHERE r.finished_at IS NULL AND o.finished_at IS NULL AND r.status = 'running'
ORDER BY r.id

-- name: run_take_over :rowcount
-- Compare-and-set on the token: ends a run whose owner stopped renewing, only if nothing changed
-- since it was seen and its takeover point has passed. A move: the fragment run_end says why.
WITH gone AS (
    DELETE FROM run r
    WHERE r.{{run_end}} AND r.id = %(id)s AND r.lease_token = %(token)s
      AND r.status = 'running' AND r.takeover_at < clock_timestamp()
      AND clock_timestamp() > {{quiet_from}} + %(restart_quiet)s
    RETURNING r
)
INSERT INTO run OVERRIDING SYSTEM VALUE
SELECT n.* FROM gone g CROSS JOIN LATERAL jsonb_populate_record(g.r, jsonb_build_object(
    'status', 'interrupted', 'finished_at', clock_timestamp(), 'finished_by', %(by)s::text,
    'error', %(error)s::text)) n

-- name: run_running_by_build :many
-- Executing runs per build (`status` during a rollout); NULL: a build before revision 0004.
SELECT build_revision, count(*) AS runs FROM run WHERE finished_at IS NULL AND status = 'running'
GROUP BY build_revision ORDER BY build_revision NULLS FIRST

-- name: run_succeed_many :many
-- Records a batch of successful runs in one round trip and one transaction (sent after the
-- limits as one simple query: `database.one_trip`), in sd_succeed_runs_v4
-- (sql/functions/succeed_runs.sql: its locks, fences and plans): each run still ours at its
-- token whose occurrence is still running at that token ends with its occurrence, a one-shot
-- task shows it; returns the run ids written (a missing one was fenced: nothing was written for
-- it). Idle daemons are woken (a slot came free) when `wake`.
SELECT id FROM sd_succeed_runs_v4(%(ids)s::bigint[], %(tokens)s::bigint[],
    %(occurrence_ids)s::bigint[], %(task_ids)s::bigint[], %(exit_codes)s::int[],
    %(http_statuses)s::int[], %(output_tails)s::text[], %(errors)s::text[], %(owner)s::text,
    %(channel)s::text, %(wake)s::boolean, %(now)s::timestamptz) AS written(id)

-- name: run_running_page :many
-- The running runs (console's "running now"), oldest start first, at most `limit`: owner, lease
-- expiry and takeover point, on run_takeover_idx's partial set.
SELECT r.id, r.occurrence_id, o.task_id, t.name AS task_name, o.scheduled_for, o.trigger,
    r.attempt, r.owner, r.started_at, r.lease_expires_at, r.takeover_at,
    o.cancel_requested_at, clock_timestamp() AS db_now
FROM run r JOIN occurrence o ON o.id = r.occurrence_id JOIN task t ON t.id = o.task_id
WHERE r.finished_at IS NULL AND o.finished_at IS NULL AND r.status = 'running'
ORDER BY r.started_at, r.id
LIMIT %(limit)s

-- name: run_takeovers_since :scalar
-- Runs taken over (ended `interrupted` by an instance other than their owner) since `since`
-- ago on the database clock, counted up to `cap` (the console shows "cap+").
SELECT count(*) FROM (
    SELECT 1 FROM run
    WHERE status = 'interrupted' AND finished_at > clock_timestamp() - %(since)s
      AND finished_by IS DISTINCT FROM owner
    LIMIT %(cap)s) taken
