"""What counts toward --max-failed-passes: failures do, outages and lock contention do not; the
lease keeper is counted the same way and its thread's death is final; a degraded part is logged
at most once a minute and its dead thread restarted with back-off (ADR 0005)."""

import psycopg
from structlog.testing import capture_logs

from scheduler_daemon.runtime.supervision import (
    Degradable,
    SideThreads,
    Supervisor,
    Vital,
    classify,
)
from scheduler_daemon.storage.error import DatabaseUnavailable


def test_outages_and_contention_are_not_failures() -> None:
    assert classify(DatabaseUnavailable("down")) == "outage"
    assert classify(psycopg.errors.LockNotAvailable()) == "contention"
    assert classify(psycopg.errors.QueryCanceled()) == "contention"
    assert classify(psycopg.errors.DeadlockDetected()) == "contention"
    assert classify(psycopg.errors.UndefinedTable()) == "failure"
    assert classify(psycopg.errors.InsufficientPrivilege()) == "failure"
    assert classify(KeyError("bug")) == "failure"


def test_a_step_gives_up_after_the_limit_of_failures_in_a_row() -> None:
    supervisor = Supervisor(limit=3)
    broken = psycopg.errors.UndefinedTable()
    for _ in range(2):
        supervisor.failed("pass", broken, "relation does not exist")
    supervisor.failed("pass", DatabaseUnavailable("down"), "down")  # neither counts nor resets
    assert supervisor.exhausted is None
    supervisor.failed("pass", broken, "relation does not exist")
    assert supervisor.exhausted == "pass"
    assert supervisor.last_error["pass"] == "relation does not exist"


def test_a_success_resets_only_its_own_step() -> None:
    supervisor = Supervisor(limit=2)
    broken = psycopg.errors.UndefinedFunction()
    supervisor.failed("reconcile", broken, "function does not exist")
    supervisor.failed("pass", broken, "function does not exist")
    supervisor.succeeded("pass")  # passes run often; a rare step keeps its count
    supervisor.failed("reconcile", broken, "function does not exist")
    assert supervisor.exhausted == "reconcile"
    assert supervisor.consecutive == 2


def test_the_lease_keeper_fails_after_the_limit_of_unexpected_errors_in_a_row() -> None:
    keeper = Vital("lease keeper", limit=2)
    broken = psycopg.errors.UndefinedFunction("function sd_renew() does not exist")
    keeper.failed(broken)
    keeper.succeeded()  # a good renewal resets the count
    keeper.failed(broken)
    for harmless in (DatabaseUnavailable("down"), psycopg.errors.LockNotAvailable()):
        assert keeper.failed(harmless) != "failure"  # neither counts nor resets
    assert keeper.problem() is None
    keeper.failed(broken)
    assert keeper.problem() == "failed 2 passes in a row: function sd_renew() does not exist"


def test_a_lease_keeper_whose_thread_died_or_ended_is_a_problem_at_once() -> None:
    keeper = Vital("lease keeper", limit=10)
    assert keeper.problem(alive=False) == "its thread ended"
    keeper.died(MemoryError("out of memory"))
    assert keeper.problem() == "its thread died: MemoryError('out of memory')"
    keeper.succeeded()  # a death is final
    assert keeper.problem() is not None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_degraded_part_is_counted_every_time_and_logged_at_most_once_a_minute() -> None:
    clock, counted = Clock(), []
    part = Degradable("pruner", on_failure=lambda: counted.append(1), clock=clock)
    with capture_logs() as logs:
        for _ in range(5):
            part.failed(KeyError("bug"), "prune_failed")
            clock.now += 10
        clock.now += 20  # a minute after the first line
        part.failed(KeyError("bug"), "prune_failed")
    assert len(counted) == 6
    assert [(e["event"], e["failures"]) for e in logs] == [("prune_failed", 1), ("prune_failed", 5)]


def test_a_dead_thread_is_restarted_with_back_off_that_resets_once_it_stays_up() -> None:
    clock, counted, starts = Clock(), [], []
    alive = [True]

    def restart() -> None:
        starts.append(clock.now)
        alive[0] = True

    part = Degradable(
        "waker",
        on_failure=lambda: counted.append(1),
        alive=lambda: alive[0],
        restart=restart,
        clock=clock,
    )
    sides = SideThreads(Vital("lease keeper", 1), keeper_alive=lambda: True, parts={"waker": part})
    assert sides.degraded() is None
    for backoff in (1, 2, 4):
        alive[0] = False
        sides.check()  # found dead: counted, restarted after the back-off
        assert sides.degraded() is not None
        assert sides.degraded().startswith("waker down")
        clock.now += backoff - 0.5
        sides.check()
        assert len(starts) == backoff.bit_length() - 1  # not yet
        clock.now += 0.5
        sides.check()
        assert starts[-1] == clock.now
        assert sides.degraded() is None
    assert len(counted) == 3
    clock.now += 60  # it stayed up a minute: the next death is restarted after 1 s again
    sides.check()
    alive[0] = False
    sides.check()
    clock.now += 1
    sides.check()
    assert starts[-1] == clock.now


def test_a_failed_restart_is_counted_and_tried_again_later() -> None:
    clock, counted = Clock(), []

    def restart() -> None:
        raise OSError("Address already in use")

    part = Degradable(
        "endpoint",
        on_failure=lambda: counted.append(1),
        alive=lambda: False,
        restart=restart,
        clock=clock,
    )
    part.check()
    clock.now += 1
    part.check()  # tried and failed: counted, next try after 2 s
    assert len(counted) == 2
    assert part.last_error == "Address already in use"
    clock.now += 1
    part.check()
    assert len(counted) == 2
