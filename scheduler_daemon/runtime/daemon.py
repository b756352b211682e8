"""Composition root of `scheduler-daemon run`: builds the pool, executors and services, runs the
loop, and drains on shutdown; wires in the HTTP endpoint, the metrics, the systemd notifications
and the supervision of failed passes. Only this module knows the concrete classes."""

import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar

import psycopg
import structlog
from psycopg_pool import ConnectionPool

from scheduler_daemon.domain import timing
from scheduler_daemon.domain.held import HeldRuns
from scheduler_daemon.domain.instance import new_instance_id
from scheduler_daemon.executors import make_executors
from scheduler_daemon.runtime.endpoint import Endpoint
from scheduler_daemon.runtime.health import LoopProgress, Readiness
from scheduler_daemon.runtime.metrics import Metrics
from scheduler_daemon.runtime.notify import Notifier
from scheduler_daemon.runtime.supervision import EXIT_FAILED_PASSES, Supervisor
from scheduler_daemon.services.completer import Completer
from scheduler_daemon.services.dispatcher import Dispatcher, DispatchResult
from scheduler_daemon.services.launcher import Launcher
from scheduler_daemon.services.lease_keeper import LeaseKeeper
from scheduler_daemon.services.pruner import Pruner
from scheduler_daemon.services.reconciler import Reconciler
from scheduler_daemon.services.waker import Waker
from scheduler_daemon.settings import DaemonSettings
from scheduler_daemon.storage import (
    fleet_store,
    instance_store,
    migration,
    occurrence_store,
    task_store,
)
from scheduler_daemon.storage.database import (
    connect,
    first_line,
    make_pool,
    pooled_transaction,
)
from scheduler_daemon.storage.error import DatabaseUnavailable, SchemaMismatch
from scheduler_daemon.version import __version__

log = structlog.get_logger()
T = TypeVar("T")
STOP_WAIT_SECONDS = 5.0
MIN_SLEEP_SECONDS = 0.02


