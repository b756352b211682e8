-- Alternatives B and C: history written once. B partitions it by the time a row ended
-- (`PARTITION BY RANGE (finished_at)` replaces the marker below; price.py creates the daily
-- partitions around now); C leaves it one table. No unique index: on a partitioned table one
-- would have to include finished_at, which guarantees nothing. Uniqueness lives in the hot set
-- and firing_key.
CREATE TABLE occurrence_history (
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
    args jsonb
) /*PARTITION*/;
-- tasks show / the outbox / the console by id; a task's history by sequence (ADR 0011's newest
-- outcome, run_history paging); ADR 0026's newest success and failures since; the window read
-- (health_window, audit's firings in a range).
CREATE INDEX occurrence_history_id_idx ON occurrence_history (id);
CREATE INDEX occurrence_history_task_seq_idx ON occurrence_history (task_id, occurrence_seq);
CREATE INDEX occurrence_history_success_idx ON occurrence_history (task_id, occurrence_seq)
    WHERE status = 'success';
CREATE INDEX occurrence_history_failure_idx ON occurrence_history (task_id, occurrence_seq)
    WHERE status IN ('failed', 'timeout', 'interrupted');
CREATE INDEX occurrence_history_window_idx ON occurrence_history (task_id, scheduled_for)
    INCLUDE (trigger, status, reason, overlap, firing_count);
CREATE INDEX occurrence_history_lost_idx ON occurrence_history (scheduled_for, task_id)
    INCLUDE (status, reason, overlap, firing_count) WHERE status IN ('skipped', 'expired');

CREATE TABLE run_history (
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
) /*PARTITION*/;
CREATE INDEX run_history_id_idx ON run_history (id);
CREATE INDEX run_history_occurrence_idx ON run_history (occurrence_id, id);
