"""The in-process executor: sync and async jobs, separate output per job, failures, and the
cooperative stop with its two reports to the daemon (stuck after the grace, trust deadline)."""

import dataclasses
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from scheduler_daemon.domain.status import OutcomeStatus
from scheduler_daemon.executors import capture
from scheduler_daemon.executors.base import Outcome
from scheduler_daemon.executors.inprocess import (
    ABANDONED_ERROR,
    InProcessExecutor,
    InProcessJob,
)
from scheduler_daemon.executors.timer import timeout_error
from scheduler_daemon.executors.wire import OUTPUT_TAIL_BYTES
from tests import inprocess_jobs
from tests.support import wait_for
from tests.unit.executor_support import context, wait_outcome

JOBS = "tests.inprocess_jobs"


class Reports:
    """What the executor told the daemon, from its monitor thread."""

    def __init__(self) -> None:
        self.stuck: list[int] = []
        self.untrusted: list[int] = []
        self.event = threading.Event()

    def on_stuck(self, job: InProcessJob) -> None:
        self.stuck.append(job.run_id)
        self.event.set()

    def on_untrusted(self, job: InProcessJob) -> None:
        self.untrusted.append(job.run_id)
        self.event.set()


@pytest.fixture
def reports() -> Reports:
    return Reports()


@pytest.fixture
def executor(wake: threading.Event, reports: Reports) -> Iterator[InProcessExecutor]:
    inprocess_jobs.RELEASE.clear()
    inprocess_jobs.STARTED.clear()
    inprocess_jobs.SEEN.clear()
    executor = InProcessExecutor(
        wake,
        threads=4,
        stop_grace=0.5,
        on_stuck=reports.on_stuck,
        on_untrusted=reports.on_untrusted,
    )
    yield executor
    inprocess_jobs.RELEASE.set()  # a stubborn job left running returns
    wait_for(lambda: not executor.running(), timeout=10)
    executor.close()


def start(executor: InProcessExecutor, name: str, run_id: int = 11, **kw: float) -> InProcessJob:
    job = executor.start(context(run_id, **kw), {"target": f"{JOBS}:{name}"})
    assert isinstance(job, InProcessJob)
    return job


def test_a_plain_function_is_called_with_the_python_context_and_its_value_is_the_tail(
    executor: InProcessExecutor, wake: threading.Event
) -> None:
    outcome = wait_outcome(start(executor, "answer"), wake)

    assert outcome == Outcome(OutcomeStatus.SUCCESS, output_tail="42\n")
    ctx = inprocess_jobs.SEEN["answer"]
    assert (ctx.task_name, ctx.run_id, ctx.attempt, ctx.lease_token) == ("nightly-report", 11, 2, 5)
    assert ctx.idempotency_key == "occ-7-key"
    assert not ctx.cancelled.is_set()


def test_a_coroutine_function_is_awaited_on_the_event_loop_thread(
    executor: InProcessExecutor, wake: threading.Event
) -> None:
    outcome = wait_outcome(start(executor, "answer_async"), wake)

    assert outcome == Outcome(OutcomeStatus.SUCCESS, output_tail="from the coroutine\nasync ok\n")
    assert inprocess_jobs.SEEN["loop_thread"] == "inprocess-loop"


