"""How the end of an attempt and a final occurrence are recorded (domain/outcome.py): the
decisions behind the four writes that show an outcome on a task."""

from datetime import UTC, datetime, timedelta

from scheduler_daemon.domain.occurrence import Occurrence
from scheduler_daemon.domain.outcome import (
    Decision,
    Finalization,
    TaskOutcome,
    finalize_one_shot,
    settlement,
    task_outcome,
)
from scheduler_daemon.domain.status import OccurrenceStatus, RunStatus, TaskStatus

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def _occurrence(status: str = OccurrenceStatus.RUNNING, error: str | None = None) -> Occurrence:
    return Occurrence.from_row(
        {
            "id": 9,
            "task_id": 2,
            "occurrence_seq": 4,
            "scheduled_for": NOW,
            "last_scheduled_for": None,
            "firing_count": 1,
            "trigger": "schedule",
            "overlap": "forbid",
            "concurrency_key": None,
            "status": status,
            "reason": None,
            "requested_by": None,
            "attempts": 1,
            "interruptions": 0,
            "lease_token": 3,
            "claim_owner": "a",
            "claim_expires_at": None,
            "not_before": NOW,
            "error": error,
            "created_at": NOW,
            "updated_at": NOW,
            "finished_at": None,
            "cancel_requested_at": None,
            "cancel_reason": None,
        }
    )


def test_a_final_outcome_names_the_occurrence_and_the_lifecycle_a_one_shot_takes() -> None:
    assert task_outcome(_occurrence(), OccurrenceStatus.TIMEOUT, "timed out") == TaskOutcome(
        9, 4, NOW, OccurrenceStatus.TIMEOUT, "timed out", TaskStatus.FAILED, decides=True
    )
    manual = Occurrence.from_row({**vars(_occurrence()), "trigger": "manual"})
    assert not task_outcome(manual, OccurrenceStatus.SUCCESS, None).decides  # issue 31
    expired = task_outcome(_occurrence(), "expired", "start deadline passed")
    assert (expired.status, expired.lifecycle) == (OccurrenceStatus.EXPIRED, TaskStatus.CANCELLED)


def test_a_retry_goes_back_to_the_queue_and_shows_nothing_on_the_task() -> None:
    retry = Decision(RunStatus.FAILED, OccurrenceStatus.QUEUED, delay=timedelta(seconds=30))
    settled = settlement(_occurrence(), retry, "exit code 1")
    assert (settled.outcome, settled.wakeup, settled.error) == (None, "retry", "exit code 1")


def test_a_final_attempt_finishes_the_occurrence_and_shows_its_outcome() -> None:
    final = Decision(RunStatus.SUCCESS, OccurrenceStatus.SUCCESS)
    settled = settlement(_occurrence(), final, None)
    assert settled.wakeup == "finished"
    assert settled.outcome == TaskOutcome(
        9, 4, NOW, OccurrenceStatus.SUCCESS, None, TaskStatus.COMPLETED, decides=True
    )


def test_a_one_shot_is_finalized_from_its_newest_occurrence_or_waits_while_it_is_active() -> None:
    assert finalize_one_shot(None) == Finalization(
        TaskStatus.CANCELLED, error="no occurrence was ever recorded"
    )
    assert finalize_one_shot(_occurrence(OccurrenceStatus.QUEUED)) is None
    ended = finalize_one_shot(_occurrence(OccurrenceStatus.FAILED, error="exit code 2"))
    assert ended is not None
    assert ended.status == TaskStatus.FAILED
    assert ended.error is None  # the task's error comes from the recorded outcome
    assert ended.outcome == TaskOutcome(
        9, 4, NOW, OccurrenceStatus.FAILED, "exit code 2", TaskStatus.FAILED, decides=True
    )
