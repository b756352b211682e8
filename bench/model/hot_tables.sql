-- Alternatives B, C, E and F: the hot set. Today's occurrence table (price.py loads its CREATE
-- TABLE from sql/schema.sql: columns, CHECKs, the key, the per-task sequence's unique key) with
-- only active rows (queued, launching, running, waiting for a retry), today's exclusion indexes
-- with their predicates reduced to what a hot row can be, and the queue.
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
