"""The daemon's main loop: each pass reconciles when due, writes finished outcomes, dispatches
when a task is due and claims when there may be something to claim, then sleeps until woken or
due. When is the pacing's to say (runtime/pacing.py); every step is supervised (a surprise is
logged and counted, one that keeps coming ends the loop with EXIT_FAILED_PASSES), and so are the
side threads (ADR 0005): a failed lease keeper ends the loop with EXIT_LEASE_KEEPER_FAILED before
it claims again; a dead waker or endpoint is restarted, a failed prune is counted and passed."""

import threading
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import TypeVar

import psycopg
import structlog
from psycopg_pool import ConnectionPool

from scheduler_daemon.domain.held import HeldRuns
from scheduler_daemon.runtime.health import LoopProgress
from scheduler_daemon.runtime.metrics import Metrics
from scheduler_daemon.runtime.notify import Notifier
from scheduler_daemon.runtime.pacing import LockedSpells, Pacing
from scheduler_daemon.runtime.registration import Registration
from scheduler_daemon.runtime.root import Services
from scheduler_daemon.runtime.supervision import (
    EXIT_FAILED_PASSES,
    EXIT_LEASE_KEEPER_FAILED,
    SideThreads,
    Supervisor,
)
from scheduler_daemon.settings import DaemonSettings
from scheduler_daemon.storage import fleet_store, occurrence_store
from scheduler_daemon.storage.database import first_line, transaction
from scheduler_daemon.storage.error import DatabaseUnavailable

log = structlog.get_logger()
T = TypeVar("T")


