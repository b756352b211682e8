"""The python executor: runs `module:function(ctx)` jobs in a small pool of reusable workers.

Workers are `python -m scheduler_daemon.executors.python_worker` processes, each in its own session,
talking `wire.Channel` messages over two socketpairs (jobs, and their cancels and extends); they
are started on demand, or ahead by `warm`, and kept idle for reuse (at most `max_idle`). A job
that raised leaves its worker in the pool; a job that must be stopped (stop, timeout, trust
deadline) takes its worker's process group down with it. One monitor thread waits on every busy
worker's job socket (EOF means it died) and runs the timers.
Each worker has a spool file of its own, reused from job to job; the worker sends the end of
the output with the result, and the file is read here only when the worker died.
"""

import contextlib
import itertools
import multiprocessing.connection
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler_daemon.domain.status import OutcomeStatus
from scheduler_daemon.executors.base import (
    STOP_GRACE_SECONDS,
    FinishedJob,
    Job,
    JobContext,
    Outcome,
    OwnedJob,
    SpoolDir,
    decode_tail,
    job_environment,
    peek_spool_tail,
    take_spool_tail,
)
from scheduler_daemon.executors.python_worker import WORKER_DEADLINE_EXIT, job_message
from scheduler_daemon.executors.timer import DEADLINE_ERROR, JobTimers
from scheduler_daemon.executors.wire import Channel

WORKER_MODULE = "scheduler_daemon.executors.python_worker"
_TARGET = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
_CLOSE_MARGIN_SECONDS = 2.0
WARM_TIMEOUT_SECONDS = 5.0


class _Worker:
    """One worker process, in its own session, our ends of its job and control sockets, and its
    spool file."""

    def __init__(self, spool: SpoolDir, serial: int, *, answer: bool = False) -> None:
        """`answer`: the worker says ("ready",) once it is up, for `ready()` to read."""
        jobs, their_jobs = socket.socketpair()
        control, their_control = socket.socketpair()
        with their_jobs, their_control:
            fds = (their_jobs.fileno(), their_control.fileno())
            self.process = subprocess.Popen(
                [sys.executable, "-m", WORKER_MODULE, *map(str, fds)],
                pass_fds=fds,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # stop kills the job's own subprocesses with it
                env=job_environment(),
            )
        self.conn = Channel(jobs.detach())  # run and done messages; the monitor reads it
        self.control = Channel(control.detach())  # cancel and extend, written only
        self.send_lock = threading.Lock()
        self._spool = spool
        self._serial = serial
        self._generation = 0
        self.spool = spool.file(f"python-{serial}-0.out")
        self.send(("hello", sys.path, answer))

    def ready(self, timeout: float) -> bool:
        """Whether the worker said it is up within `timeout` seconds (only asked by `warm`,
        before any job: nothing else reads the socket then)."""
        try:
            return bool(
                multiprocessing.connection.wait([self.conn.fd], timeout)
                and self.conn.recv() == ("ready",)
            )
        except (EOFError, OSError):
            return False

    def new_spool(self) -> None:
        """Gives the next job a new spool file: a process the last job started may still write
        to this one (it keeps writing to the deleted file, as to any job's)."""
        self.spool.unlink(missing_ok=True)
        self._generation += 1
        self.spool = self._spool.file(f"python-{self._serial}-{self._generation}.out")

    def send(self, message: tuple[Any, ...], *, control: bool = False) -> None:
        with self.send_lock, contextlib.suppress(OSError):
            (self.control if control else self.conn).send(message)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def discard(self, *, keep_spool: bool = False) -> None:
        """Kill (if needed), reap, and delete the spool file unless the caller reads it."""
        self.conn.close()
        self.control.close()
        if self.process.poll() is None:
            self.kill()
        self.process.wait()
        if not keep_spool:
            self.spool.unlink(missing_ok=True)


@dataclass(eq=False)
class PythonJob(OwnedJob):
    """One python run, as seen from the daemon."""

    run_id: int
    job_id: int
    executor: "PythonExecutor"
    worker: _Worker | None
    spool: Path
    timers: JobTimers  # read and changed under the executor's lock
    outcome: Outcome | None = None

    def running_output(self) -> str | None:
        return peek_spool_tail(self.spool)


