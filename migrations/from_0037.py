"""The path from revision 0037 to the baseline 0038 (issue 45, ADR 0027 point 5).

Revisions 0001-0037 were squashed into `versions/0038_baseline.py`. A database at 0037 (the
embedded one of anyone who tried the quick start before the squash) reaches the same schema
here, run by `scheduler-daemon migrate` (storage/presquash.py) with the fleet stopped, in one
transaction: this file lives outside versions/ so that alembic never sees it as a revision.

Until the first release, a schema change edits `0038_baseline.py` and this file together;
tests/integration/test_from_0037.py holds the two schemas equal.
"""

from collections.abc import Iterator

from scheduler_daemon.storage import functions, presquash, shape

# What only builds before the squash called: the claims v1-v5, the successes v1-v3, and the
# trigger that cleared a pending `--until` when such a build paused or resumed a task (0035).
# By name, whatever their argument lists.
DROP_RETIRED = """
DROP TRIGGER IF EXISTS task_pause_clears_until ON task;

DO $drop$
DECLARE r record;
BEGIN
    FOR r IN SELECT p.oid::regprocedure AS f FROM pg_proc p
             WHERE p.pronamespace = current_schema()::regnamespace
               AND p.proname IN ('sd_claim_launch_v1', 'sd_claim_launch_v2',
                                 'sd_claim_launch_v3', 'sd_claim_launch_v4',
                                 'sd_claim_launch_v5', 'sd_succeed_runs_v1',
                                 'sd_succeed_runs_v2', 'sd_succeed_runs_v3',
                                 'sd_task_pause_clears_until_v1')
    LOOP
        EXECUTE format('DROP FUNCTION %s', r.f);
    END LOOP;
END
$drop$;
"""

# `task.uuid` NOT NULL: older builds could insert a task without it; fill those, then prove
# and set NOT NULL through a CHECK so that SET NOT NULL need not scan again.
UUID_REQUIRED = """
UPDATE task SET uuid = gen_random_uuid() WHERE uuid IS NULL;

ALTER TABLE task ADD CONSTRAINT task_uuid_not_null CHECK (uuid IS NOT NULL) NOT VALID;

ALTER TABLE task VALIDATE CONSTRAINT task_uuid_not_null;

ALTER TABLE task ALTER COLUMN uuid SET NOT NULL;

ALTER TABLE task DROP CONSTRAINT task_uuid_not_null;
"""

# A recurring task's `last_*` are stale since 0021 (its newest outcome is read from its
# occurrences); sd_show_outcomes_v1 now writes them for one-shot tasks only, so empty them.
RECURRING_LAST_CLEARED = """
UPDATE task SET last_outcome_seq = 0, last_occurrence_id = NULL, last_scheduled_for = NULL,
    last_status = NULL, last_finished_at = NULL, last_error = NULL
WHERE schedule_kind <> 'once'
  AND (last_outcome_seq <> 0 OR last_occurrence_id IS NOT NULL OR last_status IS NOT NULL
       OR last_error IS NOT NULL OR last_finished_at IS NOT NULL
       OR last_scheduled_for IS NOT NULL);
"""

# Bounds that keep the claim's arithmetic (`attempts + 1`, `greatest(lease_token, floor) + 1`)
# inside its types: one such row made every claim of the fleet raise (issue 44).
BOUNDS = """
ALTER TABLE occurrence ADD CONSTRAINT occurrence_attempts_check CHECK (attempts <= 1000000000 AND interruptions <= 1000000000) NOT VALID;

ALTER TABLE occurrence VALIDATE CONSTRAINT occurrence_attempts_check;

ALTER TABLE occurrence ADD CONSTRAINT occurrence_lease_token_check CHECK (lease_token < 4611686018427387904) NOT VALID;

ALTER TABLE occurrence VALIDATE CONSTRAINT occurrence_lease_token_check;

ALTER TABLE run ADD CONSTRAINT run_lease_token_check CHECK (lease_token < 4611686018427387904) NOT VALID;

ALTER TABLE run VALIDATE CONSTRAINT run_lease_token_check;
"""

