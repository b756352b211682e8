"""A python worker process: runs `module:function(ctx)` jobs one after another for the daemon.

Started as `python -m scheduler_daemon.executors.python_worker FD`, FD being its end of a socketpair
that carries `wire.Channel` messages. The main thread runs the jobs with fd 1 and 2 on the spool
file, and sends back the end of it with the result. A control thread is the only reader of the
socket: it queues `run` messages, applies `extend` and `cancel`, and `os._exit()`s the worker when
the running job's trust deadline passes or the daemon's end closes, so a frozen or dead daemon
cannot let a job run on.

A worker's spool file is reused from job to job (emptied after each): creating and deleting a file
per job cost the file system more than the rest of a no-op job (ext4 inode allocation, measured in
bench/run.py section a). It also stays open, with fd 1 and 2 on it, so a job that prints nothing
costs the worker four system calls besides its messages, where opening it and pointing fd 1 and 2
at it and back cost twelve more (0.31 -> 0.19 ms of worker CPU per no-op job). The done message
says when the job left a child process behind, which may still write to the file: the daemon then
gives the next job a new one, which the worker opens.

The worker imports as little as it can (the standard library's os, sys, signal, threading, queue,
select, importlib and datetime, and `wire`): every daemon starts up to --concurrency of them, and
one that loaded multiprocessing, dataclasses and typing took 83 ms of CPU to start instead of
about 30. So the context reaches it as plain values and becomes a `PythonJobContext` here, and
`traceback` is imported when a job fails.
"""

import importlib
import os
import queue
import select
import signal
import sys
import threading
import time
from datetime import datetime
from types import SimpleNamespace

from scheduler_daemon.executors.wire import OUTPUT_TAIL_BYTES, Channel, error_line

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
    run_id, scheduled_for, attempt, lease_token, idempotency_key, timeout, deadline) as
    attributes, plus `cancelled`, the threading.Event that stop() sets."""


def job_message(job_id: int, target: str, ctx: object, spool: str) -> tuple[object, ...]:
    """The `run` message for a JobContext `ctx`: its fields as plain values (the due time as
    ISO 8601), which the worker turns back into a PythonJobContext."""
    fields = dict(vars(ctx))
    fields["scheduled_for"] = fields["scheduled_for"].isoformat()
    return ("run", job_id, target, fields, spool)


class _Deadline:
    """The running job's trust deadline, shared by the two threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.value: float | None = None  # None while idle
        self.cancelled = threading.Event()


def main(fd: int) -> None:
    """Serve jobs on the socket `fd` until the daemon closes it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ^C is for the daemon, which decides
    os.set_inheritable(fd, False)  # a job's subprocesses must not keep the daemon's socket open
    channel = Channel(fd)
    hello = channel.recv()
    sys.path[:] = hello[1]  # import jobs exactly as the daemon would
    jobs: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
    deadline = _Deadline()
    control = threading.Thread(target=_control, args=(channel, jobs, deadline), daemon=True)
    control.start()
    spool_path, out = None, -1
    while True:
        _, job_id, target, fields, spool = jobs.get()
        fields["scheduled_for"] = datetime.fromisoformat(fields["scheduled_for"])
        job_ctx = PythonJobContext(**fields, cancelled=deadline.cancelled)
        if spool != spool_path:  # the first job, or the last one left a child writing to it
            if out >= 0:
                os.close(out)
            out = os.open(spool, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            spool_path = spool
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(out, 1)  # fd 1 and 2 stay on the spool file between jobs: the worker
            os.dup2(out, 2)  # writes nothing of its own there but a crash, the job's to read
        status, error = _run(target, job_ctx)
        tail = _take_tail(out)
        with deadline.lock:
            deadline.value = None
        channel.send(("done", job_id, status, error, tail, _has_children()))


def _control(
    channel: Channel, jobs: "queue.SimpleQueue[tuple[Any, ...]]", deadline: _Deadline
) -> None:
    poller = select.poll()
    poller.register(channel.fd, select.POLLIN)
    while True:
        with deadline.lock:
            value = deadline.value
        wait = None if value is None else max(0.0, value - time.monotonic())
        try:
            ready = channel.pending() or bool(poller.poll(None if wait is None else wait * 1000))
            message = channel.recv() if ready else None
        except (EOFError, OSError):
            os._exit(WORKER_ORPHANED_EXIT)
        if message is None:
            with deadline.lock:
                if deadline.value is not None and time.monotonic() >= deadline.value:
                    os._exit(WORKER_DEADLINE_EXIT)
            continue
        if message[0] == "run":
            with deadline.lock:
                deadline.value = message[3]["deadline"]
                deadline.cancelled.clear()
            jobs.put(message)
        elif message[0] == "cancel":
            deadline.cancelled.set()
        elif message[0] == "extend":
            with deadline.lock:
                if deadline.value is not None:
                    deadline.value = message[1]


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


def _resolve(target: str) -> "Any":
    module_name, _, attribute = target.partition(":")
    found = importlib.import_module(module_name)
    for part in attribute.split("."):
        found = getattr(found, part)
    return found


def _run(target: str, ctx: PythonJobContext) -> tuple[str, str | None]:
    """Run one job (its output goes to fd 1 and 2, the spool file); ("success", None) or
    ("failed", error line)."""
    try:
        result = _resolve(target)(ctx)
        if result is not None:
            print(str(result)[-OUTPUT_TAIL_BYTES:])
    except SystemExit as exc:
        if exc.code in (None, 0):
            return "success", None
        return "failed", error_line(exc) if str(exc) else f"SystemExit: {exc.code}"
    except BaseException as exc:  # the job's failure is the run's failure, never the worker's
        import traceback  # here, not at the top: most workers never need it

        # Leave out our own frame: the traceback starts at the job.
        traceback.print_exception(
            type(exc), exc, exc.__traceback__.tb_next if exc.__traceback__ else None
        )
        return "failed", error_line(exc)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return "success", None


if __name__ == "__main__":
    main(int(sys.argv[1]))