@dataclass(eq=False)
class Loop:
    services: Services
    pool: ConnectionPool
    _: KW_ONLY
    settings: DaemonSettings
    pacing: Pacing
    held: HeldRuns
    wake: threading.Event
    registration: Registration
    supervisor: Supervisor
    side: SideThreads
    metrics: Metrics
    progress: LoopProgress
    notifier: Notifier

    def __post_init__(self) -> None:
        self.log = log.bind(instance_id=self.registration.instance_id)

    def run(self, stop: threading.Event) -> int:
        """Passes until `stop`, a refusal of the schema, or supervision gives up (its code)."""
        pacing = self.pacing
        while not stop.is_set():
            if (problem := self.side.keeper_problem()) is not None:
                return self._keeper_failed(problem)
            self.side.check()
            began = pacing.clock()
            if pacing.reconcile_due(began):
                self._step("reconcile", self._reconcile)
                if self.registration.refused is not None:
                    break
                pacing.reconciled()
            self._pass()
            self.metrics.iteration.observe(pacing.clock() - began)
            self.metrics.slots_in_use.set(len(self.held))
            self.metrics.failed_passes.set(
                max(self.supervisor.consecutive, self.side.keeper.failures)
            )
            self.progress.tick()
            if self.registration.refused is not None:
                break
            if (step := self.supervisor.exhausted) is not None:
                return self._give_up(step)
            # Cleared before the next pass, which sees whatever set it (a job's outcome and a
            # wake-up's meaning are recorded before the wake): nothing landing meanwhile is lost.
            pacing.take_due_hints()
            woken = self.wake.wait(pacing.sleep_seconds())
            if woken:
                self.wake.clear()
                self._gather(stop)
                pacing.take_due_hints()
        return 0

    def _gather(self, stop: threading.Event) -> None:
        """After a wake-up that found a job ended while others still run, wait up to
        --batch-window for them to end too: the next pass then writes all their outcomes in one
        transaction and refills all their slots in one claim, where a pass per end costs two
        transactions per job (the database's cost per job follows the batch size,
        docs/performance.md). Bounded, so a long job delays its neighbours' outcomes by at most
        the window; a stop ends the wait."""
        until = self.pacing.gather_until()
        if until is None:
            return
        while not stop.is_set():
            ended, running = self.held.ends()
            left = self.pacing.gather_left(until, ended=bool(ended), running=bool(running))
            if left is None:
                return
            if self.wake.wait(left):
                self.wake.clear()

    def _step(self, step: str, work: Callable[[], T]) -> T | None:
        """Runs one step of the loop; an error is logged, counted, and retried next time.
        A surprise must never take the daemon down, but one that keeps coming does (supervision)."""
        try:
            result = work()
        except Exception as exc:
            line = first_line(exc)
            kind = self.supervisor.failed(step, exc, line)
            if isinstance(exc, psycopg.Error | DatabaseUnavailable):
                label = {"outage": "unavailable", "contention": "contention"}.get(kind, "other")
                self.metrics.database_errors.labels(label).inc()
            if kind == "failure":  # with its traceback, and how close the loop is to giving up
                self.log.exception(
                    f"{step}_crashed",
                    failed_in_a_row=self.supervisor.failures[step],
                    max_failed_passes=self.supervisor.limit,
                )
            else:
                self.log.warning(f"{step}_failed", error=line)
            return None
        self.supervisor.succeeded(step)
        return result

    def _reconcile(self) -> None:
        """Every daemon reconciles in its own loop, never through the queue it repairs; the
        fleet-wide gauges are sampled at the same rhythm. The schema is judged first: after a
        freeze this is the loop's first step, and nothing is written to a schema this build
        cannot work with."""
        self.registration.check_schema(self.pool)
        if self.registration.refused is not None:
            return
        self.metrics.record_reconcile(self.services.reconciler.run_once())
        self._prune()
        self._partitions()
        with transaction(self.pool) as tx:
            depth = occurrence_store.queue_depth(tx.conn)
            executing = occurrence_store.executing_count(tx.conn)
            budget = fleet_store.budget(tx.conn)
        self.metrics.record_fleet(depth, executing, budget)
        self.notifier.status(
            f"ready: queue depth {depth}, executing {executing}/{budget} fleet-wide, "
            f"{len(self.held)}/{self.settings.concurrency} slots here"
        )

    def _prune(self) -> None:
        """A few short batches of history past retention. Pruning can wait: its failure is
        counted and logged at most once a minute, never a failed step (an outage still is)."""
        try:
            self.services.pruner.run_once()
        except DatabaseUnavailable:
            raise
        except Exception as exc:
            self.side.parts["pruner"].failed(exc, "prune_failed")

    def _partitions(self) -> None:
        """The history's partition upkeep, at most once a minute (ADR 0033). Like the prune it
        can wait: a failure or a give-up is counted and logged at most once a minute, never a
        failed step (an outage still is)."""
        try:
            self.services.partitions.maybe_run()
        except DatabaseUnavailable:
            raise
        except Exception as exc:
            self.side.parts["partitions"].failed(exc, "partition_upkeep_failed")
        self.metrics.partitions_ahead.set(
            -1 if (n := self.services.partitions.partitions_ahead) is None else n
        )

    def _pass(self) -> None:
        """One loop pass: write finished outcomes; dispatch if a task is due (or a poll interval
        passed); claim and launch if there may be something to claim (Pacing says when)."""
        if self._step("pass", self._pass_work) is None and self.supervisor.consecutive:
            self.pacing.want_launch()  # a failed pass tries again

    def _pass_work(self) -> None:
        pacing, services = self.pacing, self.services
        # This pass claims right after: its freed slots take what the outcomes unblock (no
        # peer is woken). The claim for the slots a batch of successes frees is sent with it
        # (one transaction); another claim is wanted only for slots freed otherwise, or when
        # that one did not see the end of the queue.
        refill = services.write_and_refill()
        self.metrics.record_completion(refill.completed)
        if refill.launched is not None:
            self.metrics.record_launch(refill.launched)
            if refill.launched.more:
                pacing.want_launch()
        if refill.completed.done > refill.freed:
            pacing.want_launch()  # slots came free
        if pacing.dispatch_due():
            began = pacing.dispatch_began()
            free = self.settings.concurrency - len(self.held)
            result = services.dispatcher.run_once(claims_after=free)
            self.metrics.record_dispatch(result)
            self._report(pacing.dispatched(began, result.next_due, result.db_now, result.locked))
            pacing.spread(result.spread_starts, result.db_now)
            if result.ready or result.queue_due:
                pacing.want_launch()
        if pacing.launch_due():
            pacing.launching()
            launched = services.launcher.run_once()
            self.metrics.record_launch(launched)
            if launched.more:
                pacing.want_launch()

    def _report(self, spells: LockedSpells) -> None:
        """Logs each spell of a due task whose row another session holds once, when it is still
        locked a poll after a dispatch first found it so (a peer's dispatch holds it for
        milliseconds), and its end."""
        for task_id, seconds in spells.held:
            self.log.warning("due_task_locked", task_id=task_id, locked_seconds=round(seconds, 1))
        for task_id, seconds in spells.released:
            self.log.info("due_task_unlocked", task_id=task_id, locked_seconds=round(seconds, 1))

    def _give_up(self, step: str) -> int:
        self.log.error(
            "loop_failing",
            step=step,
            failed_in_a_row=self.supervisor.failures[step],
            error=self.supervisor.last_error.get(step),
            exit_code=EXIT_FAILED_PASSES,
        )
        return EXIT_FAILED_PASSES

    def _keeper_failed(self, problem: str) -> int:
        self.log.error(
            "lease_keeper_failed",
            error=problem,
            held_runs=len(self.held),
            exit_code=EXIT_LEASE_KEEPER_FAILED,
        )
        return EXIT_LEASE_KEEPER_FAILED
