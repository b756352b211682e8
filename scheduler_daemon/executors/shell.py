"""The shell executor: runs `/bin/sh -c COMMAND` jobs through one long-lived watchdog process.

The daemon side only speaks JSON lines to the watchdog (scheduler_daemon.executors.watchdog), which
starts, times and kills the jobs; a reader thread turns its events into Outcomes, reads each job's
spool tail and sets `wake`. If the watchdog dies, its running jobs fail ("watchdog died"), their
process groups are killed from here, and the next start() brings up a new watchdog.
"""

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from scheduler_daemon.domain.status import OutcomeStatus
from scheduler_daemon.executors.base import (
    STOP_GRACE_SECONDS,
    FinishedJob,
    Job,
    JobContext,
    Outcome,
    SpoolDir,
    job_environment,
    peek_spool_tail,
    take_spool_tail,
)

WATCHDOG_DIED = "watchdog died"
WATCHDOG_MODULE = "scheduler_daemon.executors.watchdog"
_CLOSE_MARGIN_SECONDS = 2.0


class ShellJob:
    """One shell run, as seen from the daemon. `pgid` is known once the watchdog started it."""

    def __init__(self, job_id: int, run_id: int, watchdog: "_WatchdogProcess", spool: Path) -> None:
        self.job_id = job_id
        self.run_id = run_id
        self.pgid: int | None = None
        self.spool = spool
        self._watchdog = watchdog
        self._stop_reason: str | None = None
        self._outcome: Outcome | None = None
        self.done = threading.Event()  # set once the outcome is known

    def poll(self) -> Outcome | None:
        return self._outcome

    def stop(self, reason: str) -> None:
        if self._outcome is not None or self._stop_reason is not None:
            return
        self._stop_reason = reason
        self._watchdog.send({"op": "stop", "id": self.job_id})

    def live_output(self) -> str | None:
        if self._outcome is not None:
            return self._outcome.output_tail
        return peek_spool_tail(self.spool)

    def extend(self, deadline: float) -> None:
        if self._outcome is None:
            self._watchdog.send({"op": "extend", "id": self.job_id, "deadline": deadline})

    def finish(self, status: OutcomeStatus, code: int | None, error: str | None) -> Outcome:
        """Record the outcome (first call wins) from the watchdog's report."""
        if status == OutcomeStatus.STOPPED and not error:
            error = self._stop_reason or "stopped"
        if self._outcome is None:
            tail = take_spool_tail(self.spool)
            self._outcome = Outcome(status, exit_code=code, output_tail=tail, error=error or None)
        self.done.set()
        return self._outcome


