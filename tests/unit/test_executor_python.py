"""The python executor: pooled workers, exceptions, kills, crashes and the worker's own deadline."""

import dataclasses
import fcntl
import json
import os
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler_daemon.domain.status import OutcomeStatus
from scheduler_daemon.executors.base import Outcome
from scheduler_daemon.executors.python import WORKER_MODULE, PythonExecutor
from scheduler_daemon.executors.python_worker import (
    WORKER_DEADLINE_EXIT,
    WORKER_ORPHANED_EXIT,
    job_message,
)
from scheduler_daemon.executors.timer import DEADLINE_ERROR
from scheduler_daemon.executors.wire import NOT_STARTED_ERROR, OUTPUT_TAIL_BYTES, Channel
from tests.support import wait_for
from tests.unit.executor_support import IDENTIFIERS_42, KILL_MARGIN, context, wait_outcome

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def python(wake: threading.Event, tmp_path: Path) -> Iterator[PythonExecutor]:
    executor = PythonExecutor(wake, tmp_path / "spool")
    yield executor
    executor.close()


def run(executor: PythonExecutor, wake: threading.Event, target: str, **kw: float) -> Outcome:
    return wait_outcome(executor.start(context(**kw), {"target": target}), wake)  # type: ignore[arg-type]


def worker_pid(executor: PythonExecutor, wake: threading.Event) -> int:
    return int(run(executor, wake, "tests.jobs:pid").output_tail)


def test_a_function_that_returns_succeeds_with_its_return_value_in_the_tail(
    python: PythonExecutor, wake: threading.Event
) -> None:
    outcome = run(python, wake, "tests.jobs:ok")

    assert outcome == Outcome("success", output_tail="ok\n")
    assert type(outcome.status) is OutcomeStatus  # converted from the worker's wire string


def test_an_exception_fails_the_run_and_the_worker_is_reused(
    python: PythonExecutor, wake: threading.Event
) -> None:
    before = worker_pid(python, wake)

    outcome = run(python, wake, "tests.jobs:boom")

    assert outcome.status == "failed"
    assert outcome.error == "ValueError: boom"
    assert outcome.output_tail.startswith("Traceback (most recent call last):")
    assert 'jobs.py", line' in outcome.output_tail
    assert worker_pid(python, wake) == before


def test_a_missing_module_fails_with_the_import_error(
    python: PythonExecutor, wake: threading.Event
) -> None:
    outcome = run(python, wake, "tests.no_such_module:job")

    assert outcome.status == "failed"
    assert outcome.error == "ModuleNotFoundError: No module named 'tests.no_such_module'"


@pytest.mark.parametrize("payload", [{}, {"target": "tests.jobs"}, {"target": "a b:c"}])
def test_a_payload_without_a_valid_target_fails_without_raising(
    python: PythonExecutor, wake: threading.Event, payload: dict[str, str]
) -> None:
    outcome = wait_outcome(python.start(context(), payload), wake)

    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "'module:function'" in outcome.error


def test_a_worker_crash_fails_the_run_and_a_new_worker_takes_the_next(
    python: PythonExecutor, wake: threading.Event
) -> None:
    before = worker_pid(python, wake)

    outcome = run(python, wake, "tests.jobs:crash")

    assert outcome == Outcome("failed", exit_code=3, error="worker died: exit code 3")
    assert worker_pid(python, wake) != before


def test_the_timeout_kills_the_worker_and_reports_timeout(
    python: PythonExecutor, wake: threading.Event
) -> None:
    before = worker_pid(python, wake)

    outcome = run(python, wake, "tests.jobs:sleepy", timeout=0.3)

    assert outcome.status == "timeout"
    assert outcome.error == "timed out after 0.3 s"
    assert worker_pid(python, wake) != before


def test_stop_sets_cancelled_and_a_job_that_returns_keeps_its_worker(
    python: PythonExecutor, wake: threading.Event
) -> None:
    before = worker_pid(python, wake)
    job = python.start(context(), {"target": "tests.jobs:patient"})

    job.stop("lease lost")
    outcome = wait_outcome(job, wake, within=STOP_WITHIN)

    assert outcome == Outcome("stopped", output_tail="cancelled\n", error="lease lost")
    assert worker_pid(python, wake) == before


