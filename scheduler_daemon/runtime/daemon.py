"""The daemon's lifecycle (`scheduler-daemon run`): start (the endpoint, wait for the database,
register, build and start the services), serve (the loop, which also watches the side threads),
stop (drain, or abandon when the schema is refused or the lease keeper failed; then stop the
services, heartbeats last, and deregister). What each phase does lives beside it in runtime/:
root (composition), loop and pacing, registration, drain."""

import contextlib
import os
import sys
import threading
from pathlib import Path

import structlog
from psycopg_pool import ConnectionPool

from scheduler_daemon.domain.held import HeldRuns
from scheduler_daemon.domain.instance import new_instance_id
from scheduler_daemon.domain.trace import RunTracer
from scheduler_daemon.executors.base import Executor
from scheduler_daemon.executors.inprocess import InProcessExecutor, InProcessJob
from scheduler_daemon.runtime.drain import Drain
from scheduler_daemon.runtime.endpoint import Endpoint
from scheduler_daemon.runtime.health import LoopProgress, Readiness
from scheduler_daemon.runtime.loop import Loop
from scheduler_daemon.runtime.metrics import Metrics
from scheduler_daemon.runtime.notify import Notifier
from scheduler_daemon.runtime.pacing import Pacing
from scheduler_daemon.runtime.registration import Registration
from scheduler_daemon.runtime.root import (
    Hooks,
    Services,
    build_services,
    open_pool,
    start_executors,
)
from scheduler_daemon.runtime.supervision import (
    EXIT_IN_PROCESS_STUCK,
    EXIT_IN_PROCESS_UNTRUSTED,
    EXIT_LEASE_KEEPER_FAILED,
    Degradable,
    SideThreads,
    Supervisor,
    Vital,
)
from scheduler_daemon.runtime.tracing import open_tracer
from scheduler_daemon.settings import DaemonSettings
from scheduler_daemon.storage import task_sample
from scheduler_daemon.storage.database import make_pool
from scheduler_daemon.storage.epoch import EpochWatch
from scheduler_daemon.version import __version__

log = structlog.get_logger()


