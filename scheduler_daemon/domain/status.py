"""The vocabulary: every status, policy and kind a row can hold, and the named sets of statuses.

Each enum is the list of a CHECK constraint in sql/schema.sql, in its order, and each set is the
list a partial index or a statement in sql/*.sql writes out; tests/unit/test_status.py holds
them equal, so a value added on one side only fails a test. The members are `str`s: they compare
equal to the strings rows hold and are sent to the database as their values.
"""

from enum import StrEnum


class OccurrenceStatus(StrEnum):
    """Where one firing is: waiting, claimed, executing, or final (occurrence_status_check)."""

    QUEUED = "queued"
    LAUNCHING = "launching"  # claimed by an instance that has not started the job yet
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    EXPIRED = "expired"


# Holds its slot: `forbid` (occurrence_forbid_active_key), `queue` and concurrency-key order.
ACTIVE = (OccurrenceStatus.QUEUED, OccurrenceStatus.LAUNCHING, OccurrenceStatus.RUNNING)
# Has a claim or a job: counts against the fleet budget; one per key or `queue` task.
EXECUTING = (OccurrenceStatus.LAUNCHING, OccurrenceStatus.RUNNING)
# No job started yet: a cancel ends these at once; only a running one takes a cancel request.
NOT_STARTED = (OccurrenceStatus.QUEUED, OccurrenceStatus.LAUNCHING)
# Final: the row has its finished_at (occurrence_finished_check); a task shows it as last_status.
FINISHED = tuple(s for s in OccurrenceStatus if s not in ACTIVE)
# Final with a `reason` saying why (occurrence_reason_check).
NEEDS_REASON = (OccurrenceStatus.SKIPPED, OccurrenceStatus.EXPIRED, OccurrenceStatus.CANCELLED)
# A firing lost without a job: the per-task lost-firings gauge counts these (by LostReason);
# `tasks health` reads them through occurrence_lost_idx.
LOST = (OccurrenceStatus.SKIPPED, OccurrenceStatus.EXPIRED)
# A job's failed outcome: the per-task gauge counts these since the task's last success.
FAILED_OUTCOMES = (OccurrenceStatus.FAILED, OccurrenceStatus.TIMEOUT, OccurrenceStatus.INTERRUPTED)
# The statuses an occurrence can hold that its latest run does not show, so `runs list` gives it
# a row of its own: not started (yet, or again after an attempt), or ended without a run. Every
# other status is set by a run of that status in the same transaction (outcome.decide).
OWN_HISTORY_ROW = NOT_STARTED + NEEDS_REASON


class RunStatus(StrEnum):
    """How one attempt ended, or `running` (run_status_check)."""

    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"


class OutcomeStatus(StrEnum):
    """What an executor reports for a job; `stopped`: killed on request or by its deadline."""

    SUCCESS = "success"
    FAILED = "failed"
    TIMEOUT = "timeout"
    STOPPED = "stopped"


class TaskStatus(StrEnum):
    """A task's lifecycle; only one-shot tasks leave `enabled` (task_status_check)."""

    ENABLED = "enabled"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Trigger(StrEnum):
    """Why an occurrence exists (occurrence_trigger_check)."""

    SCHEDULE = "schedule"
    MANUAL = "manual"
    BACKFILL = "backfill"


KEYED_TRIGGERS = (Trigger.SCHEDULE, Trigger.BACKFILL)
"""The triggers whose firing has a key in `firing_key` (guarantee 2, issue 47): one occurrence
per scheduled firing, one backfill at most (firing_key_trigger_check)."""


class OverlapPolicy(StrEnum):
    """Whether a task's occurrences may run beside each other (task_overlap_check)."""

    FORBID = "forbid"
    QUEUE = "queue"
    ALLOW = "allow"
    # A new firing cancels a queued predecessor and asks a running one to stop; it starts once
    # the predecessor's job is gone (occurrence_cancel_active, sd_claim_launch_v6).
    REPLACE = "replace"


