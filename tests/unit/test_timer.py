"""JobTimers: when a job is killed and why, stepped through monotonic times passed in."""

import pytest

from scheduler_daemon.executors.timer import (
    DEADLINE_ERROR,
    STOP_GRACE_SECONDS,
    JobTimers,
    Stop,
    next_wake,
    timeout_error,
)

T0 = 1000.0  # an arbitrary monotonic start


def timers(deadline: float = 10.0, timeout: float | None = None, grace: float = 1.0) -> JobTimers:
    """A job started at T0 whose trust deadline and timeout are given relative to T0."""
    return JobTimers(T0, deadline=T0 + deadline, timeout=timeout, grace=grace)


def test_nothing_is_due_before_the_trust_deadline() -> None:
    t = timers(deadline=10.0)

    assert t.fire(T0 + 9.999) is None
    assert (t.reason, t.killed) == (None, False)


def test_the_trust_deadline_kills_when_it_is_reached() -> None:
    t = timers(deadline=10.0)

    assert t.fire(T0 + 10.0) == Stop("stopped", DEADLINE_ERROR)
    assert t.killed
    assert t.reason == Stop("stopped", DEADLINE_ERROR)


def test_a_kill_is_decided_once() -> None:
    t = timers(deadline=10.0)
    t.fire(T0 + 10.0)

    assert t.fire(T0 + 11.0) is None
    assert t.wake_at() is None


def test_extending_the_deadline_keeps_the_job_alive_past_the_old_one() -> None:
    t = timers(deadline=10.0)
    t.extend(T0 + 20.0)

    assert t.fire(T0 + 15.0) is None
    assert t.wake_at() == T0 + 20.0
    assert t.fire(T0 + 20.0) == Stop("stopped", DEADLINE_ERROR)


def test_the_timeout_kills_with_timeout_counted_from_the_start() -> None:
    t = timers(deadline=10.0, timeout=2.5)

    assert t.fire(T0 + 2.4) is None
    assert t.fire(T0 + 2.5) == Stop("timeout", "timed out after 2.5 s")
    assert t.killed


def test_the_timeout_message_prints_whole_seconds_without_decimals() -> None:
    assert timeout_error(5.0) == "timed out after 5 s"
    assert timeout_error(0.25) == "timed out after 0.25 s"


def test_without_a_timeout_only_the_deadline_is_pending() -> None:
    t = timers(deadline=10.0, timeout=None)

    assert t.wake_at() == T0 + 10.0
    assert t.fire(T0 + 9.0) is None


def test_the_deadline_wins_over_a_timeout_due_at_the_same_time() -> None:
    t = timers(deadline=2.0, timeout=1.0)

    assert t.fire(T0 + 5.0) == Stop("stopped", DEADLINE_ERROR)


def test_a_stop_starts_the_grace_and_the_kill_follows_it_with_the_stops_reason() -> None:
    t = timers(deadline=10.0, grace=1.0)

    assert t.stop(T0 + 3.0, "cancelled: a cancel was requested")
    assert t.reason == Stop("stopped", "cancelled: a cancel was requested")
    assert not t.killed  # the caller sends SIGTERM (or sets cancelled) and waits
    assert t.wake_at() == T0 + 4.0
    assert t.fire(T0 + 3.999) is None
    assert t.fire(T0 + 4.0) == Stop("stopped", "cancelled: a cancel was requested")
    assert t.killed


def test_a_stop_without_a_reason_is_killed_as_stopped_with_an_empty_error() -> None:
    t = timers(grace=1.0)
    t.stop(T0)

    assert t.fire(T0 + 1.0) == Stop("stopped", "")


def test_the_default_grace_is_the_contracts_stop_grace() -> None:
    t = JobTimers(T0, deadline=T0 + 10.0, timeout=None)
    t.stop(T0)

    assert t.wake_at() == T0 + STOP_GRACE_SECONDS


