"""The in-process executor: runs `module:function(ctx)` jobs inside the daemon, a plain function
on a pool of threads, a coroutine function on one event-loop thread, with no worker process.

The function is called as a python worker calls it (`function(ctx)`, a `PythonJobContext`,
`ctx.cancelled` set on a stop request; python_worker.call_outcome decides and prints the result),
and imported on the pool thread that starts it. What it prints goes to its own bounded tail
(executors/capture.py). A thread cannot be killed, so stopping is cooperative: a stop, a
timeout or the end of a drain sets `ctx.cancelled` and cancels a coroutine's task, and the job
holds its slot (it polls None, its lease is renewed) until it returns, with the stop's outcome.
One monitor thread runs the timers (timer.CooperativeTimers) and reports to the daemon
(`on_stuck`, `on_untrusted`), which decides to exit: a job not returned `stop_grace` seconds
after it was asked, or a job whose trust deadline passed. Design: docs/adr/0009.
"""

import asyncio
import contextlib
import inspect
import queue
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler_daemon.domain.status import OutcomeStatus
from scheduler_daemon.executors import capture
from scheduler_daemon.executors.base import (
    FinishedJob,
    Job,
    JobContext,
    Outcome,
    OwnedJob,
    decode_tail,
)
from scheduler_daemon.executors.python_worker import PythonJobContext, call_outcome, resolve
from scheduler_daemon.executors.timer import CooperativeTimers

_TARGET = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
ABANDONED_ERROR = "shutdown: in-process job still running at exit (it ends with the process)"
_CLOSE_JOIN_SECONDS = 1.0


@dataclass(eq=False)
class InProcessJob(OwnedJob):
    """One in-process run, as seen from the daemon."""

    run_id: int
    target: str
    ctx: PythonJobContext
    timers: CooperativeTimers  # read and changed under the executor's lock
    executor: "InProcessExecutor"
    tail: capture.Tail = field(default_factory=capture.Tail)
    task: "asyncio.Task[None] | None" = None  # a coroutine's, once created on the loop
    outcome: Outcome | None = None
    ids: dict[str, int] = field(default_factory=dict)  # for log lines

    def running_output(self) -> str | None:
        return self.tail.text()

    @property
    def stuck(self) -> bool:
        """Asked to stop, and not returned within the stop grace: left to a takeover."""
        return self.timers.stuck and self.outcome is None


