"""Expand: one home for the rule that shows an outcome on its task, and a one-shot's status
decided by its firings only; the success function's v3 uses it; v1 and v2 retired.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06

The rule "a task shows its newest outcome (by sequence), and a one-shot task's status follows
its newest occurrence" was written four times: in `task_record_outcome`,
`task_record_outcome_many` and both success functions. It now lives in `sd_show_outcomes_v1`
(issue 30), which every writer of a final outcome calls: the completer's unit and batch writes,
the success function, `runs cancel`, the reconciler's takeover, expiry and finalizer.

The rule changes with it (issue 31): a manual occurrence never decides a one-shot task's
status, whether it ran, failed, was cancelled or expired, though it is still shown in the
task's `last_*` fields when it is the newest outcome. Only the newest firing of the schedule
(a `scheduled` or `backfill` occurrence) decides it, once nothing newer of the kind exists: a
cancelled queued manual run no longer ends a one-shot `cancelled` while its scheduled run
works, and a manual run finishing first no longer hides the scheduled run's success.

`sd_succeed_runs_v3` is v2 with the task update replaced by a call to `sd_show_outcomes_v1`
(same arguments, results, locks and plans settings). Builds before 0017 keep calling v2 and
their own inline statements, with the old rule, until they leave: v1 (no caller since 0013)
and v2 are marked retired, and the release's closing contract step drops them, after every
expand step of the release (docs/upgrading.md).
"""

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None
phase = "expand"

SUCCEED_ARGS = (
    "bigint[], bigint[], bigint[], bigint[], integer[], integer[], text[], text[], text, text,"
    " boolean, timestamptz"
)
RETIRED = "retired: no build at this schema calls it; the closing contract step drops it"

# The rule, written once: CTEs over `{source}` (rows of task_id, occurrence_id, seq,
# scheduled_for, status, error, lifecycle, decides) that show the outcomes on their locked tasks.
# Per task: the newest outcome by sequence, only if newer than the one shown (a late writer never
# overwrites a newer result); and a one-shot task still `running` takes the lifecycle of its
# newest deciding outcome (a firing of the schedule, never a manual trigger) when no newer firing
# exists. sd_show_outcomes_v1 runs it over its arguments; sd_succeed_runs_v3 over the occurrences
# its statement finished, in that statement (a call from it would cost a second statement and
# its arrays per batch: 4-5% more server CPU per job, bench/ab_cpu.py).
RULE = """
    newest AS (
        SELECT DISTINCT ON (task_id) * FROM {source} ORDER BY task_id, seq DESC
    ), deciding AS (
        SELECT DISTINCT ON (task_id) task_id, seq, lifecycle FROM {source} WHERE decides
        ORDER BY task_id, seq DESC
    ), shown AS (
        UPDATE task SET
            last_outcome_seq = greatest(task.last_outcome_seq, n.seq),
            last_occurrence_id = CASE WHEN n.seq > task.last_outcome_seq
                                      THEN n.occurrence_id ELSE task.last_occurrence_id END,
            last_scheduled_for = CASE WHEN n.seq > task.last_outcome_seq
                                      THEN n.scheduled_for ELSE task.last_scheduled_for END,
            last_status = CASE WHEN n.seq > task.last_outcome_seq
                               THEN n.status ELSE task.last_status END,
            last_finished_at = CASE WHEN n.seq > task.last_outcome_seq
                                    THEN coalesce(p_now, clock_timestamp())
                                    ELSE task.last_finished_at END,
            last_error = CASE WHEN n.seq > task.last_outcome_seq
                              THEN n.error ELSE task.last_error END,
            status = CASE WHEN d.task_id IS NOT NULL AND task.schedule_kind = 'once'
                               AND task.status = 'running'
                               AND NOT EXISTS (
                                   SELECT 1 FROM occurrence newer
                                   WHERE newer.task_id = task.id
                                     AND newer.occurrence_seq > d.seq
                                     AND newer.trigger <> 'manual')
                          THEN d.lifecycle ELSE task.status END,
            updated_at = coalesce(p_now, clock_timestamp())
        FROM newest n LEFT JOIN deciding d ON d.task_id = n.task_id
        WHERE task.id = n.task_id
          AND (n.seq > task.last_outcome_seq
               OR (d.task_id IS NOT NULL AND task.schedule_kind = 'once'
                   AND task.status = 'running'))
        RETURNING task.id
    )"""


def _with_rule(head: str, source: str, tail: str) -> str:
    """A function's text: `head`, the rule's CTEs over `source`, `tail`."""
    return head + RULE.format(source=source) + tail


