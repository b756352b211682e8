"""The daemon's lifecycle (`scheduler-daemon run`): start (the endpoint, wait for the database,
register, build and start the services), serve (the loop), stop (drain or abandon, then stop the
services, heartbeats last, and deregister). What each phase does lives beside it in runtime/:
root (composition), loop and pacing, registration, drain."""

import threading
from pathlib import Path

import structlog
from psycopg_pool import ConnectionPool

from scheduler_daemon.domain.held import HeldRuns
from scheduler_daemon.domain.instance import new_instance_id
from scheduler_daemon.executors.base import Executor
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
from scheduler_daemon.runtime.supervision import Supervisor
from scheduler_daemon.settings import DaemonSettings
from scheduler_daemon.version import __version__

log = structlog.get_logger()


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
        self.wake = threading.Event()  # set by a job's end, a wake-up, a signal
        self.spool_dir = spool_dir
        self.log = log.bind(instance_id=self.instance_id)
        self.notifier = notifier or Notifier(None, None)
        self.metrics = Metrics(self.instance_id, __version__, settings.concurrency)
        self.progress = LoopProgress(settings.stall_timeout.total_seconds())
        self.progress.on_progress.append(self.notifier.progress)
        self.registration = Registration(
            url,
            instance_id=self.instance_id,
            settings=self.settings,
            progress=self.progress,
            notifier=self.notifier,
            on_refused=self.wake.set,
        )
        self.pacing = Pacing.from_settings(
            self.settings, drift=lambda: self.registration.clock_drift
        )
        self.readiness = Readiness(self.registration.database_problem)
        self.supervisor = Supervisor(settings.max_failed_passes)
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
        if not self.registration.wait_for_database(stop):
            return 0
        self.registration.register()
        pool = open_pool(self.url, self.instance_id)
        executors = start_executors(
            pool,
            self.wake,
            self.spool_dir,
            instance_id=self.instance_id,
            settings=self.settings,
        )
        services = self._build(pool, executors)
        self._start(services)
        code = 0
        try:
            code = self._serve(stop, pool, services)
            if self.registration.refused is None:
                self.drain.drain(pool, services.completer, hard_stop)
            else:  # no write on a schema this build cannot work with: stop the jobs, leave
                self.drain.abandon()  # their runs to be taken over by a compatible instance
        finally:
            self._stop(pool, services, executors)
        if self.registration.refused is not None:
            raise self.registration.refused
        self.log.info("instance_stopped", exit_code=code)
        return code

    def _build(self, pool: ConnectionPool, executors: dict[str, Executor]) -> Services:
        registration = self.registration
        hooks = Hooks(
            slots_in_use=lambda: len(self.held),
            stopping=lambda: self.drain.draining,
            clock_drift=registration.clock_drift,
            reregister=registration.reregister,
            refused=lambda: registration.refused,
            on_renewal=self.metrics.record_renewal,
            wake=self.wake,
            on_task_added=self.pacing.task_added,
            launch_wanted=self.pacing.launch_wanted,
        )
        return build_services(
            pool,
            self.url,
            instance_id=self.instance_id,
            settings=self.settings,
            held=self.held,
            executors=executors,
            hooks=hooks,
        )

    def _start(self, services: Services) -> None:
        services.keeper.start()
        if self.settings.listen:
            services.waker.start()
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
            metrics=self.metrics,
            progress=self.progress,
            notifier=self.notifier,
        )
        return loop.run(stop)

    def _stop(
        self, pool: ConnectionPool, services: Services, executors: dict[str, Executor]
    ) -> None:
        for job_owner in executors.values():
            job_owner.close()
        services.waker.stop()
        services.keeper.stop()  # heartbeats stop last, after the drain
        if self.registration.refused is None:
            self.drain.safely(self.registration.deregister)
        pool.close()
