"""Baseline: the whole schema before the first release, written out (ADR 0001, ADR 0027).

Revision ID: 0038
Revises: (none)
Create Date: 2026-12-07

Revisions 0001-0037 and the contract step that dropped what only their builds used were
squashed into this one (issue 45). A new database runs it alone; a database at 0037 reaches
the same schema through `migrations/from_0037.py` (run by `scheduler-daemon migrate`, the fleet
stopped). Until the first release, a schema change edits this file and that one together;
tests/integration/test_from_0037.py and the snapshot (`sql/schema.sql`) hold them equal.

In order: the tables with their constraints (columns in the order the squashed chain left
them, so both paths' snapshots are equal), their indexes, the live functions from
`sql/functions/*.sql` with their checksum comments (storage/functions.py: the first `migrate`
re-creates nothing; after the tables, since `sd_occurrence_key_v1` is LANGUAGE sql and read
when created), the triggers, the views of the secret columns (ADR 0031), the seed rows, and
the compatibility record with the shape the server takes of the schema (storage/shape.py, issue
47: a database made at 0038 by an earlier build records another, and this build refuses it).
Grants are `scheduler-daemon db roles`'s.

What the squashed chain's readers need to know of its history lives in docs/schema.md:
`task_event.either_days` NULL (written before 0026), `run.build_revision` NULL (before 0004),
`notification_outbox.scheduled_for` NULL, idempotency keys NULL (the legacy key).
"""

from alembic import op

from scheduler_daemon.storage import functions, shape

revision = "0038"
down_revision = None
branch_labels = None
depends_on = None
phase = "baseline"

