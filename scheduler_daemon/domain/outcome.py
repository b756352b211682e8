"""What a finished attempt means for its occurrence and task: final, retry, or give back (pure)."""

from dataclasses import dataclass
from datetime import timedelta

# The task lifecycle a one-shot task takes from its occurrence's final status.
LIFECYCLE = {
    "success": "completed",
    "failed": "failed",
    "timeout": "failed",
    "interrupted": "cancelled",
    "cancelled": "cancelled",
    "skipped": "cancelled",
    "expired": "cancelled",
}
# The run status an executor's outcome status is recorded as.
RUN_STATUS = {
    "success": "success",
    "failed": "failed",
    "timeout": "timeout",
    "stopped": "interrupted",
}


@dataclass(frozen=True)
class Decision:
    run_status: str
    occurrence_status: str  # the final status, or "queued" for another attempt
    delay: timedelta = timedelta(0)
    refund: bool = False  # an interruption gives the attempt back
    reason: str | None = None

    @property
    def final(self) -> bool:
        return self.occurrence_status != "queued"


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
    run_status = RUN_STATUS[outcome_status]
    if cancel_reason is not None and run_status != "success":
        return Decision("cancelled", "cancelled", reason=cancel_reason)
    if run_status in ("failed", "timeout") and attempts < max_attempts:
        return Decision(run_status, "queued", delay=backoff)
    if run_status == "interrupted":
        if interruptions < max_interruptions:
            return Decision(run_status, "queued", refund=True)
        return Decision(
            run_status,
            "interrupted",
            reason=f"interrupted {interruptions + 1} times (bound {max_interruptions})",
        )
    return Decision(run_status, run_status)
