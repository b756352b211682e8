"""`outcome.decide`: what a finished attempt means for its occurrence (final, retry, or give the
attempt back), at each boundary of the attempt and interruption bounds, with and without a
cancel request; and the one-shot lifecycle each final status leads to."""

from datetime import timedelta

import pytest

from scheduler_daemon.domain.outcome import LIFECYCLE, Decision, decide, retry_delay
from scheduler_daemon.domain.status import (
    FINISHED,
    OccurrenceStatus,
    OutcomeStatus,
    RunStatus,
    TaskStatus,
)

BACKOFF = timedelta(minutes=5)


def _decide(
    outcome: str,
    *,
    attempts: int = 1,
    max_attempts: int = 3,
    interruptions: int = 0,
    max_interruptions: int = 3,
    cancel_reason: str | None = None,
) -> Decision:
    return decide(
        outcome,
        attempts=attempts,
        max_attempts=max_attempts,
        interruptions=interruptions,
        max_interruptions=max_interruptions,
        backoff=BACKOFF,
        cancel_reason=cancel_reason,
    )


@pytest.mark.parametrize("attempts", [1, 3, 7])
def test_a_success_is_final_whatever_the_attempt_count(attempts: int) -> None:
    decision = _decide(OutcomeStatus.SUCCESS, attempts=attempts, max_attempts=3)
    assert decision == Decision(RunStatus.SUCCESS, OccurrenceStatus.SUCCESS)
    assert decision.final


@pytest.mark.parametrize(
    ("outcome", "run_status"),
    [(OutcomeStatus.FAILED, RunStatus.FAILED), (OutcomeStatus.TIMEOUT, RunStatus.TIMEOUT)],
)
def test_a_failure_with_attempts_left_is_queued_again_after_the_backoff(
    outcome: str, run_status: str
) -> None:
    # attempts counts this attempt: the second of three leaves one more.
    decision = _decide(outcome, attempts=2, max_attempts=3)
    assert decision == Decision(run_status, OccurrenceStatus.QUEUED, delay=BACKOFF)
    assert not decision.final
    assert not decision.refund  # a failure uses its attempt up


@pytest.mark.parametrize(
    ("outcome", "final"),
    [
        (OutcomeStatus.FAILED, OccurrenceStatus.FAILED),
        (OutcomeStatus.TIMEOUT, OccurrenceStatus.TIMEOUT),
    ],
)
@pytest.mark.parametrize(("attempts", "max_attempts"), [(3, 3), (1, 1), (4, 3)])
def test_a_failure_on_the_last_attempt_is_final_with_the_runs_status(
    outcome: str, final: str, attempts: int, max_attempts: int
) -> None:
    decision = _decide(outcome, attempts=attempts, max_attempts=max_attempts)
    assert decision == Decision(RunStatus(final), final)
    assert decision.delay == timedelta(0)
    assert decision.final


def test_an_interruption_under_its_bound_gives_the_attempt_back_and_queues_at_once() -> None:
    # One below the bound: this interruption is the third of at most three.
    decision = _decide(OutcomeStatus.STOPPED, interruptions=2, max_interruptions=3)
    assert decision == Decision(RunStatus.INTERRUPTED, OccurrenceStatus.QUEUED, refund=True)
    assert decision.delay == timedelta(0)  # no backoff: the job did not fail
    assert not decision.final


def test_an_interruption_with_a_requeue_delay_waits_that_long_in_the_queue() -> None:
    """An in-process job still running as its daemon exits (ADR 0009): its retry must not start
    before the process is gone. Failures keep their backoff, and a final interruption has none."""
    wait = timedelta(seconds=2)
    args = {"attempts": 1, "max_attempts": 3, "backoff": BACKOFF, "requeue_delay": wait}

    queued = decide(OutcomeStatus.STOPPED, interruptions=0, max_interruptions=3, **args)  # type: ignore[arg-type]
    final = decide(OutcomeStatus.STOPPED, interruptions=3, max_interruptions=3, **args)  # type: ignore[arg-type]
    failed = decide(OutcomeStatus.FAILED, interruptions=0, max_interruptions=3, **args)  # type: ignore[arg-type]

    assert (queued.occurrence_status, queued.delay, queued.refund) == ("queued", wait, True)
    assert final.final
    assert failed.delay == BACKOFF


def test_an_interruption_gives_the_attempt_back_even_on_the_last_attempt() -> None:
    decision = _decide(OutcomeStatus.STOPPED, attempts=3, max_attempts=3, interruptions=0)
    assert (decision.occurrence_status, decision.refund) == (OccurrenceStatus.QUEUED, True)


@pytest.mark.parametrize(("interruptions", "max_interruptions"), [(3, 3), (1, 1), (5, 3)])
def test_an_interruption_at_its_bound_ends_the_occurrence_interrupted_saying_why(
    interruptions: int, max_interruptions: int
) -> None:
    decision = _decide(
        OutcomeStatus.STOPPED, interruptions=interruptions, max_interruptions=max_interruptions
    )
    assert decision == Decision(
        RunStatus.INTERRUPTED,
        OccurrenceStatus.INTERRUPTED,
        reason=f"interrupted {interruptions + 1} times (bound {max_interruptions})",
    )
    assert not decision.refund
    assert decision.final


