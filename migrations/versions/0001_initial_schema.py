"""Initial schema: task, occurrence, run, instance and fleet_setting.

Revision ID: 0001
Revises:
Create Date: 2026-12-02

Every invariant that can be a database fact is one: the unique scheduled firing, at most one active
occurrence of a `forbid` task, at most one running run per occurrence, no NULL in a lease or claim
column of an active row, and a check constraint on every status column.
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
CREATE TABLE task (
    id                bigint GENERATED ALWAYS AS IDENTITY,
    name              text        NOT NULL,
    schedule_kind     text        NOT NULL,
    cron_expr         text,
    every             interval,
    run_at            timestamptz,
    anchor_at         timestamptz NOT NULL,
    timezone          text        NOT NULL DEFAULT 'UTC',
    dst_gap           text        NOT NULL DEFAULT 'shift',
    dst_overlap       text        NOT NULL DEFAULT 'first',
    executor          text        NOT NULL,
    payload           jsonb       NOT NULL,
    concurrency_key   text,
    overlap           text        NOT NULL DEFAULT 'forbid',
    misfire           text        NOT NULL DEFAULT 'run_once',
    misfire_grace     interval    NOT NULL DEFAULT interval '60 seconds',
    catchup_limit     integer,
    catchup_window    interval,
    start_deadline    interval,
    run_timeout       interval,
    max_attempts      integer     NOT NULL DEFAULT 1,
    backoff           interval    NOT NULL DEFAULT interval '30 seconds',
    status            text        NOT NULL DEFAULT 'enabled',
    paused            boolean     NOT NULL DEFAULT false,
    next_run_at       timestamptz,
    occurrence_seq    bigint      NOT NULL DEFAULT 0,
    last_outcome_seq  bigint      NOT NULL DEFAULT 0,
    last_occurrence_id bigint,
    last_scheduled_for timestamptz,
    last_status       text,
    last_finished_at  timestamptz,
    last_error        text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    deleted_at        timestamptz,
    CONSTRAINT task_pkey PRIMARY KEY (id),
    CONSTRAINT task_name_check CHECK (length(name) BETWEEN 1 AND 200),
    CONSTRAINT task_schedule_kind_check CHECK (schedule_kind IN ('cron', 'interval', 'once')),
    CONSTRAINT task_schedule_fields_check CHECK (
        (schedule_kind = 'cron' AND cron_expr IS NOT NULL AND every IS NULL AND run_at IS NULL)
        OR (schedule_kind = 'interval' AND every > interval '0' AND cron_expr IS NULL AND run_at IS NULL)
        OR (schedule_kind = 'once' AND run_at IS NOT NULL AND cron_expr IS NULL AND every IS NULL)),
    CONSTRAINT task_dst_gap_check CHECK (dst_gap IN ('shift', 'skip')),
    CONSTRAINT task_dst_overlap_check CHECK (dst_overlap IN ('first', 'second', 'both')),
    CONSTRAINT task_executor_check CHECK (executor IN ('shell', 'http', 'python')),
    CONSTRAINT task_payload_size_check CHECK (octet_length(payload::text) <= 65536),
    CONSTRAINT task_overlap_check CHECK (overlap IN ('forbid', 'queue', 'allow')),
    CONSTRAINT task_misfire_check CHECK (misfire IN ('skip', 'run_once', 'run_all')),
    CONSTRAINT task_run_all_forbid_check CHECK (NOT (misfire = 'run_all' AND overlap = 'forbid')),
    CONSTRAINT task_durations_check CHECK (
        misfire_grace >= interval '0' AND backoff >= interval '0'
        AND (catchup_window IS NULL OR catchup_window > interval '0')
        AND (start_deadline IS NULL OR start_deadline > interval '0')
        AND (run_timeout IS NULL OR run_timeout > interval '0')),
    CONSTRAINT task_limits_check CHECK (
        max_attempts >= 1 AND (catchup_limit IS NULL OR catchup_limit >= 1)),
    CONSTRAINT task_status_check CHECK (
        status IN ('enabled', 'running', 'completed', 'failed', 'cancelled')),
    CONSTRAINT task_status_kind_check CHECK (schedule_kind = 'once' OR status = 'enabled'),
    CONSTRAINT task_last_status_check CHECK (last_status IS NULL OR last_status IN ('success', 'failed', 'timeout', 'interrupted', 'cancelled', 'skipped', 'expired')),
    CONSTRAINT task_sequence_check CHECK (
        occurrence_seq >= 0 AND last_outcome_seq BETWEEN 0 AND occurrence_seq)
);
CREATE UNIQUE INDEX task_name_key ON task (name) WHERE deleted_at IS NULL;
CREATE INDEX task_due_idx ON task (next_run_at)
    WHERE deleted_at IS NULL AND NOT paused AND status = 'enabled' AND next_run_at IS NOT NULL;

CREATE TABLE occurrence (
    id                 bigint GENERATED ALWAYS AS IDENTITY,
    task_id            bigint      NOT NULL,
    occurrence_seq     bigint      NOT NULL,
    scheduled_for      timestamptz NOT NULL,
    last_scheduled_for timestamptz,
    firing_count       bigint      NOT NULL DEFAULT 1,
    trigger            text        NOT NULL,
    overlap            text        NOT NULL,
    concurrency_key    text,
    status             text        NOT NULL,
    reason             text,
    requested_by       text,
    attempts           integer     NOT NULL DEFAULT 0,
    interruptions      integer     NOT NULL DEFAULT 0,
    lease_token        bigint      NOT NULL DEFAULT 0,
    claim_owner        text,
    claim_expires_at   timestamptz,
    not_before         timestamptz NOT NULL,
    error              text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    finished_at        timestamptz,
    CONSTRAINT occurrence_pkey PRIMARY KEY (id),
    CONSTRAINT occurrence_task_fkey FOREIGN KEY (task_id) REFERENCES task (id),
    CONSTRAINT occurrence_task_seq_key UNIQUE (task_id, occurrence_seq),
    CONSTRAINT occurrence_trigger_check CHECK (trigger IN ('schedule', 'manual', 'backfill')),
    CONSTRAINT occurrence_overlap_check CHECK (overlap IN ('forbid', 'queue', 'allow')),
    CONSTRAINT occurrence_status_check CHECK (status IN ('queued', 'launching', 'running',
        'success', 'failed', 'timeout', 'interrupted', 'cancelled', 'skipped', 'expired')),
    CONSTRAINT occurrence_reason_check CHECK (
        status NOT IN ('skipped', 'expired', 'cancelled') OR reason IS NOT NULL),
    CONSTRAINT occurrence_claim_check CHECK (
        status <> 'launching' OR (claim_owner IS NOT NULL AND claim_expires_at IS NOT NULL)),
    CONSTRAINT occurrence_finished_check CHECK ((status IN ('success', 'failed', 'timeout', 'interrupted', 'cancelled', 'skipped', 'expired')) = (finished_at IS NOT NULL)),
    CONSTRAINT occurrence_summary_check CHECK (
        (firing_count = 1 AND last_scheduled_for IS NULL)
        OR (firing_count > 1 AND status = 'skipped' AND last_scheduled_for > scheduled_for)),
    CONSTRAINT occurrence_counts_check CHECK (
        occurrence_seq >= 1 AND attempts >= 0 AND interruptions >= 0 AND lease_token >= 0)
);
CREATE UNIQUE INDEX occurrence_task_scheduled_for_key ON occurrence (task_id, scheduled_for)
    WHERE trigger = 'schedule';
CREATE UNIQUE INDEX occurrence_forbid_active_key ON occurrence (task_id)
    WHERE overlap = 'forbid' AND status IN ('queued', 'launching', 'running');
CREATE INDEX occurrence_queue_idx ON occurrence (attempts, scheduled_for, id)
    WHERE status = 'queued';
CREATE INDEX occurrence_claim_expiry_idx ON occurrence (claim_expires_at)
    WHERE status = 'launching';
CREATE INDEX occurrence_key_active_idx ON occurrence (concurrency_key, scheduled_for, id)
    WHERE concurrency_key IS NOT NULL AND status IN ('queued', 'launching', 'running');
CREATE INDEX occurrence_task_active_idx ON occurrence (task_id, occurrence_seq)
    WHERE status IN ('queued', 'launching', 'running');
CREATE INDEX occurrence_task_history_idx ON occurrence (task_id, id);

CREATE TABLE run (
    id                bigint GENERATED ALWAYS AS IDENTITY,
    occurrence_id     bigint      NOT NULL,
    attempt           integer     NOT NULL,
    owner             text        NOT NULL,
    lease_token       bigint      NOT NULL,
    lease_expires_at  timestamptz NOT NULL,
    takeover_at       timestamptz NOT NULL,
    status            text        NOT NULL DEFAULT 'running',
    exit_code         integer,
    http_status       integer,
    output_tail       text,
    error             text,
    finished_by       text,
    started_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz,
    CONSTRAINT run_pkey PRIMARY KEY (id),
    CONSTRAINT run_occurrence_fkey FOREIGN KEY (occurrence_id) REFERENCES occurrence (id),
    CONSTRAINT run_occurrence_token_key UNIQUE (occurrence_id, lease_token),
    CONSTRAINT run_status_check CHECK (
        status IN ('running', 'success', 'failed', 'timeout', 'interrupted', 'cancelled')),
    CONSTRAINT run_takeover_check CHECK (takeover_at >= lease_expires_at),
    CONSTRAINT run_finished_check CHECK ((status = 'running') = (finished_at IS NULL)),
    CONSTRAINT run_attempt_check CHECK (attempt >= 1 AND lease_token >= 1),
    CONSTRAINT run_output_tail_check CHECK (output_tail IS NULL OR octet_length(output_tail) <= 65536)
);
CREATE UNIQUE INDEX run_occurrence_running_key ON run (occurrence_id) WHERE status = 'running';
CREATE INDEX run_takeover_idx ON run (takeover_at) WHERE status = 'running';
CREATE INDEX run_occurrence_idx ON run (occurrence_id, id);

CREATE TABLE instance (
    id               text        NOT NULL,
    hostname         text        NOT NULL,
    pid              integer     NOT NULL,
    version          text        NOT NULL,
    schema_revision  text        NOT NULL,
    concurrency      integer     NOT NULL,
    slots_in_use     integer     NOT NULL DEFAULT 0,
    lease_ttl        interval    NOT NULL,
    lease_grace      interval    NOT NULL,
    reconcile_interval interval  NOT NULL,
    clock_drift      interval,
    stopping         boolean     NOT NULL DEFAULT false,
    started_at       timestamptz NOT NULL DEFAULT now(),
    heartbeat_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT instance_pkey PRIMARY KEY (id),
    CONSTRAINT instance_slots_check CHECK (concurrency >= 1 AND slots_in_use >= 0)
);
CREATE INDEX instance_heartbeat_idx ON instance (heartbeat_at);

CREATE TABLE fleet_setting (
    key         text        NOT NULL,
    value       jsonb       NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    updated_by  text,
    CONSTRAINT fleet_setting_pkey PRIMARY KEY (key)
);
INSERT INTO fleet_setting (key, value, updated_by) VALUES ('max_concurrent_runs', '16', 'migration 0001');
""")


def downgrade() -> None:
    op.execute("DROP TABLE fleet_setting, instance, run, occurrence, task")