STOP_WITHIN = 1.0 + KILL_MARGIN


def test_stop_kills_a_job_that_ignores_cancellation_after_the_grace(
    python: PythonExecutor, wake: threading.Event
) -> None:
    job = python.start(context(), {"target": "tests.jobs:sleepy"})
    stopped_at = time.monotonic()

    job.stop("shutting down")
    outcome = wait_outcome(job, wake, within=STOP_WITHIN + 1.0)

    assert outcome.status == "stopped"
    assert outcome.error == "shutting down"
    assert 1.0 <= time.monotonic() - stopped_at < STOP_WITHIN


def test_the_trust_deadline_kills_the_worker(python: PythonExecutor, wake: threading.Event) -> None:
    ctx = context(deadline_in=0.5)
    job = python.start(ctx, {"target": "tests.jobs:sleepy"})

    outcome = wait_outcome(job, wake)

    latency = time.monotonic() - ctx.deadline
    print(f"python run stopped {latency * 1000:.1f} ms after the trust deadline")
    assert outcome.status == "stopped"
    assert outcome.error == "killed: trust deadline passed"
    assert latency < KILL_MARGIN


def test_extend_keeps_a_job_alive_past_its_original_deadline(
    python: PythonExecutor, wake: threading.Event
) -> None:
    job = python.start(context(deadline_in=0.3), {"target": "tests.jobs:nap"})
    job.extend(time.monotonic() + 5.0)

    assert wait_outcome(job, wake) == Outcome("success", output_tail="rested\n")


def test_the_output_tail_is_bounded_for_megabytes_of_output(
    python: PythonExecutor, wake: threading.Event, tmp_path: Path
) -> None:
    outcome = run(python, wake, "tests.jobs:chatty")

    assert outcome.status == "success"
    assert len(outcome.output_tail.encode()) <= OUTPUT_TAIL_BYTES
    assert outcome.output_tail.endswith("x\nthe end\n")
    # Only the idle worker's spool file is left, emptied for its next job.
    assert [f.stat().st_size for f in (tmp_path / "spool").iterdir()] == [0]


def test_a_jobs_output_never_carries_the_previous_jobs_on_the_same_worker(
    python: PythonExecutor, wake: threading.Event
) -> None:
    # The worker keeps its spool file open, with fd 1 and 2 on it, from job to job and empties
    # it after each. Emptying without moving the shared offset back left the next job writing
    # past a hole of NULs as long as the last job's output: this fails against that version.
    before = worker_pid(python, wake)
    assert run(python, wake, "tests.jobs:chatty").status == "success"

    assert run(python, wake, "tests.jobs:ok") == Outcome("success", output_tail="ok\n")
    assert worker_pid(python, wake) == before  # one worker ran all of them


def test_a_child_a_job_left_behind_never_writes_into_the_next_jobs_output(
    python: PythonExecutor, wake: threading.Event, tmp_path: Path
) -> None:
    # A worker reuses its spool file from job to job. The first job returns at once and leaves a
    # child that writes "late" half a second later, while the second job runs on the same worker
    # (the race window, entered by the sleeps): with the file reused regardless, "late" landed in
    # the second job's output. The worker reports the child, so the second job gets a new file.
    first = run(python, wake, "tests.jobs:leaves_a_writer")
    second = run(python, wake, "tests.jobs:lingers")

    assert first.output_tail == second.output_tail  # one worker ran both (its pid)
    assert "late" not in second.output_tail
    # The file the child writes to was deleted, as a job's file always was after its job.
    assert not (tmp_path / "spool" / "python-1-0.out").exists()


def test_the_run_identifiers_and_cancelled_are_in_ctx(
    python: PythonExecutor, wake: threading.Event
) -> None:
    outcome = run(python, wake, "tests.jobs:identify", run_id=42, timeout=20.0)

    assert json.loads(outcome.output_tail) == {
        **IDENTIFIERS_42,
        "timeout": 20.0,
        "cancelled": False,
    }