def test_a_second_stop_changes_nothing() -> None:
    t = timers(grace=1.0)
    t.stop(T0, "first")

    assert not t.stop(T0 + 0.5, "second")
    assert t.reason == Stop("stopped", "first")
    assert t.wake_at() == T0 + 1.0


def test_a_stop_after_a_kill_changes_nothing() -> None:
    t = timers(deadline=10.0, timeout=1.0)
    t.fire(T0 + 1.0)

    assert not t.stop(T0 + 1.5, "too late")
    assert t.reason == Stop("timeout", "timed out after 1 s")


def test_a_stop_suspends_the_timeout() -> None:
    t = timers(deadline=10.0, timeout=2.0, grace=5.0)
    t.stop(T0 + 1.0, "stop")

    assert t.wake_at() == T0 + 6.0  # the grace's end, not the timeout at T0 + 2
    assert t.fire(T0 + 3.0) is None
    assert t.fire(T0 + 6.0) == Stop("stopped", "stop")


def test_the_deadline_kills_during_the_grace_and_keeps_the_stops_reason() -> None:
    t = timers(deadline=2.0, grace=5.0)
    t.stop(T0 + 1.0, "fenced")

    assert t.wake_at() == T0 + 2.0
    assert t.fire(T0 + 2.0) == Stop("stopped", "fenced")


@pytest.mark.parametrize(
    ("deadline", "timeout", "stop_at", "expected"),
    [
        (10.0, None, None, 10.0),  # the deadline alone
        (10.0, 3.0, None, 3.0),  # the timeout is sooner
        (2.0, 3.0, None, 2.0),  # the deadline is sooner
        (10.0, 3.0, 0.5, 1.5),  # a stop: its grace's end; the timeout no longer counts
        (1.2, 3.0, 0.5, 1.2),  # a stop, but the deadline comes before the grace ends
    ],
)
def test_the_wake_is_the_earliest_pending_deadline(
    deadline: float, timeout: float | None, stop_at: float | None, expected: float
) -> None:
    t = timers(deadline=deadline, timeout=timeout, grace=1.0)
    if stop_at is not None:
        t.stop(T0 + stop_at)

    assert t.wake_at() == T0 + expected


def test_the_next_wake_of_several_jobs_is_the_earliest_and_skips_killed_ones() -> None:
    killed = timers(deadline=0.5)
    killed.fire(T0 + 0.5)
    jobs = [timers(deadline=10.0), timers(deadline=10.0, timeout=4.0), killed]

    assert next_wake(jobs) == T0 + 4.0
    assert next_wake([killed]) is None
    assert next_wake([]) is None


def test_cooperative_timers_ask_on_timeout_then_report_stuck_after_the_grace() -> None:
    from scheduler_daemon.executors.timer import CooperativeTimers

    timers = CooperativeTimers(0.0, deadline=100.0, timeout=5.0, grace=2.0)

    assert timers.fire(4.9) is None
    assert timers.wake_at() == 5.0
    assert timers.fire(5.0) == "stop"
    assert timers.reason == ("timeout", "timed out after 5 s")
    assert timers.stop(5.5, "cancelled") is False  # the timeout's reason stays
    assert timers.fire(6.9) is None
    assert timers.wake_at() == 7.0
    assert timers.fire(7.0) == "stuck"
    assert timers.fire(8.0) is None
    assert timers.wake_at() == 100.0


def test_cooperative_timers_report_the_trust_deadline_first_and_once() -> None:
    from scheduler_daemon.executors.timer import CooperativeTimers

    timers = CooperativeTimers(0.0, deadline=3.0, timeout=None, grace=1.0)
    assert timers.stop(1.0, "fenced")
    timers.extend(2.5)  # never moved back

    assert timers.fire(3.0) == "untrusted"
    assert timers.fire(3.0) == "stuck"
    assert timers.fire(3.0) is None
    assert timers.wake_at() is None
