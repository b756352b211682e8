"""A python worker process: runs `module:function(ctx)` jobs one after another for the daemon.

Started as `python -m scheduler_daemon.executors.python_worker JOBS CONTROL`: its ends of two
socketpairs that carry `wire.Channel` messages. The main thread reads each `run` message from
the job socket itself, runs the job with fd 1 and 2 on the spool file, and sends back the end of
it with the result. A control thread reads the control socket: it applies `cancel` and `extend`
(each naming its job) and `os._exit()`s the worker when the running job's trust deadline passes
or the daemon's end of either socket closes, so a frozen or dead daemon cannot let a job run on.
The main thread never calls a job whose trust deadline passed before it could: it answers
`stopped`, NOT_STARTED_ERROR, and waits for the next one.
Two sockets, so that a job reaches the thread that runs it without a hop through another
thread (a thread wake-up and a GIL hand-over per job, when the control thread read everything).

A worker's spool file is reused from job to job (emptied after each): creating and deleting a file
per job cost the file system more than the rest of a no-op job (ext4 inode allocation, measured in
bench/run.py section a). It also stays open, with fd 1 and 2 on it, so a job that prints nothing
costs the worker four system calls besides its messages, where opening it and pointing fd 1 and 2
at it and back cost twelve more (0.31 -> 0.19 ms of worker CPU per no-op job). The done message
says when the job left a child process behind, which may still write to the file: the daemon then
gives the next job a new one, which the worker opens.

The worker imports as little as it can (the standard library's os, sys, signal, threading, math,
select, importlib and datetime, and `wire`): every daemon starts up to --concurrency of them, and
one that loaded multiprocessing, dataclasses and typing took 83 ms of CPU to start instead of
about 30. So the context reaches it as plain values and becomes a `PythonJobContext` here, and
`traceback` is imported when a job fails.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import select
import signal
import sys
import threading
import time
from datetime import datetime
from types import SimpleNamespace

from scheduler_daemon.executors.wire import (
    NOT_STARTED_ERROR,
    OUTPUT_TAIL_BYTES,
    Channel,
    error_line,
)

TYPE_CHECKING = False  # typing costs a worker 17 ms to import; mypy reads this as True
if TYPE_CHECKING:
    from typing import Any

# Defined here, where the worker exits with them, so that the worker never imports the daemon side.
WORKER_DEADLINE_EXIT = 75
"""Exit status of a worker that killed itself because the trust deadline passed."""
WORKER_ORPHANED_EXIT = 76
"""Exit status of a worker whose daemon went away."""


class PythonJobContext(SimpleNamespace):
    """What a python job receives: the JobContext fields (task_id, task_name, occurrence_id,
    run_id, scheduled_for, attempt, lease_token, idempotency_key, timeout, deadline, run_uuid,
    traceparent: the run span's W3C trace context with --otel, else None) as attributes, plus
    `cancelled`, the threading.Event that stop() sets."""


def job_message(job_id: int, target: str, ctx: object, spool: str) -> tuple[object, ...]:
    """The `run` message for a JobContext `ctx`: its fields as plain values (the due time as
    ISO 8601), which the worker turns back into a PythonJobContext."""
    fields = dict(vars(ctx))
    fields["scheduled_for"] = fields["scheduled_for"].isoformat()
    return ("run", job_id, target, fields, spool)


class _Running:
    """What the two threads share of the running job: its id, trust deadline and cancelled event,
    and the last cancel and extend the daemon sent, by job id. Those come on the control socket
    and the job on the job socket, so either may be read first: each names its job, and a job
    that starts takes a cancel or extend already sent for it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.job_id: int | None = None  # None while idle
        self.deadline: float | None = None
        self.cancelled = threading.Event()
        self.cancel_for: int | None = None
        self.extend_for: tuple[int | None, float] = (None, 0.0)
        # When the control thread looks at the deadline next unless woken (inf: not before a
        # message comes). A job whose deadline is not earlier starts without waking it.
        self.watching_until = math.inf
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)  # a full pipe already holds a wake-up

    def begin(self, job_id: int, deadline: float) -> threading.Event | None:
        """The main thread starts job `job_id`; returns its cancelled event, or None when its
        trust deadline (as extended) has passed: the job must not be called, and the control
        thread never sees it (a worker that refuses a job lives on)."""
        with self.lock:
            extended_job, extended_to = self.extend_for
            deadline = extended_to if extended_job == job_id else deadline
            if time.monotonic() >= deadline:
                return None
            self.job_id = job_id
            self.deadline = deadline
            self.cancelled = threading.Event()
            if self.cancel_for == job_id:
                self.cancelled.set()
            wake = self.deadline < self.watching_until
        if wake:
            with contextlib.suppress(BlockingIOError):
                os.write(self.wake_w, b"x")
        return self.cancelled

    def end(self) -> None:
        with self.lock:
            self.job_id = self.deadline = None

    def apply(self, message: tuple[Any, ...]) -> None:
        """A control message: ("cancel", job id) or ("extend", job id, deadline)."""
        with self.lock:
            if message[0] == "cancel":
                self.cancel_for = message[1]
                if self.job_id == message[1]:
                    self.cancelled.set()
            elif message[0] == "extend":
                self.extend_for = (message[1], message[2])
                if self.job_id == message[1]:
                    self.deadline = message[2]