SHOW_OUTCOMES = _with_rule(
    """
CREATE FUNCTION sd_show_outcomes_v1(
    p_task_ids bigint[], p_occurrence_ids bigint[], p_seqs bigint[],
    p_scheduled_fors timestamptz[], p_statuses text[], p_errors text[], p_lifecycles text[],
    p_decides boolean[], p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql
AS $function$
-- Shows final outcomes on their tasks, whose rows the caller has locked (the rule: migration
-- 0017's RULE); returns the number of tasks changed.
DECLARE
    v_changed integer;
BEGIN
    WITH given AS (
        SELECT * FROM unnest(p_task_ids, p_occurrence_ids, p_seqs, p_scheduled_fors, p_statuses,
                             p_errors, p_lifecycles, p_decides)
                 AS g(task_id, occurrence_id, seq, scheduled_for, status, error, lifecycle,
                      decides)
    ),""",
    "given",
    """
    SELECT count(*) INTO v_changed FROM shown;
    RETURN v_changed;
END
$function$
""",
)

SUCCEED_V3 = _with_rule(
    """
CREATE FUNCTION sd_succeed_runs_v3(
    p_ids bigint[], p_tokens bigint[], p_occurrence_ids bigint[], p_task_ids bigint[],
    p_exit_codes integer[], p_http_statuses integer[], p_output_tails text[], p_errors text[],
    p_owner text, p_channel text, p_wake boolean, p_now timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $function$
#variable_conflict use_column
BEGIN
    PERFORM 1 FROM task WHERE id = ANY(p_task_ids) ORDER BY id FOR UPDATE;
    PERFORM 1 FROM occurrence WHERE id = ANY(p_occurrence_ids) ORDER BY id FOR UPDATE;
    PERFORM 1 FROM run WHERE id = ANY(p_ids) ORDER BY id FOR UPDATE;
    IF p_wake THEN
        PERFORM pg_notify(p_channel, 'finished');
    END IF;
    RETURN QUERY
    WITH mine AS MATERIALIZED (
        -- The runs of the batch still ours at their token, whose occurrence is still running
        -- at that token: each looked up by its keys inside the loop over the batch.
        SELECT f.* FROM unnest(p_ids, p_tokens, p_occurrence_ids, p_exit_codes,
                               p_http_statuses, p_output_tails, p_errors)
                 AS f(id, token, occurrence_id, exit_code, http_status, output_tail, error)
        CROSS JOIN LATERAL (
            SELECT 1 FROM run r JOIN occurrence o ON o.id = r.occurrence_id
            WHERE r.id = f.id AND r.occurrence_id = f.occurrence_id AND r.lease_token = f.token
              AND r.owner = p_owner AND r.finished_at IS NULL
              AND o.status = 'running' AND o.lease_token = f.token
            OFFSET 0) fenced
    ), ended AS MATERIALIZED (
        UPDATE run r SET status = 'success', exit_code = f.exit_code,
            http_status = f.http_status, output_tail = f.output_tail, error = f.error,
            finished_at = coalesce(p_now, clock_timestamp()), finished_by = p_owner
        FROM mine f WHERE r.id = f.id
        RETURNING r.id, r.occurrence_id, f.error
    ), finished AS MATERIALIZED (
        UPDATE occurrence o SET status = 'success', error = ended.error, reason = NULL,
            finished_at = coalesce(p_now, clock_timestamp()),
            updated_at = coalesce(p_now, clock_timestamp()), claim_owner = NULL
        FROM ended WHERE o.id = ended.occurrence_id
        RETURNING o.task_id, o.id AS occurrence_id, o.occurrence_seq AS seq, o.scheduled_for,
                  'success'::text AS status, ended.error, 'completed'::text AS lifecycle,
                  o.trigger <> 'manual' AS decides
    ),""",
    "finished",
    """
    SELECT ended.id FROM ended;
END
$function$
""",
)


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    op.execute(SHOW_OUTCOMES)
    op.execute(SUCCEED_V3)
    for version in ("v1", "v2"):
        op.execute(f"COMMENT ON FUNCTION sd_succeed_runs_{version}({SUCCEED_ARGS}) IS '{RETIRED}'")


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("SET LOCAL statement_timeout = '60s'")
    for version in ("v1", "v2"):
        op.execute(f"COMMENT ON FUNCTION sd_succeed_runs_{version}({SUCCEED_ARGS}) IS NULL")
    op.execute(f"DROP FUNCTION sd_succeed_runs_v3({SUCCEED_ARGS})")
    op.execute(
        "DROP FUNCTION sd_show_outcomes_v1(bigint[], bigint[], bigint[], timestamptz[], text[],"
        " text[], text[], boolean[], timestamptz)"
    )
