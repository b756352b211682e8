-- fragment: task_defined
-- A task row's columns but its shown outcome's (`last_*`) and its secret and jsonb ones (payload,
-- notify URL and headers: as the row has them in task_read, as task_secrets shows them to the
-- connected role in task_find and task_list, ADR 0031), each interval capped at 36,525 days
-- (100 years: the longest duration any input takes, domain.limit.MAX_DURATION, so a value it
-- accepted is read unchanged). A value an older build or a hand wrote past that (one Python
-- cannot hold, past 999,999,999 days, or one that adds to a time past the calendar) would
-- otherwise fail the read of a whole batch, every pass.
id, name, schedule_kind, cron_expr, run_at, anchor_at, timezone, dst_gap, dst_overlap,
    executor, concurrency_key, overlap, misfire, catchup_limit, max_attempts, status,
    paused, next_run_at, occurrence_seq, created_at, updated_at,
    deleted_at, parked_at, park_error, source, uuid, in_process,
    notify_on, paused_until, needs_build,
    CASE WHEN deadline > interval '36525 days' THEN interval '36525 days'
         ELSE deadline END AS deadline,
    CASE WHEN every > interval '36525 days' THEN interval '36525 days'
         ELSE every END AS every,
    CASE WHEN misfire_grace > interval '36525 days' THEN interval '36525 days'
         ELSE misfire_grace END AS misfire_grace,
    CASE WHEN catchup_window > interval '36525 days' THEN interval '36525 days'
         ELSE catchup_window END AS catchup_window,
    CASE WHEN start_deadline > interval '36525 days' THEN interval '36525 days'
         ELSE start_deadline END AS start_deadline,
    CASE WHEN run_timeout > interval '36525 days' THEN interval '36525 days'
         ELSE run_timeout END AS run_timeout,
    CASE WHEN backoff > interval '36525 days' THEN interval '36525 days'
         ELSE backoff END AS backoff,
    CASE WHEN backoff_max > interval '36525 days' THEN interval '36525 days'
         ELSE backoff_max END AS backoff_max,
    CASE WHEN spread > interval '36525 days' THEN interval '36525 days'
         ELSE spread END AS spread,
    CASE WHEN history_retention > interval '36525 days' THEN interval '36525 days'
         ELSE history_retention END AS history_retention