def test_close_stops_running_jobs_and_reaps_every_worker(
    wake: threading.Event, tmp_path: Path
) -> None:
    executor = PythonExecutor(wake, tmp_path / "spool")
    idle_pid = worker_pid(executor, wake)
    job = executor.start(context(), {"target": "tests.jobs:sleepy"})
    busy_pid = int(
        wait_outcome(executor.start(context(), {"target": "tests.jobs:pid"}), wake).output_tail
    )

    executor.close()

    assert job.poll() == Outcome("stopped", exit_code=-9, error="executor closed")
    assert not Path(f"/proc/{idle_pid}").exists()
    assert not Path(f"/proc/{busy_pid}").exists()


def _unread(channel: Channel) -> int:
    """Bytes sent on our end of a socketpair that the other end has not read yet."""
    return int(struct.unpack("i", fcntl.ioctl(channel.fd, termios.TIOCOUTQ, b"\0" * 4))[0])


class BareWorker:
    """A worker process driven directly, standing in for a daemon that is frozen or dead: our
    ends of its job and control sockets."""

    def __init__(self) -> None:
        jobs, their_jobs = socket.socketpair()
        control, their_control = socket.socketpair()
        with their_jobs, their_control:
            fds = (their_jobs.fileno(), their_control.fileno())
            self.process = subprocess.Popen(
                [sys.executable, "-m", WORKER_MODULE, *map(str, fds)], pass_fds=fds
            )
        self.jobs = Channel(jobs.detach())
        self.control = Channel(control.detach())
        self.jobs.send(("hello", sys.path, False))

    def close(self) -> None:
        self.jobs.close()
        self.control.close()
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def test_the_worker_enforces_the_trust_deadline_when_the_daemon_is_frozen(
    tmp_path: Path,
) -> None:
    worker = BareWorker()
    # 3 s: the worker must have started and called the job before its deadline; a worker that
    # meets a job already past it answers without calling it and lives on (the test below), and
    # a loaded machine has taken more than 0.5 s to start one.
    ctx = context(deadline_in=3.0)
    worker.jobs.send(job_message(1, "tests.jobs:sleepy", ctx, str(tmp_path / "out")))
    try:
        code = worker.process.wait(timeout=3.0 + KILL_MARGIN + 5.0)  # nobody extends
    finally:
        worker.close()

    latency = time.monotonic() - ctx.deadline
    print(f"worker exited {latency * 1000:.1f} ms after the trust deadline on its own")
    assert code == WORKER_DEADLINE_EXIT
    assert latency < KILL_MARGIN


def test_the_worker_calls_no_job_whose_trust_deadline_passed_and_lives_on(
    tmp_path: Path,
) -> None:
    # The worker's own last look before the call: a job that reaches it past its deadline (the
    # daemon stalled between its claim and the send) is answered without being called. On
    # 518d2f3 the worker called it (or its control thread exited the worker first).
    worker = BareWorker()
    out = str(tmp_path / "out")
    try:
        worker.jobs.send(job_message(1, "tests.jobs:ok", context(deadline_in=-0.1), out))
        assert worker.jobs.recv() == ("done", 1, "stopped", NOT_STARTED_ERROR, b"", False)
        worker.jobs.send(job_message(2, "tests.jobs:ok", context(deadline_in=30.0), out))
        assert worker.jobs.recv() == ("done", 2, "success", None, b"ok\n", False)
    finally:
        worker.close()


def test_a_python_job_past_its_trust_deadline_is_never_called(
    python: PythonExecutor, wake: threading.Event
) -> None:
    # The daemon's monitor and the worker race to end it (a kill, or the worker's refusal):
    # either way the job was not called, and the run is stopped.
    outcome = run(python, wake, "tests.jobs:ok", deadline_in=-0.1)

    assert outcome.status == "stopped"
    assert outcome.error in (NOT_STARTED_ERROR, DEADLINE_ERROR)
    assert "ok" not in outcome.output_tail
    assert run(python, wake, "tests.jobs:ok") == Outcome("success", output_tail="ok\n")