# The hot set and history (issue 47, ADR 0033 as amended): `occurrence` and `run` are partitioned
# by the time a row ended (`finished_at`); the DEFAULT partition (`occurrence_active`,
# `run_active`) holds every active row (finished_at NULL) and any ended row whose dated partition
# does not exist (yet): the dated ones (`occurrence_pYYYYMMDDHH24MI`, `run_p...`) are made and
# dropped by the partition upkeep, never here. No primary key (one must hold `finished_at`, NULL
# while active): ids are unique on the default partition, and a row ends by a move (DELETE from
# the default, INSERT through the parent), which keeps its id. Nothing refers to these tables by
# FOREIGN KEY (retention deletes what referred to a pruned row itself), and `occurrence` refers
# to `task` by none: the move's INSERT would check it, taking a KEY SHARE lock on the task row,
# and a success would wait for an operator holding that row (ADR 0021 took it off the path;
# tasks are soft-deleted, so the key guarded only a hand-written task id). `firing_key` holds
# guarantee 2 (one row per scheduled firing, backfilled at most once), which a table partitioned
# by `finished_at` cannot: every statement that inserts a scheduled or backfill occurrence
# inserts its key in the same statement, and the occurrence only if the key went in.
HISTORY_TABLES = [
    """
CREATE TABLE occurrence (
    id bigint GENERATED ALWAYS AS IDENTITY,
    task_id bigint NOT NULL,
    occurrence_seq bigint NOT NULL,
    scheduled_for timestamp with time zone NOT NULL,
    last_scheduled_for timestamp with time zone,
    firing_count bigint DEFAULT 1 NOT NULL,
    trigger text NOT NULL,
    overlap text NOT NULL,
    concurrency_key text,
    status text NOT NULL,
    reason text,
    requested_by text,
    attempts integer DEFAULT 0 NOT NULL,
    interruptions integer DEFAULT 0 NOT NULL,
    lease_token bigint DEFAULT 0 NOT NULL,
    claim_owner text,
    claim_expires_at timestamp with time zone,
    not_before timestamp with time zone NOT NULL,
    error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    cancel_requested_at timestamp with time zone,
    cancel_reason text,
    created_xid xid8 DEFAULT pg_current_xact_id(),
    first_claim_snapshot pg_snapshot,
    idempotency_key text,
    retry_delay interval,
    spread_offset interval,
    args jsonb,
    needs_build text,
    CONSTRAINT occurrence_args_check CHECK (((args IS NULL) OR ((jsonb_typeof(args) = 'object'::text) AND (octet_length((args)::text) <= 131072)))),
    CONSTRAINT occurrence_attempts_check CHECK (((attempts <= 1000000000) AND (interruptions <= 1000000000))),
    CONSTRAINT occurrence_cancel_check CHECK ((((cancel_requested_at IS NULL) = (cancel_reason IS NULL)) AND ((cancel_requested_at IS NULL) OR (status <> ALL (ARRAY['queued'::text, 'launching'::text]))))),
    CONSTRAINT occurrence_claim_check CHECK (((status <> 'launching'::text) OR ((claim_owner IS NOT NULL) AND (claim_expires_at IS NOT NULL)))),
    CONSTRAINT occurrence_counts_check CHECK (((occurrence_seq >= 1) AND (attempts >= 0) AND (interruptions >= 0) AND (lease_token >= 0))),
    CONSTRAINT occurrence_finished_check CHECK (((status = ANY (ARRAY['success'::text, 'failed'::text, 'timeout'::text, 'interrupted'::text, 'cancelled'::text, 'skipped'::text, 'expired'::text])) = (finished_at IS NOT NULL))),
    CONSTRAINT occurrence_lease_token_check CHECK ((lease_token < '4611686018427387904'::bigint)),
    CONSTRAINT occurrence_overlap_check CHECK ((overlap = ANY (ARRAY['forbid'::text, 'queue'::text, 'allow'::text, 'replace'::text]))),
    CONSTRAINT occurrence_reason_check CHECK (((status <> ALL (ARRAY['skipped'::text, 'expired'::text, 'cancelled'::text])) OR (reason IS NOT NULL))),
    CONSTRAINT occurrence_status_check CHECK ((status = ANY (ARRAY['queued'::text, 'launching'::text, 'running'::text, 'success'::text, 'failed'::text, 'timeout'::text, 'interrupted'::text, 'cancelled'::text, 'skipped'::text, 'expired'::text]))),
    CONSTRAINT occurrence_summary_check CHECK ((((firing_count = 1) AND (last_scheduled_for IS NULL)) OR ((firing_count > 1) AND (status = 'skipped'::text) AND (last_scheduled_for > scheduled_for)))),
    CONSTRAINT occurrence_trigger_check CHECK ((trigger = ANY (ARRAY['schedule'::text, 'manual'::text, 'backfill'::text])))
) PARTITION BY RANGE (finished_at);
""",
    """
CREATE TABLE run (
    id bigint GENERATED ALWAYS AS IDENTITY,
    occurrence_id bigint NOT NULL,
    attempt integer NOT NULL,
    owner text NOT NULL,
    lease_token bigint NOT NULL,
    lease_expires_at timestamp with time zone NOT NULL,
    takeover_at timestamp with time zone NOT NULL,
    status text DEFAULT 'running'::text NOT NULL,
    exit_code integer,
    http_status integer,
    output_tail text,
    error text,
    finished_by text,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    build_revision text,
    uuid uuid DEFAULT gen_random_uuid(),
    followed_at timestamp with time zone,
    CONSTRAINT run_attempt_check CHECK (((attempt >= 1) AND (lease_token >= 1))),
    CONSTRAINT run_build_revision_check CHECK (((build_revision IS NULL) OR ((length(build_revision) >= 1) AND (length(build_revision) <= 64)))),
    CONSTRAINT run_build_revision_running_check CHECK (((status <> 'running'::text) OR (build_revision IS NOT NULL))),
    CONSTRAINT run_finished_check CHECK (((status = 'running'::text) = (finished_at IS NULL))),
    CONSTRAINT run_lease_token_check CHECK ((lease_token < '4611686018427387904'::bigint)),
    CONSTRAINT run_output_tail_check CHECK (((output_tail IS NULL) OR (octet_length(output_tail) <= 65536))),
    CONSTRAINT run_status_check CHECK ((status = ANY (ARRAY['running'::text, 'success'::text, 'failed'::text, 'timeout'::text, 'interrupted'::text, 'cancelled'::text]))),
    CONSTRAINT run_takeover_check CHECK ((takeover_at >= lease_expires_at))
) PARTITION BY RANGE (finished_at);
""",
    """
CREATE TABLE occurrence_active PARTITION OF occurrence DEFAULT;
""",
    """
CREATE TABLE run_active PARTITION OF run DEFAULT;
""",
    """
CREATE TABLE firing_key (
    task_id bigint NOT NULL,
    scheduled_for timestamp with time zone NOT NULL,
    trigger text NOT NULL,
    CONSTRAINT firing_key_trigger_check CHECK ((trigger = ANY (ARRAY['schedule'::text, 'backfill'::text]))),
    CONSTRAINT firing_key_pkey PRIMARY KEY (task_id, scheduled_for, trigger)
);
""",
]

# Each task's newest outcome and its newest success by sequence (issue 47): one row per task,
# made with the task and moved only to a higher sequence by task_latest_record; what ADR 0011's
# and ADR 0026's reads read instead of each task's occurrences. The same text on both paths.
# No foreign key to task: a second update of one row in a transaction (a batch ending two
# occurrences of a task) would check it again, taking KEY SHARE on the task row, which the
# success path must not wait for (ADR 0011). Tasks are soft-deleted; the trigger makes the row.
TASK_LATEST_TABLE = """
CREATE TABLE task_latest (
    task_id bigint NOT NULL,
    occurrence_seq bigint DEFAULT 0 NOT NULL,
    occurrence_id bigint,
    scheduled_for timestamp with time zone,
    status text,
    finished_at timestamp with time zone,
    error text,
    success_seq bigint DEFAULT 0 NOT NULL,
    success_finished_at timestamp with time zone,
    success_created_at timestamp with time zone,
    CONSTRAINT task_latest_pkey PRIMARY KEY (task_id)
);
"""