class Daemon:
    def __init__(
        self,
        url: str,
        settings: DaemonSettings,
        *,
        spool_dir: Path | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.url = url
        self.settings = settings.validate()
        self.instance_id = new_instance_id(settings.instance_prefix)
        self.held = HeldRuns()
        self.wake = threading.Event()
        # When the loop dispatches next (monotonic): the earliest due time, at most a poll away.
        # A new task's due time arrives with its wake-up (`_task_added`); a task added without
        # one is dispatched at once.
        self._next_dispatch = 0.0
        self._due_hints: list[float] = []
        self._hints_lock = threading.Lock()
        # Whether claiming may find something: set by wake-ups that queue work or free budget,
        # by a poll, by a dispatch that queued; cleared by a claim that saw the end of the queue.
        self.launch_wanted = threading.Event()
        self.launch_wanted.set()
        self._next_launch = 0.0  # monotonic: the latest the next claim is tried
        self.spool_dir = spool_dir
        self.clock_drift: timedelta | None = None
        self.pruner: Pruner | None = None  # set by run(), on its pool
        self.draining = False
        self.log = log.bind(instance_id=self.instance_id)
        self.notifier = notifier or Notifier(None, None)
        self.metrics = Metrics(self.instance_id, __version__, settings.concurrency)
        self.progress = LoopProgress(settings.stall_timeout.total_seconds())
        self.progress.on_progress.append(self.notifier.progress)
        self.readiness = Readiness(self._database_problem)
        self.supervisor = Supervisor(settings.max_failed_passes)
        self.endpoint: Endpoint | None = None
        self._head: str | None = None
        self.refused: SchemaMismatch | None = None  # the schema turned incompatible: exit

    # -- start -----------------------------------------------------------------------------------
    def _wait_for_database(self, stop: threading.Event) -> bool:
        delay = 1.0
        while not stop.is_set():
            try:
                connect(self.url).close()
            except DatabaseUnavailable as exc:
                self.log.warning("database_unavailable_at_start", error=str(exc), retry_in=delay)
                self.notifier.status(f"waiting for the database (retry in {delay:g}s): {exc}")
                self.progress.tick()  # waiting is what the loop should do now: it is alive
                stop.wait(delay)
                delay = min(delay * 2, 30.0)
            else:
                return True
        return False

    def _head_revision(self) -> str:
        """This build's schema revision, read from the migration scripts once."""
        if self._head is None:
            self._head = migration.head_revision()
        return self._head

    def _database_problem(self) -> str | None:
        """/readyz's database check, on a connection of its own: None when fine."""
        try:
            verdict = migration.state(self.url).verdict
        except DatabaseUnavailable as exc:
            return str(exc)
        except psycopg.Error as exc:
            return f"database error: {first_line(exc)}"
        return None if verdict.ok else verdict.message

    def _measure_drift(self) -> timedelta:
        """Database clock minus this host's; reported, never used to coordinate."""
        with connect(self.url, autocommit=True) as conn:
            before = time.time()
            db_now = instance_store.database_clock(conn)
            after = time.time()
        return timing.clock_drift(db_now, before, after)

    def _register(self) -> None:
        self._register_instance(self._measure_drift())

    def _register_instance(self, clock_drift: timedelta | None) -> None:
        """Inserts this process start's instance row (again, if a peer removed it), in the
        transaction that judged the schema compatible (ADR 0002): a contract in progress is
        waited for, and a schema this build cannot work with is refused before any write."""
        head = self._head_revision()
        self.clock_drift = clock_drift
        with connect(self.url) as conn, conn.transaction():
            migration.check_before_write(conn)
            instance_store.register(
                conn,
                id=self.instance_id,
                hostname=socket.gethostname(),
                pid=os.getpid(),
                version=__version__,
                schema_revision=head,
                concurrency=self.settings.concurrency,
                lease_ttl=self.settings.lease_ttl,
                lease_grace=self.settings.lease_grace,
                reconcile_interval=self.settings.reconcile_interval,
                clock_drift=self.clock_drift,
            )
        self.log.info(
            "instance_registered",
            version=__version__,
            schema_revision=head,
            clock_drift_seconds=clock_drift.total_seconds() if clock_drift else None,
            takeover_bound_seconds=self.settings.takeover_bound.total_seconds(),
        )

    def _reregister(self, clock_drift: timedelta | None) -> None:
        """The lease keeper found this instance's row removed (it was frozen or cut off past
        --instance-expiry): register again, unless the schema changed under it meanwhile."""
        try:
            self._register_instance(clock_drift)
        except SchemaMismatch as exc:
            self._refuse(exc)
            raise  # the lease keeper rolls back its renewal

    def _check_schema(self, pool: ConnectionPool) -> None:
        """Stop writing as soon as the schema is one this build cannot work with."""
        with pooled_transaction(pool) as conn:
            verdict = migration.state_of(conn).verdict
        if not verdict.ok:
            try:
                migration.raise_unless_compatible(verdict)
            except SchemaMismatch as exc:
                self._refuse(exc)

    def _refuse(self, exc: SchemaMismatch) -> None:
        self.log.error("schema_incompatible", error=str(exc))
        self.refused = exc
        self.wake.set()

    def _python_workers(self, pool: ConnectionPool) -> int:
        """How many python workers to start with the daemon: --concurrency when some task runs
        python jobs, so the first burst of them finds its workers running, else none (idle
        workers cost memory). A failed look-up starts none: jobs start them on demand."""
        try:
            with pooled_transaction(pool) as conn:
                found = task_store.python_exists(conn)
        except (psycopg.Error, DatabaseUnavailable) as exc:
            self.log.warning("python_workers_not_started", error=first_line(exc))
            return 0
        return self.settings.concurrency if found else 0

    # -- run -------------------------------------------------------------------------------------
    def run(self, stop: threading.Event, hard_stop: threading.Event | None = None) -> int:
        """Runs until `stop` is set, then drains; `hard_stop` skips the drain's wait. Returns the
        exit code: 0, or EXIT_FAILED_PASSES when the loop gave up (after draining too)."""
        if self.settings.http_port:
            self.endpoint = Endpoint(
                self.settings.http_host,
                self.settings.http_port,
                liveness=self.progress.problem,
                readiness=self.readiness.problem,
                registry=self.metrics.registry,
            )
            self.endpoint.start()
        try:
            return self._run(stop, hard_stop or threading.Event())
        finally:
            if self.endpoint is not None:
                self.endpoint.stop()
            self.notifier.close()

    def _run(self, stop: threading.Event, hard_stop: threading.Event) -> int:
        if not self._wait_for_database(stop):
            return 0
        self._register()
        pool = make_pool(self.url, max_size=2, name=f"scheduler-daemon {self.instance_id}")
        pool.open(wait=False)
        executors = make_executors(
            self.wake,
            self.spool_dir,
            concurrency=self.settings.concurrency,
            python_workers=self._python_workers(pool),
        )
        dispatcher = Dispatcher(
            pool, instance_id=self.instance_id, batch=self.settings.dispatch_batch
        )
        launcher = Launcher(
            pool,
            instance_id=self.instance_id,
            settings=self.settings,
            held=self.held,
            executors=executors,
        )
        completer = Completer(
            pool,
            instance_id=self.instance_id,
            held=self.held,
            max_interruptions=self.settings.max_interruptions,
        )
        keeper = LeaseKeeper(
            self.url,
            instance_id=self.instance_id,
            settings=self.settings,
            held=self.held,
            slots_in_use=lambda: len(self.held),
            stopping=lambda: self.draining,
            clock_drift=self.clock_drift,
            reregister=self._reregister,
            refused=lambda: self.refused,
            on_pass=self.metrics.record_renewal,
        )
        reconciler = Reconciler.from_settings(pool, self.instance_id, self.settings)
        self.pruner = Pruner(pool, instance_id=self.instance_id)
        waker = Waker(
            self.url,
            self.wake,
            instance_id=self.instance_id,
            on_task_added=self._task_added,
            launch_wanted=self.launch_wanted,
        )
        keeper.start()
        if self.settings.listen:
            waker.start()
        self.readiness.state = None
        self.notifier.ready(f"ready: instance {self.instance_id}")
        code = 0
        try:
            code = self._loop(
                stop,
                pool,
                reconciler=reconciler,
                dispatcher=dispatcher,
                launcher=launcher,
                completer=completer,
            )
            if self.refused is None:
                self._drain(pool, completer, hard_stop)
            else:  # no write on a schema this build cannot work with: stop the jobs, leave
                self._abandon()  # their runs to be taken over by a compatible instance
        finally:
            for job_owner in executors.values():
                job_owner.close()
            waker.stop()
            keeper.stop()  # heartbeats stop last, after the drain
            if self.refused is None:
                self._safely(self._deregister)
            pool.close()
        if self.refused is not None:
            raise self.refused
        self.log.info("instance_stopped", exit_code=code)
        return code

    def _loop(
        self,
        stop: threading.Event,
        pool: ConnectionPool,
        *,
        reconciler: Reconciler,
        dispatcher: Dispatcher,
        launcher: Launcher,
        completer: Completer,
    ) -> int:
        """Passes until `stop`, a refusal of the schema, or supervision gives up (its code)."""
        next_reconcile = 0.0
        while not stop.is_set():
            began = time.monotonic()
            if began >= next_reconcile:
                self._step("reconcile", lambda: self._reconcile(reconciler, pool))
                if self.refused is not None:
                    break
                next_reconcile = time.monotonic() + self.settings.reconcile_interval.total_seconds()
            self._pass(dispatcher, launcher, completer)
            self.metrics.iteration.observe(time.monotonic() - began)
            self.metrics.slots_in_use.set(len(self.held))
            self.metrics.failed_passes.set(self.supervisor.consecutive)
            self.progress.tick()
            if self.refused is not None:
                break
            if (step := self.supervisor.exhausted) is not None:
                return self._give_up(step)
            # Cleared before the next pass, which sees whatever set it (a job's outcome and a
            # wake-up's meaning are recorded before the wake): nothing landing meanwhile is lost.
            self._take_due_hints()
            if self.wake.wait(max(0.0, self._next_dispatch - time.monotonic())):
                self.wake.clear()
                self._gather(stop)
                self._take_due_hints()
            else:  # a poll, or a due time: a retry's backoff may have passed too
                self.launch_wanted.set()
        return 0

    def _gather(self, stop: threading.Event) -> None:
        """After a wake-up that found a job ended while others still run, wait up to
        --batch-window for them to end too: the next pass then writes all their outcomes in one
        transaction and refills all their slots in one claim, where a pass per end costs two
        transactions per job (the database's cost per job follows the batch size,
        docs/performance.md). Bounded, so a long job delays its neighbours' outcomes by at most
        the window; a stop ends the wait."""
        window = self.settings.batch_window.total_seconds()
        if window <= 0:
            return
        until = time.monotonic() + window
        while not stop.is_set():
            ended, running = self.held.ends()
            left = until - time.monotonic()
            if not ended or not running or left <= 0:
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

    def _reconcile(self, reconciler: Reconciler, pool: ConnectionPool) -> None:
        """Every daemon reconciles in its own loop, never through the queue it repairs; the
        fleet-wide gauges are sampled at the same rhythm. The schema is judged first: after a
        freeze this is the loop's first step, and nothing is written to a schema this build
        cannot work with."""
        self._check_schema(pool)
        if self.refused is not None:
            return
        self.metrics.record_reconcile(reconciler.run_once())
        if self.pruner is not None:  # bounded: a few short batches of history past retention
            self.pruner.run_once()
        with pooled_transaction(pool) as conn:
            depth = occurrence_store.queue_depth(conn)
            executing = occurrence_store.executing_count(conn)
            budget = fleet_store.budget(conn)
        self.metrics.record_fleet(depth, executing, budget)
        self.notifier.status(
            f"ready: queue depth {depth}, executing {executing}/{budget} fleet-wide, "
            f"{len(self.held)}/{self.settings.concurrency} slots here"
        )

    def _task_added(self, due: datetime | None) -> None:
        """The waker heard of a new task: its due time (database clock) becomes a monotonic
        deadline through the measured drift; without one, dispatch at once."""
        if due is None:
            at = time.monotonic()
        else:
            drift = self.clock_drift.total_seconds() if self.clock_drift else 0.0
            at = time.monotonic() + due.timestamp() - (time.time() + drift)
        with self._hints_lock:
            self._due_hints.append(at)

    def _take_due_hints(self) -> None:
        with self._hints_lock:
            hints, self._due_hints = self._due_hints, []
        if hints:
            self._next_dispatch = min(self._next_dispatch, *hints)

    def _pass(self, dispatcher: Dispatcher, launcher: Launcher, completer: Completer) -> None:
        """One loop pass: write finished outcomes; dispatch if a task is due (or a poll interval
        passed); claim and launch if there may be something to claim. Sets when the next
        dispatch is due: the earliest next_run_at, read on the database clock and turned into
        this host's monotonic clock from the moment the dispatch began (so neither the pass's
        own length nor the clock drift delays it), at most one poll interval away."""
        poll = self.settings.poll_interval.total_seconds()

        def work() -> None:
            # This pass claims right after: its freed slots take what the outcomes unblock.
            # The claim for the slots a batch of successes frees is sent with it (one
            # transaction); another claim is wanted only for slots freed otherwise, or when
            # that one did not see the end of the queue.
            completed = completer.run_once(wake_peers=False, claimer=launcher)
            self.metrics.record_completion(completed)
            if completed.launched is not None:
                self.metrics.record_launch(completed.launched)
                if completed.launched.more:
                    self.launch_wanted.set()
            if completed.done > completed.claim_freed:
                self.launch_wanted.set()  # slots came free
            if time.monotonic() >= self._next_dispatch:
                began = time.monotonic()
                self._next_dispatch = began + poll  # also if the dispatch fails
                free = self.settings.concurrency - len(self.held)
                result = dispatcher.run_once(claims_after=free)
                self.metrics.record_dispatch(result)
                self._next_dispatch = self._dispatch_due(result, began, poll)
                if result.queued:
                    self.launch_wanted.set()
            # At least once a poll interval, whatever woke the loop: a retry's backoff ends
            # without a wake-up.
            if self.launch_wanted.is_set() or time.monotonic() >= self._next_launch:
                self.launch_wanted.clear()
                self._next_launch = time.monotonic() + poll
                launched = launcher.run_once()
                self.metrics.record_launch(launched)
                if launched.more:
                    self.launch_wanted.set()

        if self._step("pass", work) is None and self.supervisor.consecutive:
            self.launch_wanted.set()  # a failed pass tries again

    @staticmethod
    def _dispatch_due(result: DispatchResult, began: float, poll: float) -> float:
        """The monotonic time of the next dispatch after one that began at `began`."""
        if result.next_due is None or result.db_now is None:
            return began + poll
        until_due = (result.next_due - result.db_now).total_seconds()
        if until_due <= 0:  # still due after dispatching: a peer holds that task, do not spin
            return time.monotonic() + MIN_SLEEP_SECONDS
        return began + min(poll, until_due)

    def _give_up(self, step: str) -> int:
        self.log.error(
            "loop_failing",
            step=step,
            failed_in_a_row=self.supervisor.failures[step],
            error=self.supervisor.last_error.get(step),
            exit_code=EXIT_FAILED_PASSES,
        )
        return EXIT_FAILED_PASSES

    # -- stop ------------------------------------------------------------------------------------
    def _drain(
        self, pool: ConnectionPool, completer: Completer, hard_stop: threading.Event
    ) -> None:
        """Stop claiming; let running jobs finish up to the drain timeout; then stop them and
        record them interrupted (their occurrences go back to the queue); deregister."""
        self.draining = True
        self.readiness.state = "draining"
        self.metrics.draining.set(1)
        self.notifier.stopping(f"draining: {len(self.held)} run(s) to finish")
        self.log.info(
            "drain_started",
            running=len(self.held),
            drain_timeout_seconds=self.settings.drain_timeout.total_seconds(),
        )
        self._safely(lambda: self._release_claims(pool))
        deadline = time.monotonic() + self.settings.drain_timeout.total_seconds()
        while len(self.held) and time.monotonic() < deadline and not hard_stop.is_set():
            self._drain_step(completer)
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
        while len(self.held) and time.monotonic() < stop_deadline:
            self._drain_step(completer)

    def _abandon(self) -> None:
        """Stops every job without recording anything; their leases run out."""
        self.readiness.state = "refused: the schema is not compatible with this build"
        for run in self.held:
            run.job.stop("the schema is not compatible with this build")
            self.log.warning(
                "run_abandoned_schema_incompatible",
                run_id=run.run_id,
                occurrence_id=run.occurrence_id,
                task_id=run.task_id,
            )

    def _drain_step(self, completer: Completer) -> None:
        self._safely(lambda: self.metrics.record_completion(completer.run_once()))
        self.progress.tick()
        self.wake.wait(0.1)
        self.wake.clear()

    def _release_claims(self, pool: ConnectionPool) -> None:
        with pooled_transaction(pool) as conn:
            released = occurrence_store.release_claims(conn, self.instance_id)
        if released:
            self.log.info("claims_released", count=released)

    def _deregister(self) -> None:
        with connect(self.url) as conn, conn.transaction():
            instance_store.deregister(conn, self.instance_id)

    def _safely(self, step: Callable[[], object]) -> None:
        """A shutdown step: whatever it meets is one line, and the shutdown goes on."""
        try:
            step()
        except Exception as exc:
            self.log.warning("shutdown_step_failed", error=first_line(exc))