def main(jobs_fd: int, control_fd: int) -> None:
    """Serve the jobs that come on the socket `jobs_fd` until the daemon closes its end; the
    control thread reads `control_fd`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ^C is for the daemon, which decides
    for fd in (jobs_fd, control_fd):  # a job's subprocesses must not keep the daemon's sockets
        os.set_inheritable(fd, False)
    jobs = Channel(jobs_fd)
    _, path, answer = _receive(jobs)
    sys.path[:] = path  # import jobs exactly as the daemon would
    if answer:  # the daemon waits for its workers to be up before it claims (warm)
        jobs.send(("ready",))
    running = _Running()
    control = threading.Thread(target=_control, args=(Channel(control_fd), running), daemon=True)
    control.start()
    spool_path, out = None, -1
    inherited = os.environ.get("TRACEPARENT")  # the daemon's own, as a shell job would see it
    traced = False  # the environment holds the last job's TRACEPARENT
    while True:
        _, job_id, target, fields, spool = _receive(jobs)  # read here: no hop through a thread
        cancelled = running.begin(job_id, fields["deadline"])
        if cancelled is None:  # its trust deadline passed: the daemon froze on the way
            jobs.send(("done", job_id, "stopped", NOT_STARTED_ERROR, b"", False))
            continue
        fields["scheduled_for"] = datetime.fromisoformat(fields["scheduled_for"])
        job_ctx = PythonJobContext(**fields, cancelled=cancelled)
        if spool != spool_path:  # the first job, or the last one left a child writing to it
            if out >= 0:
                os.close(out)
            out = os.open(spool, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            spool_path = spool
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(out, 1)  # fd 1 and 2 stay on the spool file between jobs: the worker
            os.dup2(out, 2)  # writes nothing of its own there but a crash, the job's to read
        traceparent = fields.get("traceparent")
        if traceparent or traced:  # tracing off (--otel): nothing to do
            traced = _trace_environment(traceparent, inherited)
        status, error = _run(target, job_ctx)
        tail = _take_tail(out)
        running.end()
        jobs.send(("done", job_id, status, error, tail, _has_children()))


def _trace_environment(traceparent: str | None, inherited: str | None) -> bool:
    """TRACEPARENT in the worker's environment for this job (and the processes it starts): its
    run span's when it has one, else what the worker was started with, so no job sees another's.
    Whether the environment now holds this job's."""
    wanted = traceparent or inherited
    if wanted is None:
        os.environ.pop("TRACEPARENT", None)
    else:
        os.environ["TRACEPARENT"] = wanted
    return bool(traceparent)