# The history's partition upkeep as sd_partitions_v1 last left it (issue 47), which `status`
# reads; the same text on both paths.
PARTITION_UPKEEP_TABLE = """
CREATE TABLE partition_upkeep (
    singleton boolean DEFAULT true NOT NULL,
    last_success_at timestamp with time zone,
    partitions_ahead bigint,
    last_error text,
    last_error_at timestamp with time zone,
    last_sqlstate text,
    CONSTRAINT partition_upkeep_one_row_check CHECK (singleton),
    CONSTRAINT partition_upkeep_pkey PRIMARY KEY (singleton)
);
"""

TABLES = [
    """
CREATE TABLE fleet_setting (
    key text NOT NULL,
    value jsonb NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_by text,
    CONSTRAINT fleet_setting_pkey PRIMARY KEY (key)
);
""",
    """
CREATE TABLE fleet_setting_event (
    id bigint GENERATED ALWAYS AS IDENTITY,
    key text NOT NULL,
    value jsonb NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    updated_by text,
    CONSTRAINT fleet_setting_event_pkey PRIMARY KEY (id)
);
""",
    """
CREATE TABLE instance (
    id text NOT NULL,
    hostname text NOT NULL,
    pid integer NOT NULL,
    version text NOT NULL,
    schema_revision text NOT NULL,
    concurrency integer NOT NULL,
    slots_in_use integer DEFAULT 0 NOT NULL,
    lease_ttl interval NOT NULL,
    lease_grace interval NOT NULL,
    reconcile_interval interval NOT NULL,
    clock_drift interval,
    stopping boolean DEFAULT false NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    heartbeat_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT instance_slots_check CHECK (((concurrency >= 1) AND (slots_in_use >= 0))),
    CONSTRAINT instance_pkey PRIMARY KEY (id)
);
""",
    """
CREATE TABLE task (
    id bigint GENERATED ALWAYS AS IDENTITY,
    name text NOT NULL,
    schedule_kind text NOT NULL,
    cron_expr text,
    every interval,
    run_at timestamp with time zone,
    anchor_at timestamp with time zone NOT NULL,
    timezone text DEFAULT 'UTC'::text NOT NULL,
    dst_gap text DEFAULT 'shift'::text NOT NULL,
    dst_overlap text DEFAULT 'first'::text NOT NULL,
    executor text NOT NULL,
    payload jsonb NOT NULL,
    concurrency_key text,
    overlap text DEFAULT 'forbid'::text NOT NULL,
    misfire text DEFAULT 'run_once'::text NOT NULL,
    misfire_grace interval DEFAULT '00:01:00'::interval NOT NULL,
    catchup_limit integer,
    catchup_window interval,
    start_deadline interval,
    run_timeout interval,
    max_attempts integer DEFAULT 1 NOT NULL,
    backoff interval DEFAULT '00:00:30'::interval NOT NULL,
    status text DEFAULT 'enabled'::text NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    next_run_at timestamp with time zone,
    occurrence_seq bigint DEFAULT 0 NOT NULL,
    last_outcome_seq bigint DEFAULT 0 NOT NULL,
    last_occurrence_id bigint,
    last_scheduled_for timestamp with time zone,
    last_status text,
    last_finished_at timestamp with time zone,
    last_error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    deleted_at timestamp with time zone,
    parked_at timestamp with time zone,
    park_error text,
    history_retention interval,
    source text,
    uuid uuid DEFAULT gen_random_uuid() NOT NULL,
    in_process boolean,
    notify_url text,
    notify_headers jsonb,
    notify_on text[],
    deadline interval,
    backoff_max interval,
    spread interval,
    notify_header_refs jsonb,
    paused_until timestamp with time zone,
    needs_build text,
    CONSTRAINT task_dst_gap_check CHECK ((dst_gap = ANY (ARRAY['shift'::text, 'skip'::text]))),
    CONSTRAINT task_dst_overlap_check CHECK ((dst_overlap = ANY (ARRAY['first'::text, 'second'::text, 'both'::text]))),
    CONSTRAINT task_durations_check CHECK (((misfire_grace >= '00:00:00'::interval) AND (backoff >= '00:00:00'::interval) AND ((catchup_window IS NULL) OR (catchup_window > '00:00:00'::interval)) AND ((start_deadline IS NULL) OR (start_deadline > '00:00:00'::interval)) AND ((run_timeout IS NULL) OR (run_timeout > '00:00:00'::interval)))),
    CONSTRAINT task_executor_check CHECK ((executor = ANY (ARRAY['shell'::text, 'http'::text, 'python'::text]))),
    CONSTRAINT task_history_retention_check CHECK (((history_retention IS NULL) OR (history_retention > '00:00:00'::interval))),
    CONSTRAINT task_in_process_check CHECK (((in_process IS NOT TRUE) OR (executor = 'python'::text))),
    CONSTRAINT task_last_status_check CHECK (((last_status IS NULL) OR (last_status = ANY (ARRAY['success'::text, 'failed'::text, 'timeout'::text, 'interrupted'::text, 'cancelled'::text, 'skipped'::text, 'expired'::text])))),
    CONSTRAINT task_limits_check CHECK (((max_attempts >= 1) AND ((catchup_limit IS NULL) OR (catchup_limit >= 1)))),
    CONSTRAINT task_misfire_check CHECK ((misfire = ANY (ARRAY['skip'::text, 'run_once'::text, 'run_all'::text]))),
    CONSTRAINT task_name_check CHECK (((length(name) >= 1) AND (length(name) <= 200))),
    CONSTRAINT task_overlap_check CHECK ((overlap = ANY (ARRAY['forbid'::text, 'queue'::text, 'allow'::text, 'replace'::text]))),
    CONSTRAINT task_parked_check CHECK (((parked_at IS NULL) = (park_error IS NULL))),
    CONSTRAINT task_payload_size_check CHECK ((octet_length((payload)::text) <= 65536)),
    CONSTRAINT task_run_all_forbid_check CHECK ((NOT ((misfire = 'run_all'::text) AND (overlap = 'forbid'::text)))),
    CONSTRAINT task_schedule_fields_check CHECK ((((schedule_kind = 'cron'::text) AND (cron_expr IS NOT NULL) AND (every IS NULL) AND (run_at IS NULL)) OR ((schedule_kind = 'interval'::text) AND (every > '00:00:00'::interval) AND (cron_expr IS NULL) AND (run_at IS NULL)) OR ((schedule_kind = 'once'::text) AND (run_at IS NOT NULL) AND (cron_expr IS NULL) AND (every IS NULL)))),
    CONSTRAINT task_schedule_kind_check CHECK ((schedule_kind = ANY (ARRAY['cron'::text, 'interval'::text, 'once'::text]))),
    CONSTRAINT task_sequence_check CHECK (((occurrence_seq >= 0) AND ((last_outcome_seq >= 0) AND (last_outcome_seq <= occurrence_seq)))),
    CONSTRAINT task_source_check CHECK (((source IS NULL) OR ((length(source) >= 1) AND (length(source) <= 500)))),
    CONSTRAINT task_status_check CHECK ((status = ANY (ARRAY['enabled'::text, 'running'::text, 'completed'::text, 'failed'::text, 'cancelled'::text]))),
    CONSTRAINT task_status_kind_check CHECK (((schedule_kind = 'once'::text) OR (status = 'enabled'::text))),
    CONSTRAINT task_pkey PRIMARY KEY (id)
);
""",
    """
CREATE TABLE task_event (
    id bigint GENERATED ALWAYS AS IDENTITY,
    task_id bigint NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    kind text NOT NULL,
    schedule_kind text NOT NULL,
    cron_expr text,
    every interval,
    run_at timestamp with time zone,
    anchor_at timestamp with time zone NOT NULL,
    timezone text NOT NULL,
    dst_gap text NOT NULL,
    dst_overlap text NOT NULL,
    active boolean NOT NULL,
    either_days boolean DEFAULT true,
    CONSTRAINT task_event_kind_check CHECK ((kind = ANY (ARRAY['baseline'::text, 'created'::text, 'changed'::text, 'deleted'::text]))),
    CONSTRAINT task_event_pkey PRIMARY KEY (id),
    CONSTRAINT task_event_task_fkey FOREIGN KEY (task_id) REFERENCES task(id)
);
""",
    """
CREATE TABLE task_pruned (
    task_id bigint NOT NULL,
    pruned_through timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT task_pruned_pkey PRIMARY KEY (task_id)
);
""",
    TASK_LATEST_TABLE,
    """
CREATE TABLE fleet_epoch (
    system_identifier bigint NOT NULL,
    timeline bigint NOT NULL,
    first_seen_at timestamp with time zone NOT NULL,
    CONSTRAINT fleet_epoch_pkey PRIMARY KEY (system_identifier, timeline)
);
""",
    """
CREATE TABLE notification_outbox (
    id bigint GENERATED ALWAYS AS IDENTITY,
    delivery_id uuid DEFAULT gen_random_uuid() NOT NULL,
    occurrence_id bigint,
    task_id bigint NOT NULL,
    event text NOT NULL,
    payload jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    attempts bigint DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    delivered_at timestamp with time zone,
    last_error text,
    scheduled_for timestamp with time zone,
    CONSTRAINT notification_outbox_event_check CHECK ((event = ANY (ARRAY['failure'::text, 'timeout'::text, 'skipped'::text, 'expired'::text, 'deadline'::text]))),
    CONSTRAINT notification_outbox_firing_check CHECK (((occurrence_id IS NOT NULL) OR ((event = 'deadline'::text) AND (scheduled_for IS NOT NULL)))),
    CONSTRAINT notification_outbox_delivery_id_key UNIQUE (delivery_id),
    CONSTRAINT notification_outbox_occurrence_event_key UNIQUE (occurrence_id, event),
    CONSTRAINT notification_outbox_pkey PRIMARY KEY (id)
);
""",
    """
CREATE TABLE deadline_mark (
    id boolean DEFAULT true NOT NULL,
    judged_through timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT deadline_mark_one_row_check CHECK (id),
    CONSTRAINT deadline_mark_pkey PRIMARY KEY (id)
);
""",
    PARTITION_UPKEEP_TABLE,
    """
CREATE TABLE operator_action (
    id bigint GENERATED ALWAYS AS IDENTITY,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    actor text NOT NULL,
    action text NOT NULL,
    source text NOT NULL,
    task_id bigint,
    occurrence_id bigint,
    detail text,
    session_role text,
    CONSTRAINT operator_action_action_check CHECK ((action = ANY (ARRAY['trigger'::text, 'pause'::text, 'resume'::text, 'cancel'::text, 'backfill'::text]))),
    CONSTRAINT operator_action_source_check CHECK ((source = ANY (ARRAY['cli'::text, 'console'::text, 'scheduler'::text]))),
    CONSTRAINT operator_action_pkey PRIMARY KEY (id)
);
""",
    """
CREATE TABLE calendar (
    id bigint GENERATED ALWAYS AS IDENTITY,
    name text NOT NULL,
    source_kind text NOT NULL,
    first_day date,
    last_day date,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT calendar_source_kind_check CHECK ((source_kind = ANY (ARRAY['dates'::text, 'ics'::text]))),
    CONSTRAINT calendar_span_check CHECK (((first_day IS NULL) OR (last_day >= first_day))),
    CONSTRAINT calendar_name_key UNIQUE (name),
    CONSTRAINT calendar_pkey PRIMARY KEY (id)
);
""",
    """
CREATE TABLE calendar_date (
    calendar_id bigint NOT NULL,
    day date NOT NULL,
    CONSTRAINT calendar_date_pkey PRIMARY KEY (calendar_id, day),
    CONSTRAINT calendar_date_calendar_id_fkey FOREIGN KEY (calendar_id) REFERENCES calendar(id) ON DELETE CASCADE
);
""",
    """
CREATE TABLE task_calendar (
    task_id bigint NOT NULL,
    calendar_id bigint NOT NULL,
    CONSTRAINT task_calendar_pkey PRIMARY KEY (task_id, calendar_id),
    CONSTRAINT task_calendar_calendar_id_fkey FOREIGN KEY (calendar_id) REFERENCES calendar(id) ON DELETE RESTRICT,
    CONSTRAINT task_calendar_task_id_fkey FOREIGN KEY (task_id) REFERENCES task(id) ON DELETE CASCADE
);
""",
]

