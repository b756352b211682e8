"""What counts toward --max-failed-passes: failures do, outages and lock contention do not."""

import psycopg

from scheduler_daemon.runtime.supervision import Supervisor, classify
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
