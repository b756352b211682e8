"""The daemon's place in the fleet and its schema check: waits for the database at start,
registers this process start's instance row (again, when a peer removed it) in the transaction
that judged the schema compatible (ADR 0002), re-judges the schema before each reconciliation, and
refuses (stops writing) as soon as the schema is one this build cannot work with."""

import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import timedelta

import psycopg
import structlog
from psycopg_pool import ConnectionPool

from scheduler_daemon.domain import timing
from scheduler_daemon.lifecycle import Backoff
from scheduler_daemon.runtime.health import LoopProgress
from scheduler_daemon.runtime.notify import Notifier
from scheduler_daemon.settings import DaemonSettings
from scheduler_daemon.storage import instance_store, migration
from scheduler_daemon.storage.database import Configure, connect, first_line, transaction
from scheduler_daemon.storage.error import DatabaseUnavailable, SchemaMismatch
from scheduler_daemon.version import __version__

log = structlog.get_logger()
START_RETRY_SECONDS = (1.0, 30.0)
"""While the database does not answer at start, it is tried again after the first, doubling up
to the second."""


@dataclass(eq=False)
class Registration:
    """`clock_drift` is the database clock minus this host's, as measured at registration;
    `refused` is set (and `on_refused` called) once the schema turns incompatible."""

    url: str
    _: KW_ONLY
    instance_id: str
    settings: DaemonSettings
    progress: LoopProgress
    notifier: Notifier
    on_refused: Callable[[], None]
    configure: Configure | None = None  # run on each new connection first (the epoch's sighting)
    clock_drift: timedelta | None = field(default=None, init=False)
    refused: SchemaMismatch | None = field(default=None, init=False)  # incompatible: exit
    _head: str | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.log = log.bind(instance_id=self.instance_id)

    def wait_for_database(self, stop: threading.Event) -> bool:
        """Retries with back-off until the database answers (True) or `stop` is set (False)."""
        backoff = Backoff(*START_RETRY_SECONDS)
        while not stop.is_set():
            try:
                connect(self.url, configure=self.configure).close()
            except DatabaseUnavailable as exc:
                delay = backoff.next()
                self.log.warning("database_unavailable_at_start", error=str(exc), retry_in=delay)
                self.notifier.status(f"waiting for the database (retry in {delay:g}s): {exc}")
                self.progress.tick()  # waiting is what the loop should do now: it is alive
                stop.wait(delay)
            else:
                return True
        return False

    def head_revision(self) -> str:
        """This build's schema revision, read from the migration scripts once."""
        if self._head is None:
            self._head = migration.head_revision()
        return self._head

    def database_problem(self) -> str | None:
        """/readyz's database check, on a connection of its own: None when fine."""
        try:
            verdict = migration.state(self.url).verdict
        except DatabaseUnavailable as exc:
            return str(exc)
        except psycopg.Error as exc:
            return f"database error: {first_line(exc)}"
        return None if verdict.ok else verdict.message

    def measure_drift(self) -> timedelta:
        """Database clock minus this host's; reported, never used to coordinate."""
        with connect(self.url, autocommit=True, configure=self.configure) as conn:
            before = time.time()
            db_now = instance_store.database_clock(conn)
            after = time.time()
        return timing.clock_drift(db_now, before, after)

    def register(self) -> None:
        self.register_instance(self.measure_drift())

    def register_instance(self, clock_drift: timedelta | None) -> None:
        """Inserts this process start's instance row (again, if a peer removed it), in the
        transaction that judged the schema compatible (ADR 0002): a contract in progress is
        waited for, and a schema this build cannot work with is refused before any write."""
        head = self.head_revision()
        self.clock_drift = clock_drift
        with connect(self.url, configure=self.configure) as conn, conn.transaction():
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

    def reregister(self, clock_drift: timedelta | None) -> None:
        """The lease keeper found this instance's row removed (it was frozen or cut off past
        --instance-expiry): register again, unless the schema changed under it meanwhile."""
        try:
            self.register_instance(clock_drift)
        except SchemaMismatch as exc:
            self.refuse(exc)
            raise  # the lease keeper rolls back its renewal

    def check_schema(self, pool: ConnectionPool) -> None:
        """Stop writing as soon as the schema is one this build cannot work with."""
        with transaction(pool) as tx:
            verdict = migration.state_of(tx.conn).verdict
        if not verdict.ok:
            try:
                migration.raise_unless_compatible(verdict)
            except SchemaMismatch as exc:
                self.refuse(exc)

    def refuse(self, exc: SchemaMismatch) -> None:
        self.log.error("schema_incompatible", error=str(exc))
        self.refused = exc
        self.on_refused()

    def deregister(self) -> None:
        with connect(self.url, configure=self.configure) as conn, conn.transaction():
            instance_store.deregister(conn, self.instance_id)
