"""The daemon's way out: on a stop it drains (gives back its claims, lets running jobs finish up
to --drain-timeout, stops the rest and records them interrupted; an in-process job that ignores
the stop is recorded just before the exit, queued again after twice the poll interval, and one
stuck past its stop grace is left to a takeover); on a schema it cannot work with, or when its
lease keeper failed (ADR 0005), it abandons its jobs without writing. Every shutdown step logs
what it meets and goes on."""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog
from psycopg_pool import ConnectionPool

from scheduler_daemon.domain.held import HeldRun, HeldRuns
from scheduler_daemon.executors.inprocess import InProcessExecutor, InProcessJob
from scheduler_daemon.runtime.health import LoopProgress, Readiness
from scheduler_daemon.runtime.metrics import Metrics
from scheduler_daemon.runtime.notify import Notifier
from scheduler_daemon.services.completer import Completer
from scheduler_daemon.settings import DaemonSettings
from scheduler_daemon.storage import occurrence_store
from scheduler_daemon.storage.database import first_line, transaction

log = structlog.get_logger()
STOP_WAIT_SECONDS = 5.0
"""How long, after the drain timeout, the stopped jobs have to be recorded interrupted."""


@dataclass(eq=False, kw_only=True)
class Drain:
    """`draining` is what the lease keeper's heartbeat reports as `stopping`."""

    instance_id: str
    settings: DaemonSettings
    held: HeldRuns
    wake: threading.Event
    progress: LoopProgress
    readiness: Readiness
    metrics: Metrics
    notifier: Notifier
    draining: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.log = log.bind(instance_id=self.instance_id)

    def drain(self, pool: ConnectionPool, completer: Completer, hard_stop: threading.Event) -> None:
        """Stop claiming; let running jobs finish up to the drain timeout; then stop them and
        record them interrupted (their occurrences go back to the queue). `hard_stop` ends the
        wait for the jobs to finish."""
        self.draining = True
        self.readiness.state = "draining"
        self.metrics.draining.set(1)
        self.notifier.stopping(f"draining: {len(self.held)} run(s) to finish")
        self.log.info(
            "drain_started",
            running=len(self.held),
            drain_timeout_seconds=self.settings.drain_timeout.total_seconds(),
        )
        self.safely(lambda: self._release_claims(pool))
        deadline = time.monotonic() + self.settings.drain_timeout.total_seconds()
        while self._unwritten() and time.monotonic() < deadline and not hard_stop.is_set():
            self._step(completer)
        for run in self.held:
            if run.outcome is None:
                run.job.stop("shutdown: drain timeout passed")
                self.log.warning(
                    "run_interrupted_by_shutdown",
                    run_id=run.run_id,
                    occurrence_id=run.occurrence_id,
                    task_id=run.task_id,
                )
        stop_deadline = time.monotonic() + STOP_WAIT_SECONDS
        while self._unwritten() and time.monotonic() < stop_deadline:
            self._step(completer)

    def end_in_process(self, executor: InProcessExecutor, completer: Completer) -> None:
        """The drain's last write, just before the process exits: the in-process jobs still
        running (their threads end with the process) are recorded interrupted, and their
        occurrences queued again no earlier than twice the poll interval later (database
        clock), so no retry starts beside them while the process exits. A job stuck past its
        stop grace is not written: its run is taken over at its takeover point (exit 8)."""
        abandoned = {job.run_id for job in executor.abandon()}
        delay = 2 * self.settings.poll_interval
        for run in self.held:
            if run.run_id in abandoned:
                run.requeue_delay = delay
                self.log.warning(
                    "run_interrupted_in_process_at_exit",
                    requeue_delay_seconds=delay.total_seconds(),
                    run_id=run.run_id,
                    occurrence_id=run.occurrence_id,
                    task_id=run.task_id,
                )
        stop_deadline = time.monotonic() + STOP_WAIT_SECONDS
        while any(r.run_id in abandoned for r in self.held) and time.monotonic() < stop_deadline:
            self._step(completer)

    def _unwritten(self) -> bool:
        """Whether a held run is still to be written: any but an in-process job stuck past its
        stop grace, whose run is left to a takeover."""
        return any(not _left_to_takeover(run) for run in self.held)

    def abandon(
        self,
        reason: str = "the schema is not compatible with this build",
        *,
        event: str = "run_abandoned_schema_incompatible",
        state: str = "refused: the schema is not compatible with this build",
    ) -> None:
        """Stops every job without recording anything, and waits up to STOP_WAIT_SECONDS for
        them to be gone; their leases run out and a peer takes the runs over."""
        self.readiness.state = state
        for run in self.held:
            run.job.stop(reason)
            if run.trace is not None:  # its outcome is left to a takeover: the span ends here
                run.trace.end("abandoned", reason)
            self.log.warning(
                event, run_id=run.run_id, occurrence_id=run.occurrence_id, task_id=run.task_id
            )
        deadline = time.monotonic() + STOP_WAIT_SECONDS
        while any(run.job.poll() is None for run in self.held) and time.monotonic() < deadline:
            self.progress.tick()
            time.sleep(0.05)  # the wake event may stay set: no busy wait

    def _step(self, completer: Completer) -> None:
        self.safely(lambda: self.metrics.record_completion(completer.run_once()))
        self.progress.tick()
        self.wake.wait(0.1)
        self.wake.clear()

    def _release_claims(self, pool: ConnectionPool) -> None:
        with transaction(pool) as tx:
            released = occurrence_store.release_claims(tx.conn, self.instance_id)
        if released:
            self.log.info("claims_released", count=released)

    def safely(self, step: Callable[[], object]) -> None:
        """A shutdown step: whatever it meets is one line, and the shutdown goes on."""
        try:
            step()
        except Exception as exc:
            self.log.warning("shutdown_step_failed", error=first_line(exc))


def _left_to_takeover(run: HeldRun) -> bool:
    return isinstance(run.job, InProcessJob) and run.job.stuck
