"""Key exclusion in the database, pending cancels, parked tasks, and the history `audit` reads.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02

- `occurrence_key_executing_key`: at most one launching or running occurrence per concurrency key,
  whatever order occurrences commit in (the claim's "no older active one" test alone let a
  late-committing older occurrence start beside a younger one). `occurrence_queue_executing_key`
  does the same for the occurrences of one `queue` task.
- `occurrence.cancel_requested_at` / `cancel_reason`: a cancel of a running occurrence is a request;
  the occurrence keeps its `forbid` slot, its key and its budget slot until its owner confirms the
  job is gone (or its takeover point passes).
- `task.parked_at` / `park_error`: a task row the dispatcher cannot plan is parked, out of the due
  scan, until a `tasks update` fixes it.
- `task_event` and `fleet_setting_event`, written by triggers so every writer (any version) is
  recorded: when a task's schedule or paused/parked/deleted state changed, and when the budget
  changed; `scheduler-daemon audit` checks the history against them.
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_SCHEDULE = "schedule_kind, cron_expr, every, run_at, anchor_at, timezone, dst_gap, dst_overlap"


def upgrade() -> None:
    op.execute("""
CREATE UNIQUE INDEX occurrence_key_executing_key ON occurrence (concurrency_key)
    WHERE concurrency_key IS NOT NULL AND status IN ('launching', 'running');
CREATE UNIQUE INDEX occurrence_queue_executing_key ON occurrence (task_id)
    WHERE overlap = 'queue' AND status IN ('launching', 'running');

ALTER TABLE occurrence
    ADD COLUMN cancel_requested_at timestamptz,
    ADD COLUMN cancel_reason text,
    ADD CONSTRAINT occurrence_cancel_check CHECK (
        (cancel_requested_at IS NULL) = (cancel_reason IS NULL)
        AND (cancel_requested_at IS NULL OR status NOT IN ('queued', 'launching')));

ALTER TABLE task
    ADD COLUMN parked_at timestamptz,
    ADD COLUMN park_error text,
    ADD CONSTRAINT task_parked_check CHECK ((parked_at IS NULL) = (park_error IS NULL));
DROP INDEX task_due_idx;
CREATE INDEX task_due_idx ON task (next_run_at)
    WHERE deleted_at IS NULL AND NOT paused AND status = 'enabled' AND parked_at IS NULL
      AND next_run_at IS NOT NULL;

CREATE TABLE task_event (
    id            bigint GENERATED ALWAYS AS IDENTITY,
    task_id       bigint      NOT NULL,
    at            timestamptz NOT NULL DEFAULT now(),
    kind          text        NOT NULL,
    schedule_kind text        NOT NULL,
    cron_expr     text,
    every         interval,
    run_at        timestamptz,
    anchor_at     timestamptz NOT NULL,
    timezone      text        NOT NULL,
    dst_gap       text        NOT NULL,
    dst_overlap   text        NOT NULL,
    active        boolean     NOT NULL,
    CONSTRAINT task_event_pkey PRIMARY KEY (id),
    CONSTRAINT task_event_task_fkey FOREIGN KEY (task_id) REFERENCES task(id),
    CONSTRAINT task_event_kind_check CHECK (kind IN ('baseline', 'created', 'changed', 'deleted'))
);
CREATE INDEX task_event_task_idx ON task_event (task_id, id);

CREATE FUNCTION task_event_record() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO task_event (task_id, at, kind, schedule_kind, cron_expr, every, run_at, anchor_at,
                            timezone, dst_gap, dst_overlap, active)
    VALUES (NEW.id, now(),
            CASE WHEN TG_OP = 'INSERT' THEN 'created'
                 WHEN NEW.deleted_at IS NOT NULL THEN 'deleted' ELSE 'changed' END,
            NEW.schedule_kind, NEW.cron_expr, NEW.every, NEW.run_at, NEW.anchor_at, NEW.timezone,
            NEW.dst_gap, NEW.dst_overlap,
            NOT NEW.paused AND NEW.parked_at IS NULL AND NEW.deleted_at IS NULL);
    RETURN NULL;
END
$$;
CREATE TRIGGER task_event_on_insert AFTER INSERT ON task
    FOR EACH ROW EXECUTE FUNCTION task_event_record();
CREATE TRIGGER task_event_on_change AFTER UPDATE ON task
    FOR EACH ROW WHEN (
        (OLD.schedule_kind, OLD.cron_expr, OLD.every, OLD.run_at, OLD.anchor_at, OLD.timezone,
         OLD.dst_gap, OLD.dst_overlap, OLD.paused, OLD.parked_at IS NULL, OLD.deleted_at IS NULL)
        IS DISTINCT FROM
        (NEW.schedule_kind, NEW.cron_expr, NEW.every, NEW.run_at, NEW.anchor_at, NEW.timezone,
         NEW.dst_gap, NEW.dst_overlap, NEW.paused, NEW.parked_at IS NULL, NEW.deleted_at IS NULL))
    EXECUTE FUNCTION task_event_record();
""")
    op.execute(f"""
INSERT INTO task_event (task_id, kind, {_SCHEDULE}, active)
SELECT id, 'baseline', {_SCHEDULE}, NOT paused AND deleted_at IS NULL FROM task ORDER BY id;
""")  # noqa: S608 - a constant column list
    op.execute("""
CREATE TABLE fleet_setting_event (
    id          bigint GENERATED ALWAYS AS IDENTITY,
    key         text        NOT NULL,
    value       jsonb       NOT NULL,
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_by  text,
    CONSTRAINT fleet_setting_event_pkey PRIMARY KEY (id)
);
CREATE INDEX fleet_setting_event_key_idx ON fleet_setting_event (key, at);
INSERT INTO fleet_setting_event (key, value, at, updated_by)
SELECT key, value, updated_at, updated_by FROM fleet_setting ORDER BY key;

CREATE FUNCTION fleet_setting_event_record() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO fleet_setting_event (key, value, at, updated_by)
    VALUES (NEW.key, NEW.value, clock_timestamp(), NEW.updated_by);
    RETURN NULL;
END
$$;
CREATE TRIGGER fleet_setting_event_on_change AFTER INSERT OR UPDATE ON fleet_setting
    FOR EACH ROW EXECUTE FUNCTION fleet_setting_event_record();
""")


def downgrade() -> None:
    op.execute("""
DROP TRIGGER fleet_setting_event_on_change ON fleet_setting;
DROP FUNCTION fleet_setting_event_record();
DROP TABLE fleet_setting_event;
DROP TRIGGER task_event_on_change ON task;
DROP TRIGGER task_event_on_insert ON task;
DROP FUNCTION task_event_record();
DROP TABLE task_event;
DROP INDEX task_due_idx;
CREATE INDEX task_due_idx ON task (next_run_at)
    WHERE deleted_at IS NULL AND NOT paused AND status = 'enabled' AND next_run_at IS NOT NULL;
ALTER TABLE task DROP CONSTRAINT task_parked_check, DROP COLUMN park_error, DROP COLUMN parked_at;
ALTER TABLE occurrence DROP CONSTRAINT occurrence_cancel_check, DROP COLUMN cancel_reason,
    DROP COLUMN cancel_requested_at;
DROP INDEX occurrence_queue_executing_key;
DROP INDEX occurrence_key_executing_key;
""")