TABLES += HISTORY_TABLES

INDEXES = [
    """CREATE INDEX fleet_setting_event_key_idx ON fleet_setting_event USING btree (key, at);""",
    """CREATE INDEX instance_heartbeat_idx ON instance USING btree (heartbeat_at);""",
    """
CREATE INDEX notification_outbox_due_idx ON notification_outbox USING btree (next_attempt_at, id) WHERE (delivered_at IS NULL);
""",
    """
CREATE UNIQUE INDEX notification_outbox_firing_deadline_key ON notification_outbox USING btree (task_id, scheduled_for) WHERE (event = 'deadline'::text);
""",
    """
CREATE INDEX notification_outbox_unrecorded_idx ON notification_outbox USING btree (created_at) WHERE (occurrence_id IS NULL);
""",
    """CREATE INDEX operator_action_task_idx ON operator_action USING btree (task_id, id);""",
    """CREATE INDEX task_calendar_calendar_idx ON task_calendar USING btree (calendar_id);""",
    """
CREATE INDEX task_deadline_idx ON task USING btree (id) WHERE ((deadline IS NOT NULL) AND (deleted_at IS NULL));
""",
    """
CREATE INDEX task_deleted_idx ON task USING btree (deleted_at) WHERE (deleted_at IS NOT NULL);
""",
    """
CREATE INDEX task_due_idx ON task USING btree (next_run_at) WHERE ((deleted_at IS NULL) AND (NOT paused) AND (status = 'enabled'::text) AND (parked_at IS NULL) AND (next_run_at IS NOT NULL) AND (needs_build IS NULL));
""",
    """
CREATE INDEX task_due_marked_idx ON task USING btree (needs_build, next_run_at) WHERE ((deleted_at IS NULL) AND (NOT paused) AND (status = 'enabled'::text) AND (parked_at IS NULL) AND (next_run_at IS NOT NULL) AND (needs_build IS NOT NULL));
""",
    """CREATE INDEX task_event_task_idx ON task_event USING btree (task_id, id);""",
    """
CREATE INDEX task_name_c_idx ON task USING btree (name COLLATE "C") WHERE (deleted_at IS NULL);
""",
    """CREATE UNIQUE INDEX task_name_key ON task USING btree (name) WHERE (deleted_at IS NULL);""",
    """
CREATE INDEX task_paused_until_idx ON task USING btree (paused_until) WHERE (paused AND (paused_until IS NOT NULL));
""",
    """
CREATE INDEX task_retention_idx ON task USING btree (history_retention) WHERE (history_retention IS NOT NULL);
""",
    """
CREATE INDEX task_running_one_shot_idx ON task USING btree (id) WHERE ((schedule_kind = 'once'::text) AND (status = 'running'::text) AND (deleted_at IS NULL));
""",
]

