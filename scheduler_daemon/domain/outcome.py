"""What a finished attempt means for its occurrence and task: final, retry, or give back (pure)."""

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler_daemon.domain.occurrence import Occurrence
from scheduler_daemon.domain.status import (
    OccurrenceStatus,
    OutcomeStatus,
    RunStatus,
    TaskStatus,
    Trigger,
)

# The task lifecycle a one-shot task takes from its occurrence's final status.
LIFECYCLE = {
    OccurrenceStatus.SUCCESS: TaskStatus.COMPLETED,
    OccurrenceStatus.FAILED: TaskStatus.FAILED,
    OccurrenceStatus.TIMEOUT: TaskStatus.FAILED,
    OccurrenceStatus.INTERRUPTED: TaskStatus.CANCELLED,
    OccurrenceStatus.CANCELLED: TaskStatus.CANCELLED,
    OccurrenceStatus.SKIPPED: TaskStatus.CANCELLED,
    OccurrenceStatus.EXPIRED: TaskStatus.CANCELLED,
}
# The run status an executor's outcome status is recorded as.
RUN_STATUS = {
    OutcomeStatus.SUCCESS: RunStatus.SUCCESS,
    OutcomeStatus.FAILED: RunStatus.FAILED,
    OutcomeStatus.TIMEOUT: RunStatus.TIMEOUT,
    OutcomeStatus.STOPPED: RunStatus.INTERRUPTED,
}


@dataclass(frozen=True)
class Decision:
    run_status: RunStatus
    occurrence_status: OccurrenceStatus  # the final status, or "queued" for another attempt
    delay: timedelta = timedelta(0)
    refund: bool = False  # an interruption gives the attempt back
    reason: str | None = None

    @property
    def final(self) -> bool:
        return self.occurrence_status != OccurrenceStatus.QUEUED


def decide(
    outcome_status: OutcomeStatus,
    *,
    attempts: int,
    max_attempts: int,
    interruptions: int,
    max_interruptions: int,
    backoff: timedelta,
    backoff_max: timedelta | None = None,
    cancel_reason: str | None = None,
    requeue_delay: timedelta = timedelta(0),
) -> Decision:
    """`attempts` counts this one (attempts count at launch). With `cancel_reason` (a cancel
    was requested while it ran) the attempt is final: `cancelled`, unless the job succeeded
    before it could be stopped. A failure or timeout with attempts left goes back to the queue
    after `retry_delay` (retry n = `attempts`). An interruption goes back to the queue after
    `requeue_delay` (an in-process job still running as its daemon exits: its retry must not
    start beside it)."""
    run_status = RUN_STATUS[OutcomeStatus(outcome_status)]  # a stranger: ValueError, no default
    if cancel_reason is not None and run_status != RunStatus.SUCCESS:
        return Decision(RunStatus.CANCELLED, OccurrenceStatus.CANCELLED, reason=cancel_reason)
    if run_status in (RunStatus.FAILED, RunStatus.TIMEOUT) and attempts < max_attempts:
        delay = retry_delay(backoff, backoff_max, retry=attempts)
        return Decision(run_status, OccurrenceStatus.QUEUED, delay=delay)
    if run_status == RunStatus.INTERRUPTED:
        if interruptions < max_interruptions:
            return Decision(run_status, OccurrenceStatus.QUEUED, delay=requeue_delay, refund=True)
        return Decision(
            run_status,
            OccurrenceStatus.INTERRUPTED,
            reason=f"interrupted {interruptions + 1} times (bound {max_interruptions})",
        )
    # The run's final status is the occurrence's too (success, failed, timeout).
    return Decision(run_status, OccurrenceStatus(run_status))


# 2^62 times the shortest backoff (a microsecond) is past any --backoff-max (at most 36,525
# days): doubling further changes nothing, and a bounded exponent keeps the float finite.
_MAX_DOUBLINGS = 62


def retry_delay(
    backoff: timedelta,
    backoff_max: timedelta | None,
    *,
    retry: int,
    uniform: Callable[[float, float], float] = random.uniform,
) -> timedelta:
    """The delay before retry `retry` (1 for the first): `backoff` every time without a
    `backoff_max`; with one, exponential with full jitter, uniform(0, min(backoff_max,
    backoff x 2^(retry-1))): retries of many firings that failed together spread out instead of
    arriving together (issue 37 item 2). Not a coordination time: each decision draws its own,
    recorded on the occurrence (`retry_delay`)."""
    if backoff_max is None:
        return backoff
    doublings = min(max(retry - 1, 0), _MAX_DOUBLINGS)
    ceiling = min(backoff_max.total_seconds(), backoff.total_seconds() * 2.0**doublings)
    return timedelta(seconds=uniform(0.0, ceiling))


@dataclass(frozen=True)
class TaskOutcome:
    """A final occurrence as its task shows it (`sd_show_outcomes_v1`): the task keeps the
    newest outcome by sequence, and a one-shot task takes `lifecycle` when the occurrence
    `decides` its status (a firing of its schedule, never a manual trigger) and no newer firing
    exists."""

    occurrence_id: int
    occurrence_seq: int
    scheduled_for: datetime
    status: OccurrenceStatus
    error: str | None
    lifecycle: TaskStatus
    decides: bool


def task_outcome(occurrence: Occurrence, status: str, error: str | None) -> TaskOutcome:
    """The outcome `occurrence` shows on its task once it ended `status` (a final status)."""
    final = OccurrenceStatus(status)
    return TaskOutcome(
        occurrence.id,
        occurrence.occurrence_seq,
        occurrence.scheduled_for,
        final,
        error,
        LIFECYCLE[final],
        occurrence.trigger != Trigger.MANUAL,
    )


@dataclass(frozen=True)
class Settlement:
    """The writes that end an attempt, decided from its Decision: back to the queue (`outcome`
    None), or the occurrence finished and `outcome` shown on the task. `wakeup` is the reason
    idle daemons are woken with when it commits."""

    decision: Decision
    error: str | None
    outcome: TaskOutcome | None
    wakeup: str


def settlement(occurrence: Occurrence, decision: Decision, error: str | None) -> Settlement:
    """How the end of `occurrence`'s attempt is recorded (the completer's and the takeover's)."""
    if not decision.final:
        return Settlement(decision, error, None, "retry")
    return Settlement(
        decision, error, task_outcome(occurrence, decision.occurrence_status, error), "finished"
    )


@dataclass(frozen=True)
class Finalization:
    """How the reconciler ends a one-shot task left `running` with nothing active: its
    lifecycle status, the error shown, and the newest occurrence's outcome to record first."""

    status: TaskStatus
    error: str | None = None
    outcome: TaskOutcome | None = None


def finalize_one_shot(latest: Occurrence | None) -> Finalization | None:
    """From the newest occurrence (read after the task lock); None while it is still active
    (a later pass looks again)."""
    if latest is None:
        return Finalization(TaskStatus.CANCELLED, error="no occurrence was ever recorded")
    if latest.status not in LIFECYCLE:
        return None
    outcome = task_outcome(latest, latest.status, latest.error)
    return Finalization(outcome.lifecycle, outcome=outcome)