class MisfirePolicy(StrEnum):
    """What a dispatch pass does with firings missed by more than the grace (task_misfire_check)."""

    SKIP = "skip"
    RUN_ONCE = "run_once"
    RUN_ALL = "run_all"


class DstGapPolicy(StrEnum):
    """A cron wall time skipped by a spring-forward gap (task_dst_gap_check)."""

    SHIFT = "shift"
    SKIP = "skip"


class DstOverlapPolicy(StrEnum):
    """A cron wall time repeated by a fall-back overlap (task_dst_overlap_check)."""

    FIRST = "first"
    SECOND = "second"
    BOTH = "both"


class ScheduleKind(StrEnum):
    """How a task's fire times are defined (task_schedule_kind_check)."""

    CRON = "cron"
    INTERVAL = "interval"
    ONCE = "once"


class ExecutorKind(StrEnum):
    """What runs a task's job (task_executor_check)."""

    SHELL = "shell"
    HTTP = "http"
    PYTHON = "python"


class TaskEventKind(StrEnum):
    """A row of a task's schedule history (task_event_kind_check)."""

    BASELINE = "baseline"
    CREATED = "created"
    CHANGED = "changed"
    DELETED = "deleted"


class NotifyEvent(StrEnum):
    """What a notification reports (notification_outbox_event_check): a final status of a firing
    (failed or interrupted: FAILURE), or its deadline passed before it succeeded."""

    FAILURE = "failure"
    TIMEOUT = "timeout"
    SKIPPED = "skipped"
    EXPIRED = "expired"
    DEADLINE = "deadline"


class OperatorAction(StrEnum):
    """What an operator did, as `operator_action` records it (operator_action_action_check)."""

    TRIGGER = "trigger"
    PAUSE = "pause"
    RESUME = "resume"
    CANCEL = "cancel"
    BACKFILL = "backfill"


class ActionSource(StrEnum):
    """Where an operator's action came from (operator_action_source_check)."""

    CLI = "cli"
    CONSOLE = "console"
    SCHEDULER = "scheduler"  # a `--until` pause's resume, carried out by a reconciler (0033)


# The events a notify URL reports when neither the task nor the fleet names them (outbox_enqueue):
# the firings that did not do their work; a skip is a policy at work, reported when asked for.
DEFAULT_NOTIFY_ON = (
    NotifyEvent.FAILURE,
    NotifyEvent.TIMEOUT,
    NotifyEvent.EXPIRED,
    NotifyEvent.DEADLINE,
)

# The events a task or the fleet may select (`--notify-on`, `config set notify-on`).
NOTIFY_ON_CHOICES = tuple(str(e) for e in NotifyEvent)


class CalendarSource(StrEnum):
    """How a calendar's dates were given (`calendar.source_kind`, revision 0036)."""

    DATES = "dates"  # --date and --range
    ICS = "ics"  # an iCalendar file, expanded


class LostReason(StrEnum):
    """Why a firing was recorded skipped or expired (its occurrence's `reason`). Not a CHECK:
    `reason` is free text for a cancel. The misfire planner, the operator plans, the manual
    trigger and the start deadline write these; the metrics count any other under OTHER."""

    MISFIRED = "misfired"  # past the misfire grace (misfire `skip`)
    COALESCED = "coalesced"  # folded into the newest (misfire `run_once`)
    CATCHUP_WINDOW = "catchup_window"
    CATCHUP_LIMIT = "catchup_limit"
    OVERLAP = "overlap"  # its task was still running (overlap `forbid`)
    # A newer firing of its `replace` task came: skipped in the same pass, or cancelled queued,
    # or its running job stopped (the occurrence's reason).
    REPLACED = "replaced"
    PAUSED = "paused"
    PARKED = "parked"
    RESCHEDULED = "rescheduled"
    DELETED = "deleted"
    START_DEADLINE = "start_deadline"  # expired: not started within its start deadline
    # A one-shot's local `--at` in a DST gap under `--dst-gap skip`: recorded when written.
    DST_GAP = "dst_gap"
    # Its nominal time falls on a date of one of its task's calendars (ADR 0025): never run.
    EXCLUDED = "excluded"
    OTHER = "other"
