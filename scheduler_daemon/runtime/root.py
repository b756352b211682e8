"""The composition root: the one place that knows the concrete services and builds them, for
`scheduler-daemon run` (the Daemon) and for the tests' in-process replicas (tests/support.py)
alike, so a test daemon is wired the way a real one is. Also the daemon's pool and executors."""

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import structlog
from psycopg_pool import ConnectionPool

from scheduler_daemon.domain.held import HeldRuns
from scheduler_daemon.domain.notification import Notification
from scheduler_daemon.domain.trace import RunTracer
from scheduler_daemon.executors import make_executors
from scheduler_daemon.executors.base import Executor
from scheduler_daemon.services.completer import Completer, CompleteResult
from scheduler_daemon.services.deliverer import Deliverer
from scheduler_daemon.services.dispatcher import Dispatcher
from scheduler_daemon.services.launcher import Launcher, LaunchResult
from scheduler_daemon.services.lease_keeper import LeaseKeeper
from scheduler_daemon.services.partition_keeper import PartitionKeeper
from scheduler_daemon.services.pruner import Pruner
from scheduler_daemon.services.reconciler import Reconciler
from scheduler_daemon.services.waker import Waker
from scheduler_daemon.settings import DaemonSettings
from scheduler_daemon.storage import task_store
from scheduler_daemon.storage.database import first_line, make_pool, transaction
from scheduler_daemon.storage.epoch import EpochWatch
from scheduler_daemon.storage.error import DatabaseUnavailable, SchemaMismatch

if TYPE_CHECKING:
    from scheduler_daemon.executors.inprocess import InProcessJob

log = structlog.get_logger()


@dataclass(frozen=True)
class Refill:
    """A pass's outcomes written (`completed`) and what the claim sent with its successes
    launched (None when no such claim committed), which took `freed` of the slots they left."""

    completed: CompleteResult
    launched: LaunchResult | None
    freed: int


@dataclass(frozen=True)
class Services:
    """One daemon's services: each a loop of its own (`run_once`), meeting in the database."""

    dispatcher: Dispatcher
    launcher: Launcher
    completer: Completer
    keeper: LeaseKeeper
    reconciler: Reconciler
    pruner: Pruner
    partitions: PartitionKeeper
    waker: Waker
    deliverer: Deliverer

    def write_and_refill(self) -> Refill:
        """The hot path of a loop pass: the completer reports what finished, the launcher
        decides what to start. The successes and the claim for the slots they free go in one
        transaction sent in one round trip (no peer is woken: this loop claims right after);
        what it claimed starts as soon as that commits, before the pass writes its other
        outcomes, so a failure there cannot leave the claimed runs without their jobs."""
        finishing = self.completer.gather()
        freed = len(finishing.successes)
        request = self.launcher.request(freed=freed) if freed else None
        then = None if request is None else request.statement
        claimed = self.completer.write_successes(finishing, wake_peers=False, then=then)
        launched = None
        if request is not None and claimed is not None:
            launched = self.launcher.launch(request, claimed)
        freed = freed if launched is not None else 0
        return Refill(self.completer.write_rest(finishing), launched, freed)


@dataclass(frozen=True)
class Hooks:
    """How the services reach the daemon around them. The defaults are a bare replica's (the
    tests'): never stopping, no drift measured, nothing to register again, no wake-ups heard."""

    slots_in_use: Callable[[], int] | None = None  # None: the held runs
    stopping: Callable[[], bool] = lambda: False
    clock_drift: timedelta | None = None
    reregister: Callable[[timedelta | None], None] = lambda _drift: None
    refused: Callable[[], SchemaMismatch | None] = lambda: None
    on_renewal: Callable[[set[int] | None], None] = lambda _fenced: None
    on_renewal_failure: Callable[[Exception], None] = lambda _exc: None
    on_keeper_death: Callable[[BaseException | None], None] = lambda _exc: None
    on_waker_failure: Callable[[Exception], None] = lambda _exc: None
    wake: threading.Event | None = None  # None: an event of the waker's own
    on_task_added: Callable[[datetime | None], None] | None = None
    launch_wanted: threading.Event | None = None
    epoch: EpochWatch | None = None  # sights each new connection of the keeper and the waker
    on_delivery_failure: Callable[[Exception], None] = lambda _exc: None
    on_notification_failure: Callable[[], None] = lambda: None


# An injection point for the tests (tests/chaos/test_notifications.py): when set, a deliverer
# writes the delivery_id of each notification it POSTed to this file, before its record, and
# then waits there forever, so a test can kill the daemon between a POST and its record.
POSTED_FILE_ENV = "SCHEDULER_TEST_NOTIFY_POSTED_FILE"