@pytest.mark.parametrize(
    "outcome", [OutcomeStatus.FAILED, OutcomeStatus.TIMEOUT, OutcomeStatus.STOPPED]
)
def test_a_cancel_requested_while_it_ran_makes_any_unsuccessful_attempt_final_cancelled(
    outcome: str,
) -> None:
    # Attempts and interruptions are both left: without the cancel each would be queued again.
    decision = _decide(outcome, attempts=1, max_attempts=3, cancel_reason="cancelled by ops")
    assert decision == Decision(
        RunStatus.CANCELLED, OccurrenceStatus.CANCELLED, reason="cancelled by ops"
    )
    assert decision.final


def test_a_job_that_succeeded_before_its_cancel_could_stop_it_is_recorded_a_success() -> None:
    decision = _decide(OutcomeStatus.SUCCESS, cancel_reason="cancelled by ops")
    assert decision == Decision(RunStatus.SUCCESS, OccurrenceStatus.SUCCESS)


def test_an_unknown_outcome_status_is_refused_not_given_a_default() -> None:
    with pytest.raises(ValueError, match="exploded"):
        _decide("exploded")


def test_every_final_occurrence_status_has_a_one_shot_lifecycle_and_only_those() -> None:
    assert set(LIFECYCLE) == set(FINISHED)
    assert LIFECYCLE[OccurrenceStatus.SUCCESS] == TaskStatus.COMPLETED
    assert {LIFECYCLE[s] for s in (OccurrenceStatus.FAILED, OccurrenceStatus.TIMEOUT)} == {
        TaskStatus.FAILED
    }
    others = set(FINISHED) - {
        OccurrenceStatus.SUCCESS,
        OccurrenceStatus.FAILED,
        OccurrenceStatus.TIMEOUT,
    }
    assert {LIFECYCLE[s] for s in others} == {TaskStatus.CANCELLED}


@pytest.mark.parametrize("outcome", list(OutcomeStatus))
def test_every_final_decision_leads_to_a_lifecycle(outcome: str) -> None:
    # The completer looks the one-shot's status up with the decision's occurrence status.
    for kw in ({}, {"attempts": 3}, {"interruptions": 3}, {"cancel_reason": "x"}):
        decision = _decide(outcome, **kw)
        assert decision.final == (decision.occurrence_status in LIFECYCLE)


# -- exponential backoff with full jitter (issue 37 item 2) ----------------------------------------
BASE = timedelta(seconds=5)
CAP = timedelta(minutes=10)


def test_without_a_backoff_max_every_retry_waits_the_fixed_backoff() -> None:
    for retry in (1, 2, 10, 1000):
        assert retry_delay(BASE, None, retry=retry) == BASE


@pytest.mark.parametrize(
    ("retry", "ceiling"),
    [(1, 5), (2, 10), (3, 20), (7, 320), (8, 600), (9, 600), (10_000, 600)],
)
def test_retry_n_draws_from_zero_to_backoff_doubled_n_minus_1_times_capped(
    retry: int, ceiling: float
) -> None:
    # The bounds asked of uniform are the promise; the draw itself is the library's.
    asked: list[tuple[float, float]] = []

    def uniform(low: float, high: float) -> float:
        asked.append((low, high))
        return high

    assert retry_delay(BASE, CAP, retry=retry, uniform=uniform) == timedelta(seconds=ceiling)
    assert asked == [(0.0, ceiling)]


def test_delays_over_many_retries_stay_within_their_bounds_and_spread_out() -> None:
    for retry in range(1, 13):
        ceiling = min(CAP.total_seconds(), BASE.total_seconds() * 2 ** (retry - 1))
        drawn = [retry_delay(BASE, CAP, retry=retry).total_seconds() for _ in range(2000)]
        assert all(0.0 <= d <= ceiling for d in drawn), retry
        # full jitter, not equal jitter: the lower half of the range is used as much as the upper
        low = sum(d < ceiling / 2 for d in drawn)
        assert 800 < low < 1200, (retry, low)


def test_a_failure_with_attempts_left_and_a_backoff_max_draws_its_delay() -> None:
    decisions = [
        decide(
            OutcomeStatus.FAILED,
            attempts=4,
            max_attempts=9,
            interruptions=0,
            max_interruptions=3,
            backoff=BASE,
            backoff_max=CAP,
        )
        for _ in range(200)
    ]
    delays = {d.delay for d in decisions}
    assert all(timedelta(0) <= d <= timedelta(seconds=40) for d in delays)  # retry 4: 5 s x 2^3
    assert len(delays) > 100  # drawn per decision, not one fixed delay
    assert {d.occurrence_status for d in decisions} == {OccurrenceStatus.QUEUED}