class PythonExecutor:
    """Starts python jobs in pooled workers; owns the monitor thread."""

    kind = "python"

    def __init__(
        self, wake: threading.Event, spool_dir: Path | None = None, max_idle: int = 4
    ) -> None:
        self.wake = wake
        self.spool = SpoolDir(spool_dir, "python")
        self.max_idle = max_idle
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._busy: dict[int, PythonJob] = {}  # by job id
        self._ids = itertools.count(1)
        self._serials = itertools.count(1)
        self._closed = False
        # The monitor's wake-up pipe, and whether a poke is in it that the monitor has not yet
        # acted on: pokes in between change nothing it is about to read, so they write nothing.
        self._poked = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._monitor: threading.Thread | None = None

    # -- the Executor protocol ------------------------------------------------------------------

    def start(self, ctx: JobContext, payload: Mapping[str, Any]) -> Job:
        target = payload.get("target")
        if not isinstance(target, str) or not _TARGET.fullmatch(target):
            error = f"payload 'target' must be 'module:function', got {target!r}"
            return FinishedJob.failed(ctx.run_id, error)
        with self._lock:
            if self._closed:
                return FinishedJob.failed(ctx.run_id, "executor closed")
            worker = self._idle.pop() if self._idle else None
            while worker is not None and worker.process.poll() is not None:
                worker.discard()  # died while idle (OOM killer, operator)
                worker = self._idle.pop() if self._idle else None
            if self._monitor is None:
                self._monitor = threading.Thread(
                    target=self._watch, name="python-executor-monitor", daemon=True
                )
                self._monitor.start()
        try:
            worker = worker or _Worker(self.spool, next(self._serials))
        except OSError as exc:
            return FinishedJob.failed(ctx.run_id, f"cannot start worker: {exc}")
        job_id = next(self._ids)
        job = PythonJob(
            run_id=ctx.run_id,
            job_id=job_id,
            executor=self,
            worker=worker,
            spool=worker.spool,
            timers=JobTimers(time.monotonic(), deadline=ctx.deadline, timeout=ctx.timeout),
        )
        with self._lock:
            self._busy[job_id] = job
        worker.send(job_message(job_id, target, ctx, str(job.spool)))
        self._poke()
        return job

    def close(self) -> None:
        with self._lock:
            self._closed = True
            jobs = list(self._busy.values())
            monitor = self._monitor
        for job in jobs:
            self.stop_job(job, "executor closed")
        self._poke()  # an idle monitor learns it is closed
        if monitor is not None:
            # The stop grace kills what does not return; the monitor reaps it and then exits.
            monitor.join(STOP_GRACE_SECONDS + _CLOSE_MARGIN_SECONDS)
            if monitor.is_alive():
                with self._lock:
                    workers = [job.worker for job in self._busy.values() if job.worker]
                for worker in workers:
                    worker.kill()
                self._poke()
                monitor.join()
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.discard()
        os.close(self._wake_r)
        os.close(self._wake_w)
        self.spool.close()

    def warm(self, count: int, timeout: float = WARM_TIMEOUT_SECONDS) -> None:
        """Starts idle workers now, up to `count` (and the idle limit), and waits until they are
        up (`timeout` at most): the first jobs then start on running workers, and a fleet
        started at once does not start its first jobs while its workers are still starting (a
        worker takes about 30 ms of CPU to start). One that does not come up is discarded."""
        with self._lock:
            missing = min(count, self.max_idle) - len(self._idle) - len(self._busy)
        started = []
        for _ in range(missing):
            try:
                started.append(_Worker(self.spool, next(self._serials), answer=True))
            except OSError:
                break  # the jobs start them on demand, and say why if they cannot
        deadline = time.monotonic() + timeout
        for worker in started:
            up = worker.ready(max(0.0, deadline - time.monotonic()))
            with self._lock:
                if up and not self._closed:
                    self._idle.append(worker)
                    continue
            worker.discard()

    # -- per-job requests -----------------------------------------------------------------------

    def stop_job(self, job: PythonJob, reason: str) -> None:
        with self._lock:
            if job.outcome is not None or job.worker is None:
                return
            if not job.timers.stop(time.monotonic(), reason):
                return
            worker = job.worker
        worker.send(("cancel", job.job_id), control=True)  # it may return within the grace
        self._poke()

    def extend_job(self, job: PythonJob, deadline: float) -> None:
        with self._lock:
            if job.outcome is not None or job.worker is None:
                return
            job.timers.extend(deadline)
            worker = job.worker
        worker.send(("extend", job.job_id, deadline), control=True)
        self._poke()

    # -- the monitor thread ---------------------------------------------------------------------

    def _poke(self) -> None:
        """Wakes the monitor to read the busy jobs and their timers again: once for all the
        changes made before it reads (a batch of starts costs it one wake-up, not one each)."""
        with self._lock:
            if self._poked:
                return
            self._poked = True
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"x")

    def _watch(self) -> None:
        while True:
            with self._lock:
                if self._closed and not self._busy:
                    return
                self._poked = False  # what a poke says from here on is read below or next time
                busy = [job for job in self._busy.values() if job.worker is not None]
            waitables: list[Any] = [self._wake_r]
            for job in busy:
                assert job.worker is not None
                waitables.append(job.worker.conn)  # EOF when the worker dies
            timer = self._fire_timers(busy)
            timeout = None if timer is None else max(0.0, timer - time.monotonic())
            # A message already read into a channel's buffer is not seen by polling its socket.
            buffered = [job.worker.conn for job in busy if job.worker and job.worker.conn.pending()]
            ready = buffered or multiprocessing.connection.wait(waitables, timeout)
            if self._wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_r, 4096)
            for job in busy:
                assert job.worker is not None
                if job.worker.conn in ready:
                    self._receive(job)

    def _fire_timers(self, busy: list[PythonJob]) -> float | None:
        """Kill the workers whose job ran out of time; return the next time to look again."""
        now = time.monotonic()
        times: list[float] = []
        for job in busy:
            with self._lock:
                worker = job.worker
                if worker is None:
                    continue
                if job.timers.fire(now) is None:
                    wake = job.timers.wake_at()
                    if wake is not None:
                        times.append(wake)
                    continue
            worker.kill()
        return min(times) if times else None

    def _receive(self, job: PythonJob) -> None:
        assert job.worker is not None
        try:
            message = job.worker.conn.recv()
        except (EOFError, OSError):
            self._worker_died(job)
            return
        _, _, sent_status, error, tail, lingering = message
        status = OutcomeStatus(sent_status)  # the worker speaks plain strings (os and marshal only)
        if lingering:
            job.worker.new_spool()
        with self._lock:
            reason = job.timers.reason
            worker, job.worker = job.worker, None
            self._busy.pop(job.job_id, None)
            keep = not job.timers.killed and not self._closed and len(self._idle) < self.max_idle
            if keep:
                self._idle.append(worker)
        if not keep:
            worker.discard()
        if reason is not None:
            status, error = reason
        self._finish(job, Outcome(status, output_tail=decode_tail(tail), error=error))

    def _worker_died(self, job: PythonJob) -> None:
        assert job.worker is not None
        job.worker.discard(keep_spool=True)  # its job's output, read below
        code = job.worker.process.returncode
        with self._lock:
            reason = job.timers.reason
            job.worker = None
            self._busy.pop(job.job_id, None)
        if reason is not None:
            status, error = reason
        elif code == WORKER_DEADLINE_EXIT:
            status, error = OutcomeStatus.STOPPED, DEADLINE_ERROR
        elif code is not None and code < 0:
            status, error = OutcomeStatus.FAILED, f"worker died: killed by signal {-code}"
        else:
            status, error = OutcomeStatus.FAILED, f"worker died: exit code {code}"
        tail = take_spool_tail(job.spool)
        self._finish(job, Outcome(status, exit_code=code, output_tail=tail, error=error))

    def _finish(self, job: PythonJob, outcome: Outcome) -> None:
        with self._lock:
            if job.outcome is None:
                job.outcome = outcome
        self.wake.set()