class InProcessExecutor:
    """Runs in-process jobs; owns the pool threads, the event-loop thread and the monitor."""

    kind = "inprocess"

    def __init__(
        self,
        wake: threading.Event,
        *,
        threads: int,
        stop_grace: float,
        on_stuck: Callable[[InProcessJob], None] = lambda _job: None,
        on_untrusted: Callable[[InProcessJob], None] = lambda _job: None,
    ) -> None:
        self.wake = wake
        self.threads = threads
        self.stop_grace = stop_grace
        self.on_stuck = on_stuck
        self.on_untrusted = on_untrusted
        self._lock = threading.Condition()
        self._running: dict[int, InProcessJob] = {}  # by run id
        self._work: queue.SimpleQueue[InProcessJob | None] = queue.SimpleQueue()
        self._pool: list[threading.Thread] = []
        self._idle = 0  # pool threads waiting for work
        self._queued = 0  # jobs put on the queue and not yet taken
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._monitor: threading.Thread | None = None
        self._closed = False

    # -- the Executor protocol ------------------------------------------------------------------

    def start(self, ctx: JobContext, payload: Mapping[str, Any]) -> Job:
        target = payload.get("target")
        if not isinstance(target, str) or not _TARGET.fullmatch(target):
            error = f"payload 'target' must be 'module:function', got {target!r}"
            return FinishedJob.failed(ctx.run_id, error)
        now = time.monotonic()
        job = InProcessJob(
            run_id=ctx.run_id,
            target=target,
            ctx=PythonJobContext(**vars(ctx), cancelled=threading.Event()),
            timers=CooperativeTimers(
                now, deadline=ctx.deadline, timeout=ctx.timeout, grace=self.stop_grace
            ),
            executor=self,
            ids={"run_id": ctx.run_id, "occurrence_id": ctx.occurrence_id, "task_id": ctx.task_id},
        )
        with self._lock:
            if self._closed:
                return FinishedJob.failed(ctx.run_id, "executor closed")
            capture.install()
            self._running[job.run_id] = job
            self._start_threads()
            self._lock.notify_all()  # the monitor looks at the new job's timers
        self._work.put(job)
        return job

    def close(self) -> None:
        """Asks every running job to stop and stops the threads that are free; a job that does
        not return within a moment is left running (it ends with the process)."""
        with self._lock:
            self._closed = True
            running = list(self._running.values())
            self._lock.notify_all()
        for job in running:
            self.stop_job(job, "executor closed")
        for _ in self._pool:
            self._work.put(None)
        limit = time.monotonic() + _CLOSE_JOIN_SECONDS
        for thread in self._pool:
            thread.join(max(0.0, limit - time.monotonic()))
        if self._loop is not None and not self.running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        if not self.running():
            capture.uninstall()

    # -- per-job requests and the daemon's questions --------------------------------------------

    def stop_job(self, job: InProcessJob, reason: str) -> None:
        with self._lock:
            if job.outcome is not None or not job.timers.stop(time.monotonic(), reason):
                return
            self._lock.notify_all()  # the stop grace starts
        self._ask_to_stop(job)

    def extend_job(self, job: InProcessJob, deadline: float) -> None:
        with self._lock:
            job.timers.extend(deadline)

    def running(self) -> list[InProcessJob]:
        """The jobs that have not returned."""
        with self._lock:
            return list(self._running.values())

    def abandon(self) -> list[InProcessJob]:
        """At the end of a drain: every job still running and not stuck is asked to stop and
        ends now `stopped` (ABANDONED_ERROR), to be recorded interrupted before the process
        exits; its thread runs on until then. Returns those jobs."""
        abandoned = []
        for job in self.running():
            if job.stuck:
                continue  # left to the takeover, as the exit it caused says
            self.stop_job(job, ABANDONED_ERROR)
            with self._lock:
                if job.outcome is None:
                    job.outcome = Outcome(
                        OutcomeStatus.STOPPED, output_tail=job.tail.text(), error=ABANDONED_ERROR
                    )
                    abandoned.append(job)
        return abandoned

    # -- the pool threads -----------------------------------------------------------------------

    def _start_threads(self) -> None:
        """The monitor on the first job; a pool thread more when the jobs waiting for one
        outnumber the threads waiting for a job, up to `threads` (under the lock)."""
        if self._monitor is None:
            self._monitor = threading.Thread(
                target=self._watch, name="inprocess-monitor", daemon=True
            )
            self._monitor.start()
        self._queued += 1
        if self._idle < self._queued and len(self._pool) < self.threads:
            thread = threading.Thread(
                target=self._serve, name=f"inprocess-{len(self._pool) + 1}", daemon=True
            )
            self._pool.append(thread)
            thread.start()

    def _serve(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            job = self._work.get()
            with self._lock:
                self._idle -= 1
                self._queued -= job is not None
            if job is None:
                return
            self._call(job)

    def _call(self, job: InProcessJob) -> None:
        """Imports the target and calls it with the job's tail as this thread's output; a
        coroutine function goes to the event loop instead."""
        token = capture.CURRENT.set(job.tail)
        try:
            try:
                function = resolve(job.target)
                if inspect.iscoroutinefunction(function):
                    self._submit(job, function)
                    return
                result = function(job.ctx)
            except BaseException as exc:  # the job's failure is the run's, never the daemon's
                status, error = call_outcome(exc=exc)
            else:
                status, error = call_outcome(result)
        finally:
            capture.CURRENT.reset(token)
        self._finish(job, status, error)

    # -- the event-loop thread ------------------------------------------------------------------

    def _submit(self, job: InProcessJob, function: Callable[..., Any]) -> None:
        loop = self._event_loop()
        loop.call_soon_threadsafe(self._create_task, job, function)

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._loop_thread = threading.Thread(
                    target=self._loop.run_forever, name="inprocess-loop", daemon=True
                )
                self._loop_thread.start()
            return self._loop

    def _create_task(self, job: InProcessJob, function: Callable[..., Any]) -> None:
        """On the loop: the job's task; cancelled at once if it was asked to stop meanwhile."""
        assert self._loop is not None
        task = self._loop.create_task(self._await(job, function), name=f"run-{job.run_id}")
        with self._lock:
            job.task = task
            cancel = job.timers.reason is not None
        if cancel:
            task.cancel()

    async def _await(self, job: InProcessJob, function: Callable[..., Any]) -> None:
        capture.CURRENT.set(job.tail)  # this task's own context, and the tasks it creates
        try:
            result = await function(job.ctx)
        except BaseException as exc:  # CancelledError too: a stop's reason decides below
            status, error = call_outcome(exc=exc)
        else:
            status, error = call_outcome(result)
        self._finish(job, status, error)

    # -- stopping, timers and the end -----------------------------------------------------------

    def _ask_to_stop(self, job: InProcessJob) -> None:
        job.ctx.cancelled.set()
        with self._lock:
            task, loop = job.task, self._loop
        if task is not None and loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to cancel
                loop.call_soon_threadsafe(task.cancel)

    def _watch(self) -> None:
        """The monitor: fires the jobs' timers, asks, and reports what the daemon must act on."""
        while True:
            with self._lock:
                if self._closed and not self._running:
                    return
                now = time.monotonic()
                events = self._due(now)
                if not events:
                    wakes = [
                        at
                        for job in self._running.values()
                        if job.outcome is None and (at := job.timers.wake_at()) is not None
                    ]
                    self._lock.wait(max(0.0, min(wakes) - now) if wakes else None)
                    continue
            for job, event in events:
                self._act(job, event)

    def _due(self, now: float) -> list[tuple[InProcessJob, str]]:
        """The timer events due at `now` (under the lock); an abandoned job has none."""
        events = []
        for job in self._running.values():
            while job.outcome is None and (event := job.timers.fire(now)) is not None:
                events.append((job, event))
        return events

    def _act(self, job: InProcessJob, event: str) -> None:
        if event == "stop":
            self._ask_to_stop(job)
        elif event == "stuck":
            self.on_stuck(job)
        elif event == "untrusted":
            self.on_untrusted(job)

    def _finish(self, job: InProcessJob, status: str, error: str | None) -> None:
        with self._lock:
            self._running.pop(job.run_id, None)
            reason = job.timers.reason
            if reason is not None:  # asked to stop: the request's outcome, whatever it returned
                status, error = reason.status, reason.error
            if job.outcome is None:
                tail = decode_tail(job.tail.text().encode("utf-8", "replace"))
                job.outcome = Outcome(OutcomeStatus(status), output_tail=tail, error=error)
            self._lock.notify_all()
        self.wake.set()