@pytest.mark.parametrize("name", ["say", "say_async"])
def test_two_concurrent_jobs_each_get_only_their_own_output_and_the_daemon_none(
    executor: InProcessExecutor,
    wake: threading.Event,
    name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Both jobs print, wait for each other, print again: on the old code (one shared stream, or
    a capture swapped per job) each tail would hold the other's lines or the test's stream
    would hold theirs."""
    payload = {"target": f"{JOBS}:{name}"}
    left = executor.start(dataclasses.replace(context(21), task_name="left"), payload)
    right = executor.start(dataclasses.replace(context(22), task_name="right"), payload)
    print("the daemon's own line")

    tails = {wait_outcome(job, wake).output_tail for job in (left, right)}

    for side in ("left", "right"):
        expected = [f"first from {side}", f"last from {side}"]
        (tail,) = [t for t in tails if side in t]
        assert [line for line in tail.splitlines() if "stderr" not in line] == expected
        if name == "say":
            assert f"to stderr from {side}" in tail
    captured = capsys.readouterr()
    assert "from left" not in captured.out + captured.err
    assert "from right" not in captured.out + captured.err
    assert "the daemon's own line" in captured.out


def test_the_tail_is_bounded_like_other_executors() -> None:
    tail = capture.Tail()
    for _ in range(50):
        tail.write("y" * 10_000)
    tail.write("the end")

    assert len(tail.text()) == OUTPUT_TAIL_BYTES
    assert tail.text().endswith("the end")


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("boom", "RuntimeError: it broke across two lines"),
        ("boom_async", "KeyError: 'async boom'"),
        ("exits", "SystemExit: 3"),
    ],
)
def test_an_exception_fails_the_run_with_one_line_and_the_traceback_in_the_tail(
    executor: InProcessExecutor, wake: threading.Event, name: str, error: str
) -> None:
    outcome = wait_outcome(start(executor, name), wake)

    assert outcome.status == OutcomeStatus.FAILED
    assert outcome.error == error
    if name != "exits":
        assert "Traceback (most recent call last)" in outcome.output_tail
        assert "inprocess_jobs.py" in outcome.output_tail


def test_an_import_error_fails_the_run_on_the_worker_thread_never_the_daemon(
    executor: InProcessExecutor, wake: threading.Event
) -> None:
    job = executor.start(context(), {"target": "tests.no_such_module:job"})
    outcome = wait_outcome(job, wake)

    assert outcome.status == OutcomeStatus.FAILED
    assert outcome.error == "ModuleNotFoundError: No module named 'tests.no_such_module'"
    assert wait_outcome(start(executor, "answer", run_id=12), wake).status == "success"


def test_a_bad_target_fails_without_raising(executor: InProcessExecutor) -> None:
    job = executor.start(context(), {"target": "not a target"})

    assert job.poll() is not None
    assert job.poll().status == OutcomeStatus.FAILED


@pytest.mark.parametrize("name", ["patient", "patient_async"])
def test_a_stop_sets_cancelled_and_cancels_the_task_and_ends_with_the_stop_reason(
    executor: InProcessExecutor, wake: threading.Event, name: str
) -> None:
    job = start(executor, name)
    wait_for(lambda: job.task is not None or "waiting" in job.tail.text(), timeout=5)
    assert job.poll() is None

    job.stop("cancelled: a cancel was requested")
    outcome = wait_outcome(job, wake)

    assert outcome.status == OutcomeStatus.STOPPED
    assert outcome.error == "cancelled: a cancel was requested"
    assert job.ctx.cancelled.is_set()
    if name == "patient_async":
        assert inprocess_jobs.SEEN["cancelled_error"] is True
        assert "cancelled in the await" in outcome.output_tail
    else:
        assert outcome.output_tail == "waiting\nsaw the stop\n"


def test_a_timeout_asks_the_job_to_stop_and_is_recorded_when_it_returns(
    executor: InProcessExecutor, wake: threading.Event, reports: Reports
) -> None:
    outcome = wait_outcome(start(executor, "patient", timeout=0.2), wake)

    assert outcome.status == OutcomeStatus.TIMEOUT
    assert outcome.error == timeout_error(0.2)
    assert reports.stuck == []


def test_a_job_ignoring_the_stop_keeps_running_and_is_reported_stuck_after_the_grace(
    executor: InProcessExecutor, wake: threading.Event, reports: Reports
) -> None:
    """It polls None (so the daemon keeps its slot and lease) until the grace passes and the
    executor reports it stuck; it still ends with the stop's outcome once it returns."""
    job = start(executor, "stubborn", timeout=0.1)
    asked = time.monotonic()

    assert reports.event.wait(5)
    assert reports.stuck == [11]
    assert job.stuck
    assert time.monotonic() - asked >= 0.1 + 0.5 - 0.05
    assert job.poll() is None
    assert job.ctx.cancelled.is_set()

    inprocess_jobs.RELEASE.set()
    outcome = wait_outcome(job, wake)
    assert outcome.status == OutcomeStatus.TIMEOUT
    assert not job.stuck


def test_a_trust_deadline_passing_while_the_job_runs_is_reported_once(
    executor: InProcessExecutor, reports: Reports
) -> None:
    job = start(executor, "stubborn", deadline_in=0.3)
    job.extend(time.monotonic() + 0.3)  # a renewal moves it once

    assert reports.event.wait(5)
    assert reports.untrusted == [11]
    assert reports.stuck == []
    time.sleep(0.2)
    assert reports.untrusted == [11]


def test_a_job_that_returns_before_its_deadline_is_never_reported(
    executor: InProcessExecutor, wake: threading.Event, reports: Reports
) -> None:
    wait_outcome(start(executor, "answer", deadline_in=0.3), wake)
    time.sleep(0.5)

    assert reports.untrusted == []


def test_abandon_ends_running_jobs_stopped_but_leaves_the_stuck_one_to_the_takeover(
    executor: InProcessExecutor, reports: Reports
) -> None:
    stuck = start(executor, "stubborn", run_id=31, timeout=0.05)
    assert reports.event.wait(5)
    assert stuck.stuck
    running = start(executor, "stubborn", run_id=32)
    wait_for(lambda: "ignoring stops" in running.tail.text(), timeout=5)

    abandoned = executor.abandon()

    assert abandoned == [running]
    assert running.poll() == Outcome(
        OutcomeStatus.STOPPED, output_tail="ignoring stops\n", error=ABANDONED_ERROR
    )
    assert stuck.poll() is None


def test_the_pool_never_runs_more_threads_than_its_size(wake: threading.Event) -> None:
    executor = InProcessExecutor(wake, threads=2, stop_grace=1.0)
    jobs = [executor.start(context(run_id), {"target": f"{JOBS}:answer"}) for run_id in range(8)]
    for job in jobs:
        assert wait_outcome(job, wake).status == "success"
    executor.close()

    assert len(executor._pool) <= 2


def test_output_outside_any_job_goes_to_the_real_stream(
    executor: InProcessExecutor, wake: threading.Event
) -> None:
    wait_outcome(start(executor, "answer"), wake)

    assert isinstance(sys.stdout, capture._Proxy)  # installed by the first job
    assert capture.CURRENT.get() is None