def _receive(channel: Channel) -> tuple[Any, ...]:
    """The next message; the worker exits when the daemon's end closed (the daemon died)."""
    try:
        message: tuple[Any, ...] = channel.recv()
    except (EOFError, OSError):
        os._exit(WORKER_ORPHANED_EXIT)
    return message


def _control(channel: Channel, running: _Running) -> None:
    """Applies cancel and extend messages, and exits the worker when the running job's trust
    deadline passes or the daemon's end of either socket closes. It sleeps until the deadline
    it last saw: a job that ended and a later one that started meanwhile change nothing it must
    do before then (each new job's deadline is later, unless extended), so a job costs it no
    wake-up at all; a job whose deadline is earlier wakes it through the pipe."""
    poller = select.poll()
    poller.register(channel.fd, select.POLLIN)
    poller.register(running.wake_r, select.POLLIN)
    while True:
        with running.lock:
            until = math.inf if running.deadline is None else running.deadline
            running.watching_until = until
        wait = None if until == math.inf else max(0.0, until - time.monotonic()) * 1000
        ready = [fd for fd, _ in poller.poll(wait)] if not channel.pending() else [channel.fd]
        if running.wake_r in ready:
            os.read(running.wake_r, 4096)
        if channel.fd in ready:
            running.apply(_receive(channel))
            while channel.pending():
                running.apply(_receive(channel))
        with running.lock:
            if running.deadline is not None and time.monotonic() >= running.deadline:
                os._exit(WORKER_DEADLINE_EXIT)


def _take_tail(out: int) -> bytes:
    """The last OUTPUT_TAIL_BYTES of the spool file `out`, which is emptied for the next job
    (its one offset, shared with fd 1 and 2, back to the start)."""
    size = os.fstat(out).st_size
    if not size:  # most jobs print nothing: one system call
        return b""
    tail = os.pread(out, OUTPUT_TAIL_BYTES, max(0, size - OUTPUT_TAIL_BYTES))
    os.ftruncate(out, 0)
    os.lseek(out, 0, os.SEEK_SET)
    return tail


def _has_children() -> bool:
    """Whether a process the job started is still there (running, or exited and not reaped):
    it holds the spool file open and may write to it after the job."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def resolve(target: str) -> Any:
    """The object `module:attribute.path` names, importing its module (an error raises)."""
    module_name, _, attribute = target.partition(":")
    found = importlib.import_module(module_name)
    for part in attribute.split("."):
        found = getattr(found, part)
    return found


def _run(target: str, ctx: PythonJobContext) -> tuple[str, str | None]:
    """Run one job (its output goes to fd 1 and 2, the spool file); ("success", None) or
    ("failed", error line)."""
    try:
        result = resolve(target)(ctx)
    except BaseException as exc:  # the job's failure is the run's failure, never the worker's
        return call_outcome(exc=exc)
    return call_outcome(result)


def call_outcome(result: object = None, exc: BaseException | None = None) -> tuple[str, str | None]:
    """What a job's call came to, as the worker and the in-process executor record it: its
    return value (printed) or the exception it raised (its traceback printed, less the frame
    that caught it), on sys.stdout and sys.stderr, which are the job's output; ("success",
    None) or ("failed", error line). A SystemExit of 0 or None is a success."""
    try:
        if exc is None:
            if result is not None:
                print(str(result)[-OUTPUT_TAIL_BYTES:])
            return "success", None
        if isinstance(exc, SystemExit):
            if exc.code in (None, 0):
                return "success", None
            return "failed", error_line(exc) if str(exc) else f"SystemExit: {exc.code}"
        import traceback  # here, not at the top: most workers never need it

        traceback.print_exception(
            type(exc), exc, exc.__traceback__.tb_next if exc.__traceback__ else None
        )
        return "failed", error_line(exc)
    except BaseException as failure:  # a return value whose str() raised
        if exc is not None:
            return "failed", error_line(exc)
        return call_outcome(exc=failure)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