# The hot indexes: the exclusion and claim indexes, on the default partition alone (where every
# active row is), with today's names and predicates; the history readers' indexes on the parent
# (every partition gets them, the default included). ADR 0033's inventory says where each went.
# Each parent index is made after its copy on the default partition, which it then adopts, so
# that copy has a name of its own (`occurrence_active_...`, `run_active_...`) and not one
# PostgreSQL makes up from its columns.
HISTORY_INDEXES = [
    """CREATE UNIQUE INDEX occurrence_id_key ON occurrence_active USING btree (id);""",
    """
CREATE UNIQUE INDEX occurrence_task_seq_key ON occurrence_active USING btree (task_id, occurrence_seq);
""",
    """
CREATE INDEX occurrence_claim_expiry_idx ON occurrence_active USING btree (claim_expires_at) WHERE (status = 'launching'::text);
""",
    """
CREATE INDEX occurrence_executing_idx ON occurrence_active USING btree (id) WHERE (status = ANY (ARRAY['launching'::text, 'running'::text]));
""",
    """
CREATE UNIQUE INDEX occurrence_forbid_active_key ON occurrence_active USING btree (task_id) WHERE ((overlap = 'forbid'::text) AND (status = ANY (ARRAY['queued'::text, 'launching'::text, 'running'::text])));
""",
    """
CREATE INDEX occurrence_key_active_idx ON occurrence_active USING btree (concurrency_key, scheduled_for, id) WHERE ((concurrency_key IS NOT NULL) AND (status = ANY (ARRAY['queued'::text, 'launching'::text, 'running'::text])));
""",
    """
CREATE UNIQUE INDEX occurrence_key_executing_key ON occurrence_active USING btree (concurrency_key) WHERE ((concurrency_key IS NOT NULL) AND (status = ANY (ARRAY['launching'::text, 'running'::text])));
""",
    """
CREATE INDEX occurrence_own_row_idx ON occurrence_active USING btree (id) WHERE (status = ANY (ARRAY['queued'::text, 'launching'::text, 'skipped'::text, 'expired'::text, 'cancelled'::text]));
""",
    """
CREATE UNIQUE INDEX occurrence_queue_executing_key ON occurrence_active USING btree (task_id) WHERE ((overlap = 'queue'::text) AND (status = ANY (ARRAY['launching'::text, 'running'::text])));
""",
    """
CREATE INDEX occurrence_queue_idx ON occurrence_active USING btree (attempts, scheduled_for, id) WHERE ((status = 'queued'::text) AND (needs_build IS NULL));
""",
    """
CREATE INDEX occurrence_queue_marked_idx ON occurrence_active USING btree (needs_build, attempts, scheduled_for, id) WHERE ((status = 'queued'::text) AND (needs_build IS NOT NULL));
""",
    """
CREATE UNIQUE INDEX occurrence_replace_executing_key ON occurrence_active USING btree (task_id) WHERE ((overlap = 'replace'::text) AND (status = ANY (ARRAY['launching'::text, 'running'::text])));
""",
    """
CREATE UNIQUE INDEX occurrence_replace_queued_key ON occurrence_active USING btree (task_id) WHERE ((overlap = 'replace'::text) AND (status = 'queued'::text));
""",
    """
CREATE INDEX occurrence_task_active_idx ON occurrence_active USING btree (task_id, occurrence_seq) WHERE (status = ANY (ARRAY['queued'::text, 'launching'::text, 'running'::text]));
""",
    """CREATE INDEX occurrence_active_id_idx ON occurrence_active USING btree (id);""",
    """CREATE INDEX occurrence_id_idx ON occurrence USING btree (id);""",
    """
CREATE INDEX occurrence_active_finished_idx ON occurrence_active USING btree (finished_at, id) WHERE (finished_at IS NOT NULL);
""",
    """
CREATE INDEX occurrence_finished_idx ON occurrence USING btree (finished_at, id) WHERE (finished_at IS NOT NULL);
""",
    """
CREATE INDEX occurrence_active_lost_idx ON occurrence_active USING btree (scheduled_for, task_id) INCLUDE (status, reason, overlap, firing_count) WHERE (status = ANY (ARRAY['skipped'::text, 'expired'::text]));
""",
    """
CREATE INDEX occurrence_lost_idx ON occurrence USING btree (scheduled_for, task_id) INCLUDE (status, reason, overlap, firing_count) WHERE (status = ANY (ARRAY['skipped'::text, 'expired'::text]));
""",
    """
CREATE INDEX occurrence_active_task_failure_idx ON occurrence_active USING btree (task_id, occurrence_seq) INCLUDE (finished_at) WHERE (status = ANY (ARRAY['failed'::text, 'timeout'::text, 'interrupted'::text]));
""",
    """
CREATE INDEX occurrence_task_failure_idx ON occurrence USING btree (task_id, occurrence_seq) INCLUDE (finished_at) WHERE (status = ANY (ARRAY['failed'::text, 'timeout'::text, 'interrupted'::text]));
""",
    """CREATE INDEX occurrence_active_task_history_idx ON occurrence_active USING btree (task_id, id);""",
    """CREATE INDEX occurrence_task_history_idx ON occurrence USING btree (task_id, id);""",
    """
CREATE INDEX occurrence_active_task_outcome_idx ON occurrence_active USING btree (task_id, occurrence_seq) WHERE ((finished_at IS NOT NULL) AND (status <> 'skipped'::text));
""",
    """
CREATE INDEX occurrence_task_outcome_idx ON occurrence USING btree (task_id, occurrence_seq) WHERE ((finished_at IS NOT NULL) AND (status <> 'skipped'::text));
""",
    """
CREATE INDEX occurrence_active_task_scheduled_for_idx ON occurrence_active USING btree (task_id, scheduled_for) WHERE (trigger = 'schedule'::text);
""",
    """
CREATE INDEX occurrence_task_scheduled_for_idx ON occurrence USING btree (task_id, scheduled_for) WHERE (trigger = 'schedule'::text);
""",
    """
CREATE INDEX occurrence_active_task_success_idx ON occurrence_active USING btree (task_id, occurrence_seq) WHERE (status = 'success'::text);
""",
    """
CREATE INDEX occurrence_task_success_idx ON occurrence USING btree (task_id, occurrence_seq) WHERE (status = 'success'::text);
""",
    """
CREATE INDEX occurrence_active_task_window_idx ON occurrence_active USING btree (task_id, scheduled_for) INCLUDE (trigger, status, reason, overlap, firing_count, finished_at);
""",
    """
CREATE INDEX occurrence_task_window_idx ON occurrence USING btree (task_id, scheduled_for) INCLUDE (trigger, status, reason, overlap, firing_count, finished_at);
""",
    """CREATE UNIQUE INDEX run_id_key ON run_active USING btree (id);""",
    """
CREATE INDEX run_build_running_idx ON run_active USING btree (build_revision) WHERE (status = 'running'::text);
""",
    """
CREATE UNIQUE INDEX run_occurrence_running_key ON run_active USING btree (occurrence_id) WHERE (status = 'running'::text);
""",
    """
CREATE INDEX run_takeover_idx ON run_active USING btree (takeover_at) WHERE (status = 'running'::text);
""",
    """
CREATE INDEX run_active_status_history_idx ON run_active USING btree (status, occurrence_id, id);
""",
    """CREATE INDEX run_status_history_idx ON run USING btree (status, occurrence_id, id);""",
    """CREATE INDEX run_active_id_idx ON run_active USING btree (id);""",
    """CREATE INDEX run_id_idx ON run USING btree (id);""",
    """CREATE INDEX run_active_occurrence_idx ON run_active USING btree (occurrence_id, id);""",
    """CREATE INDEX run_occurrence_idx ON run USING btree (occurrence_id, id);""",
]