# The generic older-build mechanism (ADR 0027 point 6, ADR 0029): a row needing a build whose
# chain has `needs_build` (a revision id; NULL: any build). The hot partial indexes hold only
# unmarked rows; the marked ones live in small indexes of their own.
NEEDS_BUILD = """
ALTER TABLE task ADD COLUMN needs_build text;

ALTER TABLE occurrence ADD COLUMN needs_build text;

DROP INDEX occurrence_queue_idx;

CREATE INDEX occurrence_queue_idx ON occurrence USING btree (attempts, scheduled_for, id) WHERE status = 'queued' AND needs_build IS NULL;

CREATE INDEX occurrence_queue_marked_idx ON occurrence USING btree (needs_build, attempts, scheduled_for, id) WHERE status = 'queued' AND needs_build IS NOT NULL;

DROP INDEX task_due_idx;

CREATE INDEX task_due_idx ON task USING btree (next_run_at) WHERE deleted_at IS NULL AND NOT paused AND status = 'enabled' AND parked_at IS NULL AND next_run_at IS NOT NULL AND needs_build IS NULL;

CREATE INDEX task_due_marked_idx ON task USING btree (needs_build, next_run_at) WHERE deleted_at IS NULL AND NOT paused AND status = 'enabled' AND parked_at IS NULL AND next_run_at IS NOT NULL AND needs_build IS NOT NULL;
"""

# The chain built this trigger's condition as nested ORs, the baseline as one: the same test,
# rendered differently by the snapshot; made again as the baseline makes it.
TASK_EVENT_TRIGGER = """
DROP TRIGGER task_event_on_change ON task;

CREATE TRIGGER task_event_on_change AFTER UPDATE ON task FOR EACH ROW
WHEN (old.schedule_kind IS DISTINCT FROM new.schedule_kind
      OR old.cron_expr IS DISTINCT FROM new.cron_expr
      OR old.every IS DISTINCT FROM new.every
      OR old.run_at IS DISTINCT FROM new.run_at
      OR old.anchor_at IS DISTINCT FROM new.anchor_at
      OR old.timezone IS DISTINCT FROM new.timezone
      OR old.dst_gap IS DISTINCT FROM new.dst_gap
      OR old.dst_overlap IS DISTINCT FROM new.dst_overlap
      OR old.paused IS DISTINCT FROM new.paused
      OR (old.parked_at IS NULL) IS DISTINCT FROM (new.parked_at IS NULL)
      OR (old.deleted_at IS NULL) IS DISTINCT FROM (new.deleted_at IS NULL))
EXECUTE FUNCTION task_event_record();
"""

# Who logged in to write each operator action (issue 46): rows written before have none.
ACTION_SESSION_ROLE = "ALTER TABLE operator_action ADD COLUMN session_role text;"

# The hot set and history (issue 47): `occurrence` and `run` made again as the baseline makes
# them (partitioned by `finished_at`, their default partitions the hot set, no foreign key into
# them), their rows carried over with their ids, each identity moved past the highest id, and
# `firing_key` filled from the scheduled and backfill occurrences (guarantee 2). Every row lands in
# the default partition: none dated exists yet (the upkeep makes them).
REPARTITION_SAVE = """
CREATE TEMPORARY TABLE occurrence_0037 ON COMMIT DROP AS SELECT * FROM occurrence;

CREATE TEMPORARY TABLE run_0037 ON COMMIT DROP AS SELECT * FROM run;

ALTER TABLE notification_outbox DROP CONSTRAINT notification_outbox_occurrence_id_fkey;

DROP TABLE run;

DROP TABLE occurrence;
"""

REPARTITION_FILL = """
INSERT INTO occurrence OVERRIDING SYSTEM VALUE SELECT * FROM occurrence_0037;

INSERT INTO run OVERRIDING SYSTEM VALUE SELECT * FROM run_0037;

SELECT setval(pg_get_serial_sequence('occurrence', 'id'),
              coalesce((SELECT max(id) FROM occurrence_0037), 0) + 1, false);

SELECT setval(pg_get_serial_sequence('run', 'id'),
              coalesce((SELECT max(id) FROM run_0037), 0) + 1, false);

INSERT INTO firing_key (task_id, scheduled_for, trigger)
SELECT task_id, scheduled_for, trigger FROM occurrence_0037
WHERE trigger IN ('schedule', 'backfill')
ON CONFLICT DO NOTHING;
"""