-- fragment: task_read
-- A task row as the daemon reads it to act on it: every column (test_poison_settings.py holds
-- the list to the table's), its intervals capped (task_defined), its `last_*` as the row holds
-- them, its jsonb as text: psycopg would decode it while fetching, where one value nested
-- deeper than the decoder recurses failed the whole batch (issue 44); task_store.record
-- decodes each row's within a bound.
{{task_defined}}, notify_url, payload::text AS payload, notify_headers::text AS notify_headers,
    notify_header_refs::text AS notify_header_refs, last_outcome_seq, last_occurrence_id,
    last_scheduled_for, last_status, last_finished_at, last_error

-- fragment: task_shown
-- A task row `t` (joined with {{task_outcome}}) as `tasks list/show`, `--json` and the Client
-- show it: every column but the secret ones (each statement adds them: the row's to its writer,
-- task_secrets's to a reader), its intervals capped, and its newest outcome (`last_*`): a recurring
-- task's read from its occurrences (revision 0021: its successes no longer write its row, whose
-- `last_*` are stale), a one-shot task's from its row (finalized with its deciding occurrence),
-- and the names of its calendars (revision 0036: task_calendar's key, one index range).
{{task_defined}}, notify_header_refs,
    CASE WHEN schedule_kind = 'once' THEN last_outcome_seq
         ELSE coalesce(shown.shown_seq, 0) END AS last_outcome_seq,
    CASE WHEN schedule_kind = 'once' THEN last_occurrence_id
         ELSE shown.shown_id END AS last_occurrence_id,
    CASE WHEN schedule_kind = 'once' THEN last_scheduled_for
         ELSE shown.shown_scheduled_for END AS last_scheduled_for,
    CASE WHEN schedule_kind = 'once' THEN last_status
         ELSE shown.shown_status END AS last_status,
    CASE WHEN schedule_kind = 'once' THEN last_finished_at
         ELSE shown.shown_finished_at END AS last_finished_at,
    CASE WHEN schedule_kind = 'once' THEN last_error
         ELSE shown.shown_error END AS last_error,
    ARRAY(SELECT c.name FROM task_calendar tc JOIN calendar c ON c.id = tc.calendar_id
          WHERE tc.task_id = t.id ORDER BY c.name) AS exclude_calendars

-- fragment: task_secrets
-- The secret columns of a task row `t` as the connected role may see them: unmasked to one
-- that may select them, masked (sd_masked_v1) to the reader, which may not (ADR 0031). The
-- view's row by its key: one probe of task_pkey per row shown. OFFSET 0 keeps the planner from
-- pulling the view up into a join of task with itself, which hashes the whole table before a
-- page's sort (test_cli_paging's plan guard).
CROSS JOIN LATERAL (
    SELECT v.payload, v.notify_url, v.notify_headers FROM task_secret_shown v WHERE v.id = t.id
    OFFSET 0
) secrets

-- fragment: task_outcome
-- The newest outcome of a recurring task `t`: its finished occurrence of highest sequence, a
-- `skipped` one aside (no writer ever showed one), with its error, else its reason; one read
-- of occurrence_task_outcome_idx (revision 0021), none for a one-shot task.
LEFT JOIN LATERAL (
    SELECT o.occurrence_seq AS shown_seq, o.id AS shown_id,
        o.scheduled_for AS shown_scheduled_for, o.status AS shown_status,
        o.finished_at AS shown_finished_at, coalesce(o.error, o.reason) AS shown_error
    FROM occurrence o
    WHERE o.task_id = t.id AND t.schedule_kind <> 'once'
      AND o.finished_at IS NOT NULL AND o.status <> 'skipped'
    ORDER BY o.occurrence_seq DESC
    LIMIT 1
) shown ON true

-- name: task_insert :one
-- Inserts a task, unless a live task has its name (then no row: the caller's Conflict, and its
-- transaction goes on, with no savepoint to pay for); next_run_at was computed from the database
-- clock by the caller. Only if it inserted, idle daemons are woken on `channel` with
-- `reason_woken` (the new task's due time) when the transaction commits: one round trip for both.
WITH added AS (
    INSERT INTO task (
        name, schedule_kind, cron_expr, every, run_at, anchor_at, timezone, dst_gap, dst_overlap,
        executor, payload, concurrency_key, overlap, misfire, misfire_grace, catchup_limit,
        catchup_window, start_deadline, run_timeout, max_attempts, backoff, paused, next_run_at,
        history_retention, source, in_process, notify_url, notify_on, deadline, backoff_max,
        spread, notify_headers, notify_header_refs, needs_build, created_at, updated_at)
    VALUES (
        %(name)s, %(schedule_kind)s, %(cron_expr)s, %(every)s, %(run_at)s, %(anchor_at)s,
        %(timezone)s, %(dst_gap)s, %(dst_overlap)s, %(executor)s, %(payload)s,
        %(concurrency_key)s, %(overlap)s, %(misfire)s, %(misfire_grace)s, %(catchup_limit)s,
        %(catchup_window)s, %(start_deadline)s, %(run_timeout)s, %(max_attempts)s, %(backoff)s,
        %(paused)s, %(next_run_at)s, %(history_retention)s, %(source)s, %(in_process)s,
        %(notify_url)s, %(notify_on)s::text[], %(deadline)s, %(backoff_max)s, %(spread)s,
        %(notify_headers)s, %(notify_header_refs)s, %(needs_build)s, %(anchor_at)s,
        %(anchor_at)s)
    ON CONFLICT (name) WHERE deleted_at IS NULL DO NOTHING
    RETURNING *
), wake AS (
    SELECT pg_notify(%(channel)s, %(reason_woken)s) FROM added
)
SELECT added.* FROM added CROSS JOIN wake

-- name: task_find :one
-- A task by id (deleted ones too, for history) or by the name of a live task, as it is shown
-- to the connected role (the reader's secrets masked).
SELECT {{task_shown}}, secrets.payload, secrets.notify_url, secrets.notify_headers
FROM task t {{task_secrets}} {{task_outcome}}
WHERE (id = %(id)s) OR (%(id)s::bigint IS NULL AND name = %(name)s AND deleted_at IS NULL)

-- name: task_lock_ref :one
-- Finds a task as task_find does and takes its row lock in the same statement (one round trip):
-- the parent lock every Client change takes first. A task deleted while this waited for the lock
-- no longer matches by name; by id the caller sees its deleted_at. As it is shown, its secrets
-- as the row has them (a writer's).
SELECT {{task_shown}}, t.payload, t.notify_url, t.notify_headers FROM task t {{task_outcome}}
WHERE (id = %(id)s) OR (%(id)s::bigint IS NULL AND name = %(name)s AND deleted_at IS NULL)
FOR UPDATE OF t

-- name: task_lock :one
-- Locks a task row, deleted or not: the parent lock every multi-row change takes first (the
-- outcome of a job of a task deleted while it ran is still recorded). Its intervals capped.
SELECT {{task_read}} FROM task WHERE id = %(id)s FOR UPDATE

-- name: task_lock_many :many
-- Locks a batch of task rows in id order, deleted or not: the parent locks a batch of
-- completions takes first. Their intervals capped.
SELECT {{task_read}} FROM task WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id FOR UPDATE

-- name: task_list :many
-- Live tasks, a page at a time in the byte order of their names (task_name_c_idx, whatever the
-- database's collation), after the name `after`; optionally only the names matching `pattern`
-- (a LIKE-escaped prefix and `%`: an index range), one status, paused or not. No limit: all.
-- As they are shown to the connected role (the reader's secrets masked): one read of
-- occurrence_task_outcome_idx per task of the page.
SELECT {{task_shown}}, secrets.payload, secrets.notify_url, secrets.notify_headers
FROM task t {{task_secrets}} {{task_outcome}}
WHERE deleted_at IS NULL
  AND (%(after)s::text IS NULL OR (name COLLATE "C") > %(after)s::text)
  AND (%(pattern)s::text IS NULL OR (name COLLATE "C") LIKE %(pattern)s::text)
  AND (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(paused)s::boolean IS NULL OR paused = %(paused)s::boolean)
ORDER BY name COLLATE "C"
LIMIT %(limit)s

-- name: task_update :one
-- Rewrites a locked task's definition; takes effect from its next firing. Returns it as shown.
WITH t AS (
UPDATE task SET
    schedule_kind = %(schedule_kind)s, cron_expr = %(cron_expr)s, every = %(every)s,
    run_at = %(run_at)s, anchor_at = %(anchor_at)s, timezone = %(timezone)s, dst_gap = %(dst_gap)s,
    dst_overlap = %(dst_overlap)s, executor = %(executor)s, payload = %(payload)s,
    concurrency_key = %(concurrency_key)s, overlap = %(overlap)s, misfire = %(misfire)s,
    misfire_grace = %(misfire_grace)s, catchup_limit = %(catchup_limit)s,
    catchup_window = %(catchup_window)s, start_deadline = %(start_deadline)s,
    run_timeout = %(run_timeout)s, max_attempts = %(max_attempts)s, backoff = %(backoff)s,
    paused = %(paused)s, next_run_at = %(next_run_at)s, status = %(status)s,
    paused_until = CASE WHEN paused = %(paused)s THEN paused_until END,
    history_retention = %(history_retention)s, source = coalesce(%(source)s, source),
    in_process = %(in_process)s, notify_url = %(notify_url)s,
    notify_on = %(notify_on)s::text[], deadline = %(deadline)s, backoff_max = %(backoff_max)s,
    spread = %(spread)s, notify_headers = %(notify_headers)s,
    notify_header_refs = %(notify_header_refs)s, needs_build = %(needs_build)s,
    updated_at = %(now)s
WHERE id = %(id)s AND deleted_at IS NULL
RETURNING *
)
SELECT {{task_shown}}, payload, notify_url, notify_headers FROM t {{task_outcome}}

-- name: task_set_paused :one
-- Pauses or resumes a locked task; resume passes the next firing from now (paused firings are
-- not owed). `paused_until`: the instant a pause ends by itself (revision 0033), NULL on a
-- resume and on a plain pause. Returns it as shown.
WITH t AS (
UPDATE task SET paused = %(paused)s, next_run_at = %(next_run_at)s, status = %(status)s,
    paused_until = %(paused_until)s::timestamptz,
    last_error = coalesce(%(last_error)s, last_error), updated_at = %(now)s
WHERE id = %(id)s AND deleted_at IS NULL
RETURNING *
)
SELECT {{task_shown}}, payload, notify_url, notify_headers FROM t {{task_outcome}}

-- name: task_next_seq :scalar
-- Allocates the next occurrence sequence number of a task whose row lock the caller holds.
UPDATE task SET occurrence_seq = occurrence_seq + 1 WHERE id = %(id)s RETURNING occurrence_seq

-- name: task_delete :rowcount
-- Soft-deletes a locked task: its history stays queryable by id and its name becomes free.
UPDATE task SET deleted_at = %(now)s, next_run_at = NULL, updated_at = %(now)s
WHERE id = %(id)s AND deleted_at IS NULL

-- fragment: known_to_this_build
-- A row (task or occurrence) this build may act on (ADR 0029): unmarked, or marked with a
-- revision of `known`, the revisions of this build's chain. The reconciler's scans pass over
-- the others; the hot scans (task_claim_due, the claim) never read them, by their indexes.
(needs_build IS NULL OR needs_build = ANY(%(known)s::text[]))

-- fragment: task_dispatchable
-- A live task the dispatcher plans: enabled, not paused, not parked (task_due_idx's predicate,
-- and task_due_marked_idx's, less its mark).
deleted_at IS NULL AND NOT paused AND status = 'enabled' AND parked_at IS NULL

-- fragment: task_marked_known
-- A task marked for a build whose chain has the revision, one of `known` (this build's chain):
-- task_due_marked_idx (ADR 0029).
needs_build IS NOT NULL AND needs_build = ANY(%(known)s::text[])

-- fragment: task_due_lane
-- The due tasks of one lane, locked in due order, a batch at most; those another dispatcher
-- holds skipped. Their intervals capped, and the ids of each one's calendars (revision 0036; an
-- index probe of task_calendar's key, empty for most): the dispatcher reads their dates only for
-- those.
SELECT {{task_read}},
    ARRAY(SELECT tc.calendar_id FROM task_calendar tc WHERE tc.task_id = task.id) AS calendar_ids
FROM task
WHERE {{task_dispatchable}} AND next_run_at <= coalesce(%(now)s::timestamptz, now())

-- name: task_claim_due :many
-- Locks a batch of due, enabled, unpaused tasks; tasks another dispatcher holds are skipped. Two
-- lanes (ADR 0029): first the tasks marked with a revision this build knows
-- (task_due_marked_idx: empty outside a rolling upgrade), then the unmarked ones (task_due_idx,
-- which holds no marked task, so a build never reads one marked with a revision it does not
-- know); the second is read only while the first leaves room in the batch.
SELECT * FROM ({{task_due_lane}} AND {{task_marked_known}}
               ORDER BY next_run_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED) marked
UNION ALL
SELECT * FROM ({{task_due_lane}} AND needs_build IS NULL
               ORDER BY next_run_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED) unmarked
LIMIT %(limit)s

-- name: task_record_outcome_many :scalar
-- Shows final outcomes on their locked tasks, in sd_show_outcomes_v1 (the one home of the
-- rule: sql/functions/show_outcomes.sql): per task its newest outcome, only if newer than the
-- one shown; a one-shot task still `running` takes the lifecycle of its newest firing (never a
-- manual trigger) once no newer firing exists. Returns how many tasks changed.
SELECT sd_show_outcomes_v1(%(task_ids)s::bigint[], %(occurrence_ids)s::bigint[],
    %(seqs)s::bigint[], %(scheduled_fors)s::timestamptz[], %(statuses)s::text[],
    %(errors)s::text[], %(lifecycles)s::text[], %(decides)s::boolean[],
    %(now)s::timestamptz) AS shown

-- name: task_next_due_wake :one
-- What a dispatch leaves, for the loop's sleep: when the earliest enabled task not yet due falls
-- due (`next_due`), and the tasks still due, by due time, at most `limit` (`locked`: rows this
-- dispatch could not lock, which the loop backs off from until its next poll). When `wake`, also
-- wakes the idle daemons at commit (a dispatch queued more than its own claim can start).
-- `queue_due`: whether any queued occurrence may start by now (a retry whose backoff ended, work
-- a wake-up never announced), read on occurrence_queue_idx up to the first such row: the loop
-- claims on a poll only then, so an idle fleet sends no claims (issue 33 item 3). Each read in
-- the two lanes of task_claim_due and the claim (ADR 0029): rows marked with a revision this
-- build does not know are neither read nor counted.
SELECT pg_notify(%(channel)s, 'queued') WHERE %(wake)s;
SELECT least((SELECT min(next_run_at) FROM task
              WHERE {{task_dispatchable}} AND {{task_marked_known}}
                AND next_run_at > coalesce(%(now)s::timestamptz, now())),
             (SELECT min(next_run_at) FROM task
              WHERE {{task_dispatchable}} AND needs_build IS NULL
                AND next_run_at > coalesce(%(now)s::timestamptz, now()))) AS next_due,
       ARRAY(SELECT id FROM task
             WHERE {{task_dispatchable}} AND {{task_marked_known}}
               AND next_run_at <= coalesce(%(now)s::timestamptz, now())
             ORDER BY next_run_at, id LIMIT %(limit)s)
       || ARRAY(SELECT id FROM task
                WHERE {{task_dispatchable}} AND needs_build IS NULL
                  AND next_run_at <= coalesce(%(now)s::timestamptz, now())
                ORDER BY next_run_at, id LIMIT %(limit)s) AS locked,
       EXISTS (SELECT 1 FROM occurrence
               WHERE finished_at IS NULL AND status = 'queued' AND needs_build IS NOT NULL
                 AND needs_build = ANY(%(known)s::text[])
                 AND not_before <= coalesce(%(now)s::timestamptz, now()))
       OR EXISTS (SELECT 1 FROM occurrence
                  WHERE finished_at IS NULL AND status = 'queued' AND needs_build IS NULL
                    AND not_before <= coalesce(%(now)s::timestamptz, now())) AS queue_due

-- name: task_unfinished_one_shots :many
-- One-shot tasks still `running` with no active firing (a manual trigger never decides their
-- status, so its activity does not hold them), a page at a time.
SELECT t.id FROM task t
WHERE t.schedule_kind = 'once' AND t.status = 'running' AND t.deleted_at IS NULL
  AND {{known_to_this_build}}
  AND NOT EXISTS (SELECT 1 FROM occurrence o WHERE o.task_id = t.id AND o.finished_at IS NULL
                  AND o.status IN {{active_statuses}} AND o.trigger <> 'manual')
  AND t.id > %(after)s
ORDER BY t.id
LIMIT %(limit)s

-- name: task_finish_lifecycle :rowcount
-- Ends a locked one-shot task's lifecycle.
UPDATE task SET status = %(status)s, last_error = coalesce(%(error)s, last_error),
    updated_at = clock_timestamp()
WHERE id = %(id)s AND schedule_kind = 'once' AND status = 'running'

-- name: task_park :rowcount
-- Takes a task the dispatcher cannot plan out of the due scan, with its error, until an update.
UPDATE task SET parked_at = %(now)s, park_error = %(error)s, updated_at = %(now)s
WHERE id = %(id)s AND parked_at IS NULL

-- name: task_unpark :rowcount
-- Puts a parked task back in the due scan (the update that fixes it).
UPDATE task SET parked_at = NULL, park_error = NULL WHERE id = %(id)s AND parked_at IS NOT NULL

-- name: task_set_next_run :rowcount
-- Moves a locked task's next firing (after its past-due firings were recorded as skipped).
UPDATE task SET next_run_at = %(next_run_at)s, status = %(status)s WHERE id = %(id)s

-- name: task_list_parked :many
-- Live parked tasks, for `status`.
SELECT id, name, parked_at, park_error FROM task
WHERE parked_at IS NOT NULL AND deleted_at IS NULL ORDER BY id

-- name: task_overdue_summary :one
-- For `status`: how many live, enabled, unpaused, unparked tasks have a next_run_at past its
-- misfire grace on the database clock (nothing dispatched them: a stopped fleet), and the oldest.
-- Marked tasks too, whatever build they need (the two lanes of task_claim_due's indexes).
SELECT count(*) AS count, min(next_run_at) AS oldest_next_run_at FROM (
    SELECT next_run_at FROM task
    WHERE {{task_dispatchable}} AND needs_build IS NULL
      AND next_run_at < now() AND next_run_at + misfire_grace < now()
    UNION ALL
    SELECT next_run_at FROM task
    WHERE {{task_dispatchable}} AND needs_build IS NOT NULL
      AND next_run_at < now() AND next_run_at + misfire_grace < now()) overdue

-- name: task_list_pending_resumes :many
-- Live paused tasks with a pending `--until` end (task_paused_until_idx), soonest first, for
-- `status`.
SELECT id, name, paused_until FROM task
WHERE paused AND paused_until IS NOT NULL AND deleted_at IS NULL ORDER BY paused_until, id

-- name: task_insert_many :many
-- Inserts many tasks in one statement (Client.add_tasks): each parameter is one column as an
-- array, element i of every array being task i; next_run_at was computed from the database clock.
INSERT INTO task (
    name, schedule_kind, cron_expr, every, run_at, anchor_at, timezone, dst_gap, dst_overlap,
    executor, payload, concurrency_key, overlap, misfire, misfire_grace, catchup_limit,
    catchup_window, start_deadline, run_timeout, max_attempts, backoff, paused, next_run_at,
    in_process, notify_url, notify_on, deadline, backoff_max, spread, notify_headers,
    notify_header_refs, needs_build, created_at, updated_at)
SELECT name, schedule_kind, cron_expr, every, run_at, anchor_at, timezone, dst_gap, dst_overlap,
    executor, payload, concurrency_key, overlap, misfire, misfire_grace, catchup_limit,
    catchup_window, start_deadline, run_timeout, max_attempts, backoff, paused, next_run_at,
    in_process, notify_url, string_to_array(notify_on, ','), deadline, backoff_max, spread,
    notify_headers, notify_header_refs, needs_build, anchor_at, anchor_at
FROM unnest(
    %(name)s::text[], %(schedule_kind)s::text[], %(cron_expr)s::text[], %(every)s::interval[],
    %(run_at)s::timestamptz[], %(anchor_at)s::timestamptz[], %(timezone)s::text[],
    %(dst_gap)s::text[], %(dst_overlap)s::text[], %(executor)s::text[], %(payload)s::jsonb[],
    %(concurrency_key)s::text[], %(overlap)s::text[], %(misfire)s::text[],
    %(misfire_grace)s::interval[], %(catchup_limit)s::integer[], %(catchup_window)s::interval[],
    %(start_deadline)s::interval[], %(run_timeout)s::interval[], %(max_attempts)s::integer[],
    %(backoff)s::interval[], %(paused)s::boolean[], %(next_run_at)s::timestamptz[],
    %(in_process)s::boolean[], %(notify_url)s::text[], %(notify_on)s::text[],
    %(deadline)s::interval[], %(backoff_max)s::interval[], %(spread)s::interval[],
    %(notify_headers)s::jsonb[], %(notify_header_refs)s::jsonb[], %(needs_build)s::text[])
    WITH ORDINALITY AS r(name, schedule_kind, cron_expr, every, run_at, anchor_at, timezone,
        dst_gap, dst_overlap, executor, payload, concurrency_key, overlap, misfire, misfire_grace,
        catchup_limit, catchup_window, start_deadline, run_timeout, max_attempts, backoff, paused,
        next_run_at, in_process, notify_url, notify_on, deadline, backoff_max, spread,
        notify_headers, notify_header_refs, needs_build, ord)
ORDER BY ord
RETURNING *

-- name: task_next_seqs :scalar
-- Allocates `count` consecutive occurrence sequence numbers of a task whose row lock the caller
-- holds; returns the last of them.
UPDATE task SET occurrence_seq = occurrence_seq + %(count)s WHERE id = %(id)s
RETURNING occurrence_seq

-- name: task_secrets_readable :scalar
-- Whether the connected role may select every secret column of task (ADR 0031): the reader,
-- after `db roles`, may not, and reads them masked (task_secrets); `tasks export` says so.
SELECT has_column_privilege('task', 'payload', 'SELECT')
    AND has_column_privilege('task', 'notify_url', 'SELECT')
    AND has_column_privilege('task', 'notify_headers', 'SELECT')

-- name: task_python_exists :one
-- Whether any live task runs python jobs: a daemon starts its python workers at start only then
-- (idle workers cost memory a fleet of shell and HTTP tasks would pay for nothing). Read once at
-- start; a python task added later gets its workers on demand.
SELECT EXISTS (SELECT 1 FROM task WHERE executor = 'python' AND deleted_at IS NULL) AS found

-- fragment: task_metrics_live
-- The live tasks the per-task gauges name (runtime/task_metrics.py): the first `task_limit` by
-- id keep their names (a stable set: a new task never pushes an older one out), the rest share
-- `other` (`_other`); `due` is when a task fires next, when it is set to fire at all.
SELECT t.id, CASE WHEN row_number() OVER (ORDER BY t.id) <= %(task_limit)s THEN t.name
                  ELSE %(other)s END AS task,
    row_number() OVER (ORDER BY t.id) <= %(task_limit)s AS kept,
    CASE WHEN t.status = 'enabled' AND NOT t.paused AND t.parked_at IS NULL
         THEN t.next_run_at END AS due
FROM task t
WHERE t.deleted_at IS NULL

-- name: task_metrics_sample :many
-- The per-task gauges, a row per label value: the finish of the newest successful occurrence
-- (one backward probe of occurrence_task_success_idx), the newest scheduled firing
-- (occurrence_task_scheduled_for_idx; a kept task's only), the next one, the executing
-- occurrences, and the failed outcomes (failed, timeout, interrupted) since the last success,
-- counted up to `failures_cap` (one range of occurrence_task_failure_idx, stopped there): each
-- task's reads are bounded whatever the length of its history (revision 0037, ADR 0026).
-- `other` sums the running and keeps the most failures; it has no times (none would mean
-- anything for a set). JIT off (session_jit_off): compiling it cost more than running it.
WITH live AS MATERIALIZED ({{task_metrics_live}}),
figures AS (
    SELECT l.task, l.kept, l.due, success.finished_at AS last_success, fired.at AS last_schedule,
        executing.n AS running, failed.n AS failures
    FROM live l
    LEFT JOIN LATERAL (
        SELECT o.occurrence_seq, o.finished_at FROM occurrence o
        WHERE o.task_id = l.id AND o.status = 'success'
        ORDER BY o.occurrence_seq DESC
        LIMIT 1
    ) success ON true
    LEFT JOIN LATERAL (
        SELECT greatest(o.scheduled_for, o.last_scheduled_for) AS at FROM occurrence o
        WHERE o.task_id = l.id AND o.trigger = 'schedule' AND l.kept
        ORDER BY o.scheduled_for DESC
        LIMIT 1
    ) fired ON true
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM occurrence o
        WHERE o.task_id = l.id AND o.finished_at IS NULL AND o.status IN ('launching', 'running')
    ) executing
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM (
            SELECT FROM occurrence o
            WHERE o.task_id = l.id AND o.status IN ('failed', 'timeout', 'interrupted')
              AND o.occurrence_seq > coalesce(success.occurrence_seq, 0)
            LIMIT %(failures_cap)s
        ) capped
    ) failed
)
SELECT task,
    CASE WHEN bool_and(kept)
         THEN extract(epoch FROM max(last_success))::float8 END AS last_success,
    CASE WHEN bool_and(kept)
         THEN extract(epoch FROM max(last_schedule))::float8 END AS last_schedule,
    CASE WHEN bool_and(kept)
         THEN extract(epoch FROM max(due))::float8 END AS next_schedule,
    sum(running)::bigint AS running, max(failures) AS failures
FROM figures
GROUP BY task
ORDER BY task

-- name: task_lost_firings :many
-- The firings each label value's tasks lost, by reason, as far as the history kept reaches
-- (pruning lowers it): skipped and expired occurrences (occurrence_lost_idx since 0024, else
-- occurrence_own_row_idx), a summary row counting its firings; counted per task before the
-- join (a hash aggregate, no sort).
WITH live AS MATERIALIZED ({{task_metrics_live}}),
lost AS (
    SELECT o.task_id, o.reason, sum(o.firing_count) AS firings
    FROM occurrence o
    WHERE o.status IN ('skipped', 'expired')
    GROUP BY o.task_id, o.reason
)
SELECT l.task, lost.reason, sum(lost.firings)::bigint AS firings
FROM lost
JOIN live l ON l.id = lost.task_id
GROUP BY l.task, lost.reason
ORDER BY l.task, lost.reason

-- name: task_pauses_ended :many
-- A page, in id order, of the paused tasks whose `--until` instant has passed on the database
-- clock (task_paused_until_idx): the reconciler resumes each in a transaction of its own.
SELECT id FROM task
WHERE paused AND paused_until IS NOT NULL AND paused_until <= now() AND deleted_at IS NULL
  AND {{known_to_this_build}}
  AND id > %(after)s
ORDER BY id
LIMIT %(limit)s

-- name: task_end_pause :scalar
-- Ends the locked task's `--until` pause if its instant has passed on the database clock, with
-- the next firing and status `tasks resume` would give it, and records it as `scheduler`'s
-- action, in the caller's transaction (sd_end_pause_v1, sql/functions/end_pause.sql: the daemon
-- role may write neither itself). False: nothing to end (resumed, paused again or deleted
-- since).
SELECT sd_end_pause_v1(%(id)s, %(next_run_at)s, %(status)s, %(error)s)