def _pause_after_post(path: str) -> Callable[[Notification], None]:
    def pause(notification: Notification) -> None:
        with open(path, "a") as out:
            out.write(notification.delivery_id + "\n")
        while True:
            time.sleep(3600)

    return pause


def build_services(
    pool: ConnectionPool,
    url: str,
    *,
    instance_id: str,
    settings: DaemonSettings,
    held: HeldRuns,
    executors: dict[str, Executor],
    hooks: Hooks = Hooks(),
    tracer: RunTracer | None = None,
) -> Services:
    """Builds one daemon's services on `pool` (the lease keeper and the waker connect to `url`
    directly: their connections must not wait behind the loop's). Nothing is started. `tracer`
    (--otel): the launcher starts a span per run, the reconciler records its takeovers."""
    slots_in_use = hooks.slots_in_use or (lambda: len(held))
    return Services(
        dispatcher=Dispatcher(pool, instance_id=instance_id, batch=settings.dispatch_batch),
        launcher=Launcher(
            pool,
            instance_id=instance_id,
            settings=settings,
            held=held,
            executors=executors,
            tracer=tracer,
        ),
        completer=Completer(
            pool,
            instance_id=instance_id,
            held=held,
            max_interruptions=settings.max_interruptions,
        ),
        keeper=LeaseKeeper(
            url,
            instance_id=instance_id,
            settings=settings,
            held=held,
            slots_in_use=slots_in_use,
            stopping=hooks.stopping,
            clock_drift=hooks.clock_drift,
            reregister=hooks.reregister,
            refused=hooks.refused,
            on_pass=hooks.on_renewal,
            on_failure=hooks.on_renewal_failure,
            on_death=hooks.on_keeper_death,
            configure=hooks.epoch,
        ),
        reconciler=Reconciler.from_settings(pool, instance_id, settings, tracer),
        pruner=Pruner(pool, instance_id=instance_id),
        partitions=PartitionKeeper(pool, instance_id=instance_id),
        waker=Waker(
            url,
            hooks.wake or threading.Event(),
            instance_id=instance_id,
            on_task_added=hooks.on_task_added,
            launch_wanted=hooks.launch_wanted,
            on_failure=hooks.on_waker_failure,
            configure=hooks.epoch,
        ),
        deliverer=_deliverer(url, instance_id, hooks),
    )


def _deliverer(url: str, instance_id: str, hooks: Hooks) -> Deliverer:
    """The notification deliverer, on a connection of its own: the loop's two never wait
    behind a notification's record."""
    posted = os.environ.get(POSTED_FILE_ENV)
    return Deliverer(
        make_pool(
            url, max_size=1, name=f"scheduler-daemon {instance_id} deliverer", configure=hooks.epoch
        ),
        instance_id=instance_id,
        on_failure=hooks.on_delivery_failure,
        on_post_failure=hooks.on_notification_failure,
        after_post=None if posted is None else _pause_after_post(posted),
    )


def open_pool(url: str, instance_id: str, epoch: EpochWatch | None = None) -> ConnectionPool:
    """The loop's pool: two connections, opened in the background, each sighting the server's
    epoch (`epoch`) before it is used."""
    pool = make_pool(url, max_size=2, name=f"scheduler-daemon {instance_id}", configure=epoch)
    pool.open(wait=False)
    return pool


def start_executors(
    pool: ConnectionPool,
    wake: threading.Event,
    spool_dir: Path | None,
    *,
    instance_id: str,
    settings: DaemonSettings,
    on_stuck: "Callable[[InProcessJob], None] | None" = None,
    on_untrusted: "Callable[[InProcessJob], None] | None" = None,
) -> dict[str, Executor]:
    """The daemon's executors, a job's end setting `wake`; the in-process one (key
    "inprocess") reports a job stuck past its stop grace, or past its trust deadline, to
    `on_stuck` and `on_untrusted`."""
    return make_executors(
        wake,
        spool_dir,
        concurrency=settings.concurrency,
        python_workers=python_workers(pool, instance_id=instance_id, settings=settings),
        in_process_stop_grace=settings.in_process_stop_grace.total_seconds(),
        on_stuck=on_stuck,
        on_untrusted=on_untrusted,
    )


def python_workers(pool: ConnectionPool, *, instance_id: str, settings: DaemonSettings) -> int:
    """How many python workers to start with the daemon: --concurrency when some task runs
    python jobs, so the first burst of them finds its workers running, else none (idle
    workers cost memory). A failed look-up starts none: jobs start them on demand."""
    try:
        with transaction(pool) as tx:
            found = task_store.python_exists(tx.conn)
    except (psycopg.Error, DatabaseUnavailable) as exc:
        log.warning("python_workers_not_started", instance_id=instance_id, error=first_line(exc))
        return 0
    return settings.concurrency if found else 0
