"""The runs this process holds a lease on, shared by the loop and the lease keeper thread."""

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NamedTuple

from scheduler_daemon.domain.trace import RunTrace


class Lease(NamedTuple):
    """What a renewal matches: the run, its occurrence and the token it was launched with."""

    run_id: int
    occurrence_id: int
    token: int


@dataclass
class HeldRun:
    """A run this process launched and has not yet finished or lost."""

    run_id: int
    token: int
    occurrence_id: int
    task_id: int
    job: Any  # an executors.base.Job; typed loosely so the domain stays free of executors
    fenced: bool = False
    completing: bool = False
    cancel_requested: bool = False  # the owner was asked to stop the job; it keeps renewing
    retry_at: float = 0.0  # monotonic time before which a deferred completion is not retried
    outcome: Any = None  # the job's Outcome once it finished, kept until it is written
    executor: str = ""  # the executor kind, a bounded metric label
    launched_at: float = 0.0  # time.monotonic() when the job started, for the duration metric
    finished_after: float = 0.0  # seconds from launch until the outcome was seen
    recorded_status: str = ""  # the run status the completer wrote
    trusted_until: float = 0.0  # the trust deadline its own last renewal set (0: none yet)
    requeue_delay: timedelta = timedelta(0)  # an interruption's wait in the queue (ADR 0009)
    output_written: str = ""  # the output the keeper last wrote live for a follower (ADR 0014)
    trace: RunTrace | None = None  # its span with --otel; None when tracing is off

    def renewed(self, deadline: float) -> None:
        """This run's own renewal succeeded: its job may run until `deadline`, the trust
        deadline (monotonic) of the statement that renewed it. Only ever called for the run
        that statement renewed, so a row someone else holds lets only its own job's deadline
        run out; it never moves a deadline back."""
        if deadline > self.trusted_until:
            self.trusted_until = deadline
            self.job.extend(deadline)


class HeldRuns:
    """Thread-safe map of run id → HeldRun."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[int, HeldRun] = {}

    def add(self, run: HeldRun) -> None:
        with self._lock:
            self._runs[run.run_id] = run

    def remove(self, run_id: int) -> None:
        with self._lock:
            self._runs.pop(run_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._runs)

    def __iter__(self) -> Iterator[HeldRun]:
        with self._lock:
            return iter(list(self._runs.values()))

    def ends(self) -> tuple[int, int]:
        """(jobs ended and not yet written, jobs still running)."""
        with self._lock:
            runs = list(self._runs.values())
        ended = sum(1 for r in runs if r.outcome is not None or r.job.poll() is not None)
        return ended, len(runs) - ended

    def leases(self) -> list[Lease]:
        """The leases to renew: held, not fenced, not being completed."""
        with self._lock:
            return [
                Lease(r.run_id, r.occurrence_id, r.token)
                for r in self._runs.values()
                if not r.fenced and not r.completing
            ]

    def get(self, run_id: int) -> HeldRun | None:
        with self._lock:
            return self._runs.get(run_id)