class Daemon:
    stuck_run: int | None = None  # an in-process job's run past its stop grace (exit 8)
    _serving: threading.Event | None = None  # the stop event `run` was given
    _in_process: InProcessExecutor | None = None
    tracer: RunTracer | None = None  # --otel: a span per run (runtime/tracing.py)

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
        self.wake = threading.Event()  # set by a job's end, a wake-up, a signal
        self.spool_dir = spool_dir
        self.log = log.bind(instance_id=self.instance_id)
        self.notifier = notifier or Notifier(None, None)
        self.metrics = Metrics(self.instance_id, __version__, settings.concurrency)
        self.progress = LoopProgress(settings.stall_timeout.total_seconds())
        self.progress.on_progress.append(self.notifier.progress)
        # Every new connection this process opens sights the server's epoch first (issue 32).
        self.epoch = EpochWatch(
            self.instance_id,
            on_new=self.metrics.epochs_seen.inc,
            on_timeline=self.metrics.timeline.set,
            on_older=self.metrics.epoch_older.inc,
        )
        self.registration = Registration(
            url,
            instance_id=self.instance_id,
            settings=self.settings,
            progress=self.progress,
            notifier=self.notifier,
            on_refused=self.wake.set,
            configure=self.epoch,
        )
        self.pacing = Pacing.from_settings(
            self.settings, drift=lambda: self.registration.clock_drift
        )
        self.readiness = Readiness(self.registration.database_problem)
        self.supervisor = Supervisor(settings.max_failed_passes)
        self.keeper_watch = Vital("lease keeper", settings.max_failed_passes)
        self.side = SideThreads(self.keeper_watch, keeper_alive=lambda: True)
        for part in ("waker", "endpoint", "pruner", "partitions", "deliverer"):
            self.side.parts[part] = Degradable(
                part,
                on_failure=self.metrics.side_failures.labels(part).inc,
                instance_id=self.instance_id,
            )
        self.drain = Drain(
            instance_id=self.instance_id,
            settings=self.settings,
            held=self.held,
            wake=self.wake,
            progress=self.progress,
            readiness=self.readiness,
            metrics=self.metrics,
            notifier=self.notifier,
        )
        self.endpoint: Endpoint | None = None

    def run(self, stop: threading.Event, hard_stop: threading.Event | None = None) -> int:
        """Runs until `stop` is set, then drains; `hard_stop` skips the drain's wait. Returns the
        exit code: 0, EXIT_FAILED_PASSES when the loop gave up (after draining too),
        EXIT_LEASE_KEEPER_FAILED when the lease keeper failed (after abandoning the jobs), or
        EXIT_IN_PROCESS_STUCK when an in-process job ignored a stop past its grace (it sets
        `stop`, and the daemon drains). An in-process job running at its trust deadline ends
        the process at once with EXIT_IN_PROCESS_UNTRUSTED."""
        if self.settings.http_port:
            self._open_endpoint()
            endpoint = self.side.parts["endpoint"]
            endpoint.alive = lambda: self.endpoint is None or self.endpoint.alive
            endpoint.restart = self._open_endpoint
        try:
            return self._run(stop, hard_stop or threading.Event())
        finally:
            if self.endpoint is not None:
                self.endpoint.stop()
            self.notifier.close()

    def _open_endpoint(self) -> None:
        """Starts the endpoint; again in place of one whose thread died (its socket closed)."""
        if self.endpoint is not None:
            self.endpoint.stop()
        self.endpoint = Endpoint(
            self.settings.http_host,
            self.settings.http_port,
            liveness=self.progress.problem,
            readiness=self.readiness.problem,
            registry=self.metrics.registry,
            degraded=self.side.degraded,
        )
        self.endpoint.start()

    def _run(self, stop: threading.Event, hard_stop: threading.Event) -> int:
        if not self.registration.wait_for_database(stop):
            return 0
        self.registration.register()
        pool = open_pool(self.url, self.instance_id, self.epoch)
        self._serving = stop
        executors = start_executors(
            pool,
            self.wake,
            self.spool_dir,
            instance_id=self.instance_id,
            settings=self.settings,
            on_stuck=self._in_process_stuck,
            on_untrusted=self._in_process_untrusted,
        )
        in_process = executors.get(InProcessExecutor.kind)
        self._in_process = in_process if isinstance(in_process, InProcessExecutor) else None
        self.tracer = open_tracer(self.settings.otel, self.instance_id)
        services = self._build(pool, executors)
        sample_pool = self._task_sample_pool()
        self._start(services)
        code, drained = 0, False
        try:
            code = self._serve(stop, pool, services)
            if self.registration.refused is not None:  # no write on a schema this build cannot
                self.drain.abandon()  # work with: stop the jobs, leave their runs to a takeover
            elif code == EXIT_LEASE_KEEPER_FAILED:  # no lease to vouch for a write: the same
                self.drain.abandon(
                    "the lease keeper failed",
                    event="run_abandoned_lease_keeper_failed",
                    state="stopping: the lease keeper failed",
                )
            else:
                self.drain.drain(pool, services.completer, hard_stop)
                drained = True
        finally:
            self._stop(pool, services, executors, drained=drained)
            if sample_pool is not None:  # scrapes until the endpoint stops: the last sample
                self.metrics.tasks.attach(None)
                sample_pool.close()
        if self.registration.refused is not None:
            raise self.registration.refused
        if code == 0 and self.stuck_run is not None:
            code = EXIT_IN_PROCESS_STUCK
        self.log.info("instance_stopped", exit_code=code)
        return code

    def _task_sample_pool(self) -> ConnectionPool | None:
        """With the endpoint on and --metrics-task-limit above 0: a one-connection pool of its
        own for the per-task gauges' sample, read on a scrape's thread, so a scrape never waits
        for the loop's connections nor the loop for a scrape's (ADR 0013)."""
        limit = self.settings.metrics_task_limit
        if not (self.settings.http_port and limit):
            return None
        pool = make_pool(
            self.url,
            max_size=1,
            name=f"scheduler-daemon {self.instance_id} metrics",
            configure=self.epoch,
        )
        pool.open(wait=False)
        self.metrics.tasks.attach(lambda: task_sample.sample(pool, limit))
        return pool

    def _build(self, pool: ConnectionPool, executors: dict[str, Executor]) -> Services:
        registration = self.registration
        hooks = Hooks(
            slots_in_use=lambda: len(self.held),
            stopping=lambda: self.drain.draining,
            clock_drift=registration.clock_drift,
            reregister=registration.reregister,
            refused=lambda: registration.refused,
            on_renewal=self._renewed,
            on_renewal_failure=self._renewal_failed,
            on_keeper_death=self._keeper_died,
            on_waker_failure=self.side.parts["waker"].failed,
            wake=self.wake,
            on_task_added=self.pacing.task_added,
            launch_wanted=self.pacing.launch_wanted,
            epoch=self.epoch,
            on_delivery_failure=self.side.parts["deliverer"].failed,
            on_notification_failure=self.metrics.notification_failures.inc,
        )
        services = build_services(
            pool,
            self.url,
            instance_id=self.instance_id,
            settings=self.settings,
            held=self.held,
            executors=executors,
            hooks=hooks,
            tracer=self.tracer,
        )
        keeper, waker = services.keeper, services.waker
        self.side.keeper_alive = lambda: keeper.alive
        self.side.parts["waker"].alive = lambda: waker.alive
        self.side.parts["waker"].restart = waker.restart
        deliverer = services.deliverer
        self.side.parts["deliverer"].alive = lambda: deliverer.alive
        self.side.parts["deliverer"].restart = deliverer.restart
        return services

    # -- the lease keeper's reports, from its thread (ADR 0005) -----------------------------------
    def _renewed(self, fenced: set[int] | None) -> None:
        self.metrics.record_renewal(fenced)
        if fenced is not None:
            self.keeper_watch.succeeded()

    def _renewal_failed(self, exc: Exception) -> None:
        self.keeper_watch.failed(exc)
        if self.keeper_watch.problem() is not None:
            self.wake.set()  # the loop stops at once, before it claims again

    def _keeper_died(self, exc: BaseException | None) -> None:
        self.keeper_watch.died(exc)
        self.wake.set()

    # -- the in-process executor's reports, from its monitor thread (ADR 0009) --------------------
    def _in_process_stuck(self, job: InProcessJob) -> None:
        """A job asked to stop did not return within the grace: stop claiming, drain the other
        jobs, exit EXIT_IN_PROCESS_STUCK; its run is left to a takeover."""
        self.log.error(
            "in_process_job_stuck",
            stop_grace_seconds=self.settings.in_process_stop_grace.total_seconds(),
            exit_code=EXIT_IN_PROCESS_STUCK,
            **job.ids,
        )
        if self.stuck_run is None:
            self.stuck_run = job.run_id
        if self._serving is not None:
            self._serving.set()
        self.wake.set()

    def _in_process_untrusted(self, job: InProcessJob) -> None:
        """A job still runs at its trust deadline: its lease may run out and its run be taken
        over, and a thread cannot be killed; the process can, before the takeover point."""
        self.log.critical(
            "in_process_trust_deadline_passed", exit_code=EXIT_IN_PROCESS_UNTRUSTED, **job.ids
        )
        exit_now(EXIT_IN_PROCESS_UNTRUSTED)

    @property
    def lingering(self) -> bool:
        """Whether an in-process job has not returned (its thread ends with the process)."""
        return self._in_process is not None and bool(self._in_process.running())

    def _start(self, services: Services) -> None:
        services.keeper.start()
        if self.settings.listen:
            services.waker.start()
        services.deliverer.start()
        self.readiness.state = None
        self.notifier.ready(f"ready: instance {self.instance_id}")

    def _serve(self, stop: threading.Event, pool: ConnectionPool, services: Services) -> int:
        loop = Loop(
            services,
            pool,
            settings=self.settings,
            pacing=self.pacing,
            held=self.held,
            wake=self.wake,
            registration=self.registration,
            supervisor=self.supervisor,
            side=self.side,
            metrics=self.metrics,
            progress=self.progress,
            notifier=self.notifier,
        )
        return loop.run(stop)

    def _stop(
        self,
        pool: ConnectionPool,
        services: Services,
        executors: dict[str, Executor],
        *,
        drained: bool,
    ) -> None:
        if drained and self._in_process is not None:  # the last write before the exit
            in_process = self._in_process
            self.drain.safely(lambda: self.drain.end_in_process(in_process, services.completer))
        for job_owner in executors.values():
            job_owner.close()
        if self.tracer is not None:  # the last spans leave, within a bounded wait
            self.tracer.close()
        services.waker.stop()
        services.deliverer.stop()  # after the POST in flight, if any (at most its timeout)
        services.keeper.stop()  # heartbeats stop last, after the drain
        if self.registration.refused is None:
            self.drain.safely(self.registration.deregister)
        pool.close()


def exit_now(code: int) -> None:
    """Ends the process with `code` at once, whatever its threads are doing (the log flushed)."""
    for stream in (sys.stderr, sys.stdout):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