class _WatchdogProcess:
    """One watchdog process, its pipes, and the reader thread that consumes its events."""

    def __init__(self, wake: threading.Event) -> None:
        self.wake = wake
        self.jobs: dict[int, ShellJob] = {}
        self.lock = threading.Lock()  # jobs and dead
        self.write_lock = threading.Lock()  # whole lines on stdin
        self.dead = False
        self.closing = False
        argv = [sys.executable, "-m", WATCHDOG_MODULE, "--parent", str(os.getpid())]
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,  # ^Z or a signal to the daemon's group must not reach it
            env=job_environment(),
        )
        self.stdin: IO[bytes] = self.process.stdin  # type: ignore[assignment]
        self.reader = threading.Thread(target=self._read, name="shell-watchdog-reader", daemon=True)
        self.reader.start()

    def send(self, command: dict[str, Any]) -> None:
        line = json.dumps(command, separators=(",", ":")).encode() + b"\n"
        if self.dead:
            return
        with self.write_lock:
            try:
                self.stdin.write(line)
                self.stdin.flush()
            except (OSError, ValueError):
                pass  # the reader sees the EOF and fails the jobs

    def add(self, job: ShellJob, command: dict[str, Any]) -> bool:
        with self.lock:
            if self.dead:
                return False
            self.jobs[job.job_id] = job
        self.send(command)
        return True

    def _read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        for raw in stdout:
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            self._handle(event)
        self._died()

    def _handle(self, event: dict[str, Any]) -> None:
        job_id = event.get("id")
        with self.lock:
            job = self.jobs.get(job_id) if isinstance(job_id, int) else None
        if job is None:
            return
        kind = event.get("event")
        if kind == "started":
            job.pgid = int(event["pgid"])
            return
        if kind == "exited":
            job.finish(OutcomeStatus(event["status"]), event["code"], event["error"])
        elif kind == "error":
            job.finish(OutcomeStatus.FAILED, None, str(event["error"]))
        else:
            return
        with self.lock:
            self.jobs.pop(job.job_id, None)
        self.wake.set()

    def _died(self) -> None:
        with self.lock:
            self.dead = True
            orphans = list(self.jobs.values())
            self.jobs.clear()
        with self.write_lock, contextlib.suppress(OSError):
            self.stdin.close()
        self.process.wait()
        for job in orphans:
            if job.pgid is not None:  # it may outlive the watchdog; nobody else will kill it
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(job.pgid, signal.SIGKILL)
            if self.closing:
                job.finish(OutcomeStatus.STOPPED, None, "executor closed")
            else:
                job.finish(OutcomeStatus.FAILED, None, WATCHDOG_DIED)
        if orphans:
            self.wake.set()

    def running(self) -> list[ShellJob]:
        with self.lock:
            return list(self.jobs.values())

    def close(self) -> None:
        """Stop every job gracefully, then EOF: the watchdog kills what is left and exits."""
        for job in self.running():
            job.stop("executor closed")
        limit = time.monotonic() + STOP_GRACE_SECONDS + _CLOSE_MARGIN_SECONDS
        for job in self.running():
            job.done.wait(max(0.0, limit - time.monotonic()))
        self.closing = True
        with self.lock:
            self.dead = True
        with self.write_lock, contextlib.suppress(OSError):
            self.stdin.close()
        self.reader.join(STOP_GRACE_SECONDS + _CLOSE_MARGIN_SECONDS)
        if self.reader.is_alive():
            self.process.kill()
            self.reader.join()


class ShellExecutor:
    """Starts shell jobs; brings the watchdog up lazily and again after it died."""

    kind = "shell"

    def __init__(self, wake: threading.Event, spool_dir: Path | None = None) -> None:
        self.wake = wake
        self.spool = SpoolDir(spool_dir, "shell")
        self._lock = threading.Lock()
        self._watchdog: _WatchdogProcess | None = None
        self._ids = itertools.count(1)
        self._closed = False

    def _current(self) -> _WatchdogProcess:
        with self._lock:
            if self._closed:
                raise RuntimeError("executor closed")
            if self._watchdog is None or self._watchdog.dead:
                self._watchdog = _WatchdogProcess(self.wake)
            return self._watchdog

    def start(self, ctx: JobContext, payload: Mapping[str, Any]) -> Job:
        command = payload.get("command")
        if not isinstance(command, str) or not command:
            return FinishedJob.failed(ctx.run_id, "payload has no 'command'")
        job_id = next(self._ids)
        spool = self.spool.file(f"shell-{ctx.run_id}-{job_id}.out")
        message = {
            "op": "start",
            "id": job_id,
            "command": command,
            "env": ctx.environment(),
            "spool": str(spool),
            "timeout": ctx.timeout,
            "deadline": ctx.deadline,
        }
        for _ in range(2):  # a watchdog found dead on the way gets one replacement
            try:
                watchdog = self._current()
            except (OSError, RuntimeError) as exc:
                return FinishedJob.failed(ctx.run_id, f"cannot start: {exc}")
            job = ShellJob(job_id, ctx.run_id, watchdog, spool)
            if watchdog.add(job, message):
                return job
        return FinishedJob.failed(ctx.run_id, WATCHDOG_DIED)

    @property
    def watchdog_pid(self) -> int | None:
        """The current watchdog's pid, if one is running (for diagnostics and tests)."""
        with self._lock:
            watchdog = self._watchdog
        return None if watchdog is None or watchdog.dead else watchdog.process.pid

    def close(self) -> None:
        with self._lock:
            self._closed = True
            watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            watchdog.close()
        self.spool.close()
