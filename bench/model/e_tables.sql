-- Alternative E: the hot row carries its running attempt (no run row while it runs), and the
-- completion deletes it and writes ONE history row per ended firing, its last attempt's fields
-- beside the firing's. An attempt that ends without ending its firing (a retry, a takeover, a
-- drain) writes an attempt_history row when it ends. Both partitioned by finished_at.
ALTER TABLE occurrence
    ADD COLUMN run_id bigint, ADD COLUMN run_uuid uuid, ADD COLUMN lease_expires_at timestamptz,
    ADD COLUMN takeover_at timestamptz, ADD COLUMN started_at timestamptz,
    ADD COLUMN build_revision text, ADD COLUMN followed_at timestamptz;
CREATE INDEX occurrence_takeover_idx ON occurrence (takeover_at) WHERE status = 'running';
CREATE SEQUENCE run_id_seq;

CREATE TABLE firing_history (
    id bigint NOT NULL,
    task_id bigint NOT NULL,
    occurrence_seq bigint NOT NULL,
    scheduled_for timestamptz NOT NULL,
    last_scheduled_for timestamptz,
    firing_count bigint NOT NULL,
    trigger text NOT NULL,
    overlap text NOT NULL,
    concurrency_key text,
    status text NOT NULL,
    reason text,
    requested_by text,
    attempts integer NOT NULL,
    interruptions integer NOT NULL,
    lease_token bigint NOT NULL,
    not_before timestamptz NOT NULL,
    error text,
    created_at timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    cancel_reason text,
    created_xid xid8,
    first_claim_snapshot pg_snapshot,
    idempotency_key text,
    retry_delay interval,
    spread_offset interval,
    args jsonb,
    run_id bigint,
    run_uuid uuid,
    owner text,
    started_at timestamptz,
    exit_code integer,
    http_status integer,
    output_tail text,
    build_revision text,
    finished_by text
) PARTITION BY RANGE (finished_at);
CREATE INDEX firing_history_id_idx ON firing_history (id);
CREATE INDEX firing_history_task_seq_idx ON firing_history (task_id, occurrence_seq);
CREATE INDEX firing_history_success_idx ON firing_history (task_id, occurrence_seq)
    WHERE status = 'success';
CREATE INDEX firing_history_failure_idx ON firing_history (task_id, occurrence_seq)
    WHERE status IN ('failed', 'timeout', 'interrupted');
CREATE INDEX firing_history_window_idx ON firing_history (task_id, scheduled_for)
    INCLUDE (trigger, status, reason, overlap, firing_count);
CREATE INDEX firing_history_lost_idx ON firing_history (scheduled_for, task_id)
    INCLUDE (status, reason, overlap, firing_count) WHERE status IN ('skipped', 'expired');
CREATE INDEX firing_history_run_idx ON firing_history (run_id) WHERE run_id IS NOT NULL;

CREATE TABLE attempt_history (
    id bigint NOT NULL,
    occurrence_id bigint NOT NULL,
    attempt integer NOT NULL,
    owner text NOT NULL,
    lease_token bigint NOT NULL,
    status text NOT NULL,
    exit_code integer,
    http_status integer,
    output_tail text,
    error text,
    finished_by text,
    started_at timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    build_revision text,
    uuid uuid
) PARTITION BY RANGE (finished_at);
CREATE INDEX attempt_history_occurrence_idx ON attempt_history (occurrence_id, id);
