-- Alternatives B, C and E: the hot set. Today's occurrence columns, only active rows (queued,
-- launching, running, waiting for a retry), today's exclusion indexes with their predicates
-- reduced to what a hot row can be, the queue, and the per-task sequence (unique while active).
-- Loaded after today's `task` table (price.py extracts it from sql/schema.sql).
CREATE TABLE occurrence (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id bigint NOT NULL REFERENCES task(id),
    occurrence_seq bigint NOT NULL,
    scheduled_for timestamptz NOT NULL,
    last_scheduled_for timestamptz,
    firing_count bigint NOT NULL DEFAULT 1,
    trigger text NOT NULL CHECK (trigger IN ('schedule', 'manual', 'backfill')),
    overlap text NOT NULL CHECK (overlap IN ('forbid', 'queue', 'allow', 'replace')),
    concurrency_key text,
    status text NOT NULL,
    reason text,
    requested_by text,
    attempts integer NOT NULL DEFAULT 0,
    interruptions integer NOT NULL DEFAULT 0,
    lease_token bigint NOT NULL DEFAULT 0 CHECK (lease_token < 4611686018427387904),
    claim_owner text,
    claim_expires_at timestamptz,
    not_before timestamptz NOT NULL,
    error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    cancel_requested_at timestamptz,
    cancel_reason text,
    created_xid xid8 DEFAULT pg_current_xact_id(),
    first_claim_snapshot pg_snapshot,
    idempotency_key text,
    retry_delay interval,
    spread_offset interval,
    args jsonb
);
CREATE UNIQUE INDEX occurrence_task_seq_key ON occurrence (task_id, occurrence_seq);
CREATE UNIQUE INDEX occurrence_forbid_active_key ON occurrence (task_id) WHERE overlap = 'forbid';
CREATE INDEX occurrence_key_active_idx ON occurrence (concurrency_key, scheduled_for, id)
    WHERE concurrency_key IS NOT NULL;
CREATE UNIQUE INDEX occurrence_key_executing_key ON occurrence (concurrency_key)
    WHERE concurrency_key IS NOT NULL AND status IN ('launching', 'running');
CREATE UNIQUE INDEX occurrence_queue_executing_key ON occurrence (task_id)
    WHERE overlap = 'queue' AND status IN ('launching', 'running');
CREATE UNIQUE INDEX occurrence_replace_executing_key ON occurrence (task_id)
    WHERE overlap = 'replace' AND status IN ('launching', 'running');
CREATE UNIQUE INDEX occurrence_replace_queued_key ON occurrence (task_id)
    WHERE overlap = 'replace' AND status = 'queued';
CREATE INDEX occurrence_queue_idx ON occurrence (attempts, scheduled_for, id) WHERE status = 'queued';
CREATE INDEX occurrence_claim_expiry_idx ON occurrence (claim_expires_at) WHERE status = 'launching';
CREATE INDEX occurrence_executing_idx ON occurrence (id) WHERE status IN ('launching', 'running');

-- One row per scheduled or backfilled firing ever dispatched (guarantee 2), never updated.
CREATE TABLE firing_key (
    task_id bigint NOT NULL,
    scheduled_for timestamptz NOT NULL,
    trigger text NOT NULL CHECK (trigger IN ('schedule', 'backfill')),
    PRIMARY KEY (task_id, scheduled_for, trigger)
);