def repartition() -> Iterator[str]:
    """The hot set and history's tables and indexes, the rows carried over (see above)."""
    baseline = presquash.baseline_module()
    yield REPARTITION_SAVE
    yield from baseline.HISTORY_TABLES
    yield from baseline.HISTORY_INDEXES
    yield REPARTITION_FILL


# After the live functions: the trigger's function, and the one the views read.
ACTION_SESSION_ROLE_TRIGGER = """
CREATE TRIGGER operator_action_session_user_on_insert BEFORE INSERT ON operator_action FOR EACH ROW EXECUTE FUNCTION operator_action_session_user();
"""


# `task_latest` (issue 47), filled from the rows there: a row per task, its newest ended
# occurrence but `skipped` by sequence and its newest success (DISTINCT ON over each's index:
# occurrence_task_outcome_idx, occurrence_task_success_idx). The fleet is stopped, so nothing
# ends between the fill and the triggers, made after the live functions.
TASK_LATEST_FILLED = """
INSERT INTO task_latest (task_id, occurrence_seq, occurrence_id, scheduled_for, status,
                         finished_at, error, success_seq, success_finished_at, success_created_at)
SELECT t.id, coalesce(o.occurrence_seq, 0), o.id, o.scheduled_for, o.status, o.finished_at,
    coalesce(o.error, o.reason), coalesce(s.occurrence_seq, 0), s.finished_at, s.created_at
FROM task t
LEFT JOIN (SELECT DISTINCT ON (task_id) task_id, occurrence_seq, id, scheduled_for, status,
               finished_at, error, reason
           FROM occurrence WHERE finished_at IS NOT NULL AND status <> 'skipped'
           ORDER BY task_id, occurrence_seq DESC) o ON o.task_id = t.id
LEFT JOIN (SELECT DISTINCT ON (task_id) task_id, occurrence_seq, finished_at, created_at
           FROM occurrence WHERE status = 'success'
           ORDER BY task_id, occurrence_seq DESC) s ON s.task_id = t.id;
"""


# One transaction: a failure leaves the database at 0037, whole. The fleet is stopped, so the
# locks it holds until COMMIT block only the CLI and the console for the while.
LOCK_TIMEOUT = "SET LOCAL lock_timeout = '5s';\n\nSET LOCAL statement_timeout = '15min';"

# The compatibility record with the shape of the schema made, as the baseline ends (issue 47).
RECORD = shape.baseline_record("0038") + ";"

VERSION = "UPDATE scheduler_daemon_alembic_version SET version_num = '0038';"


def statements() -> Iterator[str]:
    """Every statement of the path, in order; the caller runs them in one transaction."""
    yield LOCK_TIMEOUT
    yield DROP_RETIRED
    yield UUID_REQUIRED
    yield RECURRING_LAST_CLEARED
    yield BOUNDS
    yield NEEDS_BUILD
    yield TASK_EVENT_TRIGGER
    yield ACTION_SESSION_ROLE
    yield from repartition()  # with the failure index that carries finished_at
    yield presquash.baseline_module().TASK_LATEST_TABLE
    yield TASK_LATEST_FILLED
    yield presquash.baseline_module().PARTITION_UPKEEP_TABLE
    for each in functions.files():  # the live functions as their files say (ADR 0028)
        yield each.create_and_record
    yield ACTION_SESSION_ROLE_TRIGGER
    yield presquash.baseline_module().TASK_LATEST_TRIGGERS
    # The secret columns as the reader sees them (ADR 0031): the baseline's views, written once.
    yield from presquash.baseline_module().VIEWS
    yield RECORD
    yield VERSION


def sql() -> str:
    """The whole path as one SQL transaction (`migrate --sql`, and the lint of migrations)."""
    return "\n".join(["BEGIN;", *statements(), "COMMIT;"])
