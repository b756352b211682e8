"""What a finished attempt means for its occurrence and task: final, retry, or give back (pure)."""

from dataclasses import dataclass
from datetime import timedelta

from scheduler_daemon.domain.status import OccurrenceStatus, OutcomeStatus, RunStatus, TaskStatus

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
    outcome_status: str,
    *,
    attempts: int,
    max_attempts: int,
    interruptions: int,
    max_interruptions: int,
    backoff: timedelta,
    cancel_reason: str | None = None,
) -> Decision:
    """`attempts` counts this one (attempts count at launch). With `cancel_reason` (a cancel
    was requested while it ran) the attempt is final: `cancelled`, unless the job succeeded
    before it could be stopped."""
    run_status = RUN_STATUS[OutcomeStatus(outcome_status)]
    if cancel_reason is not None and run_status != RunStatus.SUCCESS:
        return Decision(RunStatus.CANCELLED, OccurrenceStatus.CANCELLED, reason=cancel_reason)
    if run_status in (RunStatus.FAILED, RunStatus.TIMEOUT) and attempts < max_attempts:
        return Decision(run_status, OccurrenceStatus.QUEUED, delay=backoff)
    if run_status == RunStatus.INTERRUPTED:
        if interruptions < max_interruptions:
            return Decision(run_status, OccurrenceStatus.QUEUED, refund=True)
        return Decision(
            run_status,
            OccurrenceStatus.INTERRUPTED,
            reason=f"interrupted {interruptions + 1} times (bound {max_interruptions})",
        )
    # The run's final status is the occurrence's too (success, failed, timeout).
    return Decision(run_status, OccurrenceStatus(run_status))
