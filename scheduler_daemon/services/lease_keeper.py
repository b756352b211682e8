"""LeaseKeeper: renews the leases of the runs this process holds, on its own thread and connection,
and stops the job of every run it learns it lost (fenced). It reports each pass's failure and its
thread's death to the daemon, which stops when the keeper cannot work (ADR 0005)."""

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import structlog

from scheduler_daemon.domain import timing
from scheduler_daemon.domain.held import HeldRuns
from scheduler_daemon.settings import DaemonSettings
from scheduler_daemon.storage import instance_store, run_store
from scheduler_daemon.storage.database import (
    Limits,
    apply_limits,
    connect,
    first_line,
    is_connection_error,
)
from scheduler_daemon.storage.error import LOCK_ERRORS, DatabaseUnavailable, SchemaMismatch

log = structlog.get_logger()


class LeaseKeeper:
    """Every TTL/3: one statement renews exactly the held (run id, token) pairs. A pair not
    renewed was taken over: its job is stopped at once and nothing is written for it. A renewed
    pair with a cancel request has its job stopped and stays renewed until the completer writes
    `cancelled`, so the occurrence holds its slot until the job is gone. A renewal that fails
    extends nothing, so each job's trust deadline (time the last good renewal was *sent* + TTL -
    margin, on the monotonic clock) runs out before the lease does."""

    def __init__(
        self,
        url: str,
        *,
        instance_id: str,
        settings: DaemonSettings,
        held: HeldRuns,
        slots_in_use: Callable[[], int],
        stopping: Callable[[], bool],
        clock_drift: timedelta | None,
        reregister: Callable[[timedelta | None], None],
        on_pass: Callable[[set[int] | None], None] = lambda _fenced: None,
        refused: Callable[[], SchemaMismatch | None] = lambda: None,
        on_failure: Callable[[Exception], None] = lambda _exc: None,
        on_death: Callable[[BaseException | None], None] = lambda _exc: None,
    ) -> None:
        self.url = url
        self.instance_id = instance_id
        self.settings = settings
        self.held = held
        self.slots_in_use = slots_in_use
        self.stopping = stopping
        self.clock_drift = clock_drift  # database minus host clock, re-measured every heartbeat
        self.reregister = reregister
        self.on_pass = on_pass  # after each pass: the fenced run ids, or None when it failed
        self.refused = refused  # set once the schema is one this build cannot work with
        self.on_failure = on_failure  # each failed pass (a refusal aside), for supervision
        self.on_death = on_death  # the thread ended before stop(): the daemon cannot go on
        self._conn: psycopg.Connection[Any] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        """Whether the thread runs (before start: True, nothing has failed yet)."""
        return self._thread.ident is None or self._thread.is_alive() or self._stop.is_set()

    def stop(self) -> None:
        """Stops renewing; called last at shutdown, after the drain."""
        self._stop.set()
        self._thread.join(timeout=10)
        if self._conn is not None:
            self._conn.close()

    def _run(self) -> None:
        """The thread: passes until stopped; whatever ends it otherwise is reported."""
        try:
            self._loop()
        except BaseException as exc:
            log.critical("lease_keeper_died", error=repr(exc), instance_id=self.instance_id)
            self.on_death(exc)
            raise
        if not self._stop.is_set():  # cannot happen today; if it ever does, it is a death
            self.on_death(None)

    def _loop(self) -> None:
        interval = self.settings.renew_interval.total_seconds()
        while not self._stop.wait(interval):
            self.reported_once()

    def reported_once(self) -> set[int] | None:
        """One pass as the thread runs it: its failure is logged and reported (`on_failure`),
        never raised; `on_pass` hears the fenced run ids, or None when the pass failed."""
        fenced: set[int] | None = None
        try:
            fenced = self.run_once()
        except SchemaMismatch as exc:  # the daemon stops; nothing was renewed
            log.warning("lease_renewal_refused", error=str(exc), instance_id=self.instance_id)
        except Exception as exc:  # reported: an outage or contention is no surprise
            if isinstance(exc, (DatabaseUnavailable, *LOCK_ERRORS)):
                log.warning(
                    "lease_renewal_failed", error=first_line(exc), instance_id=self.instance_id
                )
            else:  # with its traceback; supervision counts it (ADR 0005)
                log.exception("lease_keeper_error", instance_id=self.instance_id)
            self.on_failure(exc)
        self.on_pass(fenced)
        return fenced

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = connect(self.url, autocommit=True)
        return self._conn

    def _heartbeat(self, conn: psycopg.Connection[Any]) -> None:
        before = time.time()
        db_now = instance_store.heartbeat(
            conn,
            self.instance_id,
            slots_in_use=self.slots_in_use(),
            clock_drift=self.clock_drift,
            stopping=self.stopping(),
        )
        if db_now is None and not self.stopping():  # a peer removed us as dead: come back
            log.warning("instance_reregistered", instance_id=self.instance_id)
            self.reregister(self.clock_drift)
            return
        if db_now is None:
            return
        self.clock_drift = timing.clock_drift(db_now, before, time.time())

    def run_once(self) -> set[int]:
        """One renewal pass; returns the ids of the runs found fenced."""
        if (refusal := self.refused()) is not None:
            raise refusal  # renew nothing on a schema this build cannot work with
        leases = self.held.leases()
        sent = time.monotonic()
        try:
            conn = self._connection()
            with conn.transaction():  # short: the renewal, then the heartbeat, with lock limits
                apply_limits(conn, Limits())
                # The heartbeat first: an instance removed while it was frozen re-registers, and
                # re-checks the schema, before it renews anything (a refusal rolls back).
                self._heartbeat(conn)
                renewed = run_store.renew(
                    conn,
                    owner=self.instance_id,
                    held=leases,
                    ttl=self.settings.lease_ttl,
                    grace=self.settings.lease_grace,
                )
        except psycopg.OperationalError as exc:
            if self._conn is not None and is_connection_error(exc):
                self._conn.close()
            raise DatabaseUnavailable(first_line(exc)) from exc
        except psycopg.errors.ReadOnlySqlTransaction as exc:  # a standby, or one demoted: an
            if self._conn is not None:  # outage; the next pass connects afresh (KNOWN-FAILURES 31)
                self._conn.close()
            raise DatabaseUnavailable(first_line(exc)) from exc
        deadline = self.settings.trust_deadline(sent)
        fenced: set[int] = set()
        for run_id, _ in leases:
            run = self.held.get(run_id)
            if run is None:
                continue
            if run_id in renewed:
                run.job.extend(deadline)
                if renewed[run_id] and not run.cancel_requested:
                    # A cancel request: stop the job, keep the lease until its end is written.
                    run.cancel_requested = True
                    run.job.stop("cancelled: a cancel was requested")
                    log.info(
                        "run_cancel_requested",
                        run_id=run_id,
                        occurrence_id=run.occurrence_id,
                        task_id=run.task_id,
                        instance_id=self.instance_id,
                    )
            elif not run.completing:
                run.fenced = True
                fenced.add(run_id)
                run.job.stop("fenced: the lease was taken over or cancelled")
                log.warning(
                    "run_fenced",
                    stage="renewal",
                    run_id=run_id,
                    occurrence_id=run.occurrence_id,
                    task_id=run.task_id,
                    instance_id=self.instance_id,
                )
        return fenced