INDEXES += HISTORY_INDEXES

# `task_latest`: each task's newest outcome and newest success by sequence, kept by
# task_latest_record (sql/functions/task_latest_record.sql, issue 47); the same text on both paths.
TASK_LATEST_TRIGGERS = """
CREATE TRIGGER task_latest_on_task_insert AFTER INSERT ON task FOR EACH ROW EXECUTE FUNCTION task_latest_record();

CREATE TRIGGER occurrence_latest_on_insert AFTER INSERT ON occurrence FOR EACH ROW
WHEN (new.finished_at IS NOT NULL AND new.status <> 'skipped')
EXECUTE FUNCTION task_latest_record();

CREATE TRIGGER occurrence_latest_on_end AFTER UPDATE ON occurrence FOR EACH ROW
WHEN (old.finished_at IS NULL AND new.finished_at IS NOT NULL AND new.status <> 'skipped')
EXECUTE FUNCTION task_latest_record();
"""

TRIGGERS = [
    """
CREATE TRIGGER fleet_setting_event_on_change AFTER INSERT OR UPDATE ON fleet_setting FOR EACH ROW EXECUTE FUNCTION fleet_setting_event_record();
""",
    """
CREATE TRIGGER operator_action_session_user_on_insert BEFORE INSERT ON operator_action FOR EACH ROW EXECUTE FUNCTION operator_action_session_user();
""",
    """
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
""",
    """
CREATE TRIGGER task_event_on_insert AFTER INSERT ON task FOR EACH ROW EXECUTE FUNCTION task_event_record();
""",
    TASK_LATEST_TRIGGERS,
]