def test_the_worker_enforces_an_earlier_deadline_of_a_later_job(tmp_path: Path) -> None:
    # The control thread sleeps until the deadline it last saw; a job with an earlier one must
    # wake it (a version that never woke it would let the second job run to the first's).
    worker = BareWorker()
    out = str(tmp_path / "out")
    worker.jobs.send(job_message(1, "tests.jobs:ok", context(deadline_in=30.0), out))
    assert worker.jobs.recv()[:3] == ("done", 1, "success")  # its control thread saw 30 s
    ctx = context(deadline_in=0.5)
    worker.jobs.send(job_message(2, "tests.jobs:sleepy", ctx, out))
    try:
        code = worker.process.wait(timeout=0.5 + KILL_MARGIN + 5.0)
    finally:
        worker.close()

    assert code == WORKER_DEADLINE_EXIT
    assert time.monotonic() - ctx.deadline < KILL_MARGIN


@pytest.mark.parametrize("cancel_first", [True, False], ids=["cancel-first", "job-first"])
def test_a_cancel_reaches_its_job_whichever_socket_is_read_first(
    tmp_path: Path, cancel_first: bool
) -> None:
    # The cancel comes on the control socket and the job on the job socket: the worker may read
    # either first. Cancel first is forced: the job is sent only once the worker has read the
    # cancel (our end's unread-bytes count is back to 0). A worker that reset `cancelled` when a
    # job began lost it there and the job waited its full 30 s; the cancel names its job, and
    # the job takes it.
    worker = BareWorker()
    run = job_message(7, "tests.jobs:patient", context(), str(tmp_path / "out"))
    try:
        if cancel_first:
            worker.control.send(("cancel", 7))
            wait_for(lambda: _unread(worker.control) == 0, message="the worker to read the cancel")
            worker.jobs.send(run)
        else:
            worker.jobs.send(run)
            worker.control.send(("cancel", 7))
        done = worker.jobs.recv()
    finally:
        worker.close()

    assert done[:3] == ("done", 7, "success")
    assert done[4] == b"cancelled\n"


def test_the_worker_exits_when_the_daemon_end_of_its_sockets_closes() -> None:
    worker = BareWorker()

    worker.jobs.close()
    worker.control.close()

    assert worker.process.wait(timeout=5.0) == WORKER_ORPHANED_EXIT


def test_the_worker_exits_when_the_daemon_end_of_the_control_socket_closes_during_a_job(
    tmp_path: Path,
) -> None:
    worker = BareWorker()
    worker.jobs.send(job_message(1, "tests.jobs:sleepy", context(), str(tmp_path / "out")))

    worker.control.close()
    try:
        code = worker.process.wait(timeout=5.0)
    finally:
        worker.jobs.close()

    assert code == WORKER_ORPHANED_EXIT


def _children() -> set[int]:
    """This test process's child processes (the executor's workers, and whatever else)."""
    pid = os.getpid()
    return {int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


def test_warm_starts_idle_workers_that_the_next_jobs_run_on(
    python: PythonExecutor, wake: threading.Event
) -> None:
    before = _children()

    python.warm(3)
    started = _children() - before

    assert len(started) == 3  # before any job asked for one
    assert {worker_pid(python, wake) for _ in range(3)} <= started
    python.warm(3)  # already there: none more
    assert _children() - before == started


def test_warm_starts_no_more_than_the_idle_limit(wake: threading.Event, tmp_path: Path) -> None:
    before = _children()
    executor = PythonExecutor(wake, tmp_path / "spool", max_idle=2)
    try:
        executor.warm(10)

        assert len(_children() - before) == 2
    finally:
        executor.close()
    assert _children() - before == set()


def test_a_jobs_traceparent_is_in_its_workers_environment_for_that_job_only(
    python: PythonExecutor, wake: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Would fail if the worker left one job's TRACEPARENT for the next (a reused worker).
    monkeypatch.delenv("TRACEPARENT", raising=False)
    before = worker_pid(python, wake)
    traced = dataclasses.replace(context(), traceparent=TRACEPARENT)
    seen = wait_outcome(python.start(traced, {"target": "tests.jobs:trace_context"}), wake)
    assert json.loads(seen.output_tail) == {"env": TRACEPARENT, "ctx": TRACEPARENT}
    after = run(python, wake, "tests.jobs:trace_context")
    assert json.loads(after.output_tail) == {"env": None, "ctx": None}
    assert worker_pid(python, wake) == before  # one worker ran them all
