"""Importable callables that the python-executor tests run as `tests.jobs:<name>`."""

import fcntl
import json
import os
import subprocess
import sys
import time
from typing import Any


def ok(ctx: Any) -> str:
    """Succeed, returning a value that lands in the output tail."""
    return "ok"


def boom(ctx: Any) -> None:
    """Fail with an exception."""
    raise ValueError("boom")


def sleepy(ctx: Any) -> None:
    """Run for 30 s and ignore cancellation: only a kill ends it early."""
    time.sleep(30)


def patient(ctx: Any) -> str:
    """Wait up to 30 s for cancellation, then return: a job that honours stop()."""
    ctx.cancelled.wait(30)
    return "cancelled" if ctx.cancelled.is_set() else "not cancelled"


def nap(ctx: Any) -> str:
    """Take 0.8 s: longer than a short trust deadline that extend() keeps moving."""
    time.sleep(0.8)
    return "rested"


def crash(ctx: Any) -> None:
    """Kill the worker process itself, as a segfault or os._exit in a C library would."""
    os._exit(3)


def chatty(ctx: Any) -> None:
    """Print ~5 MB."""
    sys.stdout.write("x" * 5_000_000)
    sys.stdout.write("\nthe end\n")


def identify(ctx: Any) -> None:
    """Print the identifiers the job was given, as JSON."""
    print(
        json.dumps(
            {
                "task_id": ctx.task_id,
                "task_name": ctx.task_name,
                "occurrence_id": ctx.occurrence_id,
                "run_id": ctx.run_id,
                "scheduled_for": ctx.scheduled_for.isoformat(),
                "attempt": ctx.attempt,
                "lease_token": ctx.lease_token,
                "idempotency_key": ctx.idempotency_key,
                "run_uuid": ctx.run_uuid,
                "timeout": ctx.timeout,
                "cancelled": ctx.cancelled.is_set(),
            }
        )
    )


def pid(ctx: Any) -> int:
    """Return the worker's pid, so a test can tell whether a worker was reused."""
    return os.getpid()


def leaves_a_writer(ctx: Any) -> str:
    """Return at once, leaving a child process that writes to the job's output 0.5 s later."""
    subprocess.Popen(["sh", "-c", "sleep 0.5; echo late"])  # not waited for
    return str(os.getpid())


def lingers(ctx: Any) -> str:
    """Run for 1.5 s (while another job's leftover child writes), then return."""
    time.sleep(1.5)
    return str(os.getpid())


def after_go(ctx: Any) -> None:
    """Mark the run started in $TEST_JOB_DIR, wait (at most 30 s) for the test's `go` file there,
    then end after the milliseconds the task's name ends with (`early-0`, `late-40`): jobs that
    a test releases together and that end a known time apart."""
    directory = os.environ["TEST_JOB_DIR"]
    open(os.path.join(directory, f"started-{ctx.run_id}"), "w").close()
    deadline = time.monotonic() + 30
    while not os.path.exists(os.path.join(directory, "go")) and time.monotonic() < deadline:
        time.sleep(0.002)
    time.sleep(int(ctx.task_name.rsplit("-", 1)[1]) / 1000)


def nul(ctx: Any) -> None:
    """Fail with an error that holds a NUL byte (PostgreSQL text refuses NUL)."""
    raise ValueError("nul\x00here")


def trace_context(ctx: Any) -> str:
    """Print the trace context the job was given: TRACEPARENT in its environment, and
    `ctx.traceparent`, as JSON."""
    return json.dumps({"env": os.environ.get("TRACEPARENT"), "ctx": ctx.traceparent})


def replace_locked(ctx: Any) -> None:
    """Hold an OS lock (`flock`, non-blocking) on $TEST_JOB_DIR/<task>.lock for 3 s, having
    appended `start <task> <occurrence> <pid> <taken>` to $TEST_JOB_DIR/joblog in one O_APPEND
    write (taken: 1 if another job held the lock, as the soak's jobs note it): a `replace` job
    whose predecessor was not gone would find it taken. Ignores cancellation: only the kill
    that stops it ends it early (tests/chaos/test_overlap_replace.py)."""
    directory = os.environ["TEST_JOB_DIR"]
    fd = os.open(os.path.join(directory, f"{ctx.task_name}.lock"), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        taken = 0
    except BlockingIOError:
        taken = 1
    line = f"start {ctx.task_name} {ctx.occurrence_id} {os.getpid()} {taken}\n"
    log = os.open(os.path.join(directory, "joblog"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(log, line.encode())
    os.close(log)
    time.sleep(3)
    os.close(fd)


def record_args(ctx: Any) -> None:
    """Append this attempt's `ctx.args` (as JSON) to the file its `file` argument names, then
    fail, so the occurrence is retried and the next attempt records them again."""
    with open(ctx.args["file"], "a") as out:
        out.write(json.dumps({"attempt": ctx.attempt, "args": ctx.args}) + "\n")
    raise ValueError("fail, to be retried")