# The secret columns as the connected role may see them (ADR 0031): unmasked for a role that may
# select the column, masked by sd_masked_v1 for one that may not (the reader, after `db roles`,
# which grants it every other column). Narrow (a key and the secret columns), so a column added
# to a table needs no change here; the reader's statements join them on the key. The privilege
# asked of `occurrence` is the parent's by name: its rows' tableoid is their partition's, on
# which no role is granted anything.
VIEWS = [
    """
CREATE VIEW task_secret_shown AS
SELECT id,
    CASE WHEN has_column_privilege(tableoid, 'payload', 'SELECT') THEN payload
         ELSE sd_masked_v1('payload', payload) END AS payload,
    CASE WHEN has_column_privilege(tableoid, 'notify_url', 'SELECT') THEN notify_url
         ELSE sd_masked_v1('url', to_jsonb(notify_url)) #>> '{}' END AS notify_url,
    CASE WHEN has_column_privilege(tableoid, 'notify_headers', 'SELECT') THEN notify_headers
         ELSE sd_masked_v1('headers', notify_headers) END AS notify_headers
FROM task;
""",
    """
CREATE VIEW occurrence_args_shown AS
SELECT id,
    CASE WHEN has_column_privilege('occurrence'::regclass, 'args', 'SELECT') THEN args
         ELSE sd_masked_v1('args', args) END AS args
FROM occurrence;
""",
    """
CREATE VIEW fleet_setting_shown AS
SELECT key,
    CASE WHEN has_column_privilege(tableoid, 'value', 'SELECT') THEN value
         ELSE sd_masked_v1(key, value) END AS value,
    updated_at, updated_by
FROM fleet_setting;
""",
    """
CREATE VIEW fleet_setting_event_shown AS
SELECT id, key,
    CASE WHEN has_column_privilege(tableoid, 'value', 'SELECT') THEN value
         ELSE sd_masked_v1(key, value) END AS value,
    at, updated_by
FROM fleet_setting_event;
""",
]

SEEDS = [
    "INSERT INTO fleet_setting (key, value, updated_by) VALUES "
    "('max_concurrent_runs', '16', 'migration 0001')",
    "INSERT INTO deadline_mark (judged_through, updated_at) VALUES (now(), now())",
]

TABLE_NAMES = [
    "fleet_setting",
    "fleet_setting_event",
    "instance",
    "task",
    "task_event",
    "task_pruned",
    "task_latest",
    "occurrence",
    "run",
    "firing_key",
    "fleet_epoch",
    "notification_outbox",
    "deadline_mark",
    "partition_upkeep",
    "operator_action",
    "calendar",
    "calendar_date",
    "task_calendar",
]


def upgrade() -> None:
    for statement in TABLES + INDEXES:
        op.execute(statement)
    for each in functions.files():
        op.execute(each.create_and_record)
    for statement in TRIGGERS + VIEWS + SEEDS:
        op.execute(statement)
    op.execute(shape.baseline_record(revision))


def downgrade() -> None:
    for name in reversed(TABLE_NAMES):
        op.execute(f"DROP TABLE IF EXISTS {name} CASCADE")
    for each in functions.files():
        op.execute(f"DROP FUNCTION IF EXISTS {each.signature}")
