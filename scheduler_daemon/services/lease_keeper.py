"""LeaseKeeper: renews the leases of the runs this process holds, on its own thread and connection,
and stops the job of every run it learns it lost (fenced). It reports each pass's failure and its
thread's death to the daemon, which stops when the keeper cannot work (ADR 0005)."""

import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import timedelta
from typing import Any

import psycopg
import structlog

from scheduler_daemon.domain import timing
from scheduler_daemon.domain.held import HeldRuns, Lease
from scheduler_daemon.domain.storable import storable_output
from scheduler_daemon.lifecycle import Backoff, ThreadedService
from scheduler_daemon.settings import DaemonSettings
from scheduler_daemon.storage import instance_store, run_store
from scheduler_daemon.storage.database import (
    Configure,
    Limits,
    apply_limits,
    connect,
    first_line,
    is_connection_error,
)
from scheduler_daemon.storage.error import LOCK_ERRORS, DatabaseUnavailable, SchemaMismatch

log = structlog.get_logger()
RECONNECT_SECONDS = (0.25, 1.0)
"""After a pass that found the database unavailable, the keeper tries to connect again after
the first, doubling up to the second: the first renewal after an outage goes as soon as a
connection is back, not a renewal interval later."""


@dataclass(eq=False)
class LeaseKeeper(ThreadedService):
    """Every TTL/3: the heartbeat, in its own short transaction, then one statement renews every
    held (run id, occurrence id, token) whose row it can lock without waiting. A lease not
    renewed because it is no longer ours (taken over, cancelled) is fenced: its job is stopped
    at once and nothing is written for it. A row another session holds is tried again alone,
    waiting TTL/10 in all per pass; still held, it is neither renewed nor fenced: only its own
    job's trust deadline runs on. A renewed run with a cancel request has its job stopped and
    stays renewed until the completer writes `cancelled`, so the occurrence holds its slot until
    the job is gone. A renewal that fails extends nothing, so each job's trust deadline (time
    its own last good renewal was *sent* + TTL - margin, on the monotonic clock) runs out
    before its lease does."""

    url: str
    _: KW_ONLY
    instance_id: str
    settings: DaemonSettings
    held: HeldRuns
    slots_in_use: Callable[[], int]
    stopping: Callable[[], bool]  # the daemon drains: the heartbeat says so
    clock_drift: timedelta | None  # database minus host clock, re-measured every heartbeat
    reregister: Callable[[timedelta | None], None]
    # After each pass: the fenced run ids, or None when it failed.
    on_pass: Callable[[set[int] | None], None] = lambda _fenced: None
    # Set once the schema is one this build cannot work with.
    refused: Callable[[], SchemaMismatch | None] = lambda: None
    # Each failed pass (a refusal aside), for supervision.
    on_failure: Callable[[Exception], None] = lambda _exc: None
    # The thread ended before stop(): the daemon cannot go on.
    on_death: Callable[[BaseException | None], None] = lambda _exc: None
    configure: Configure | None = None  # run on each new connection first (the epoch's sighting)
    _down_since: float | None = field(default=None, init=False)  # monotonic: an outage began
    _conn: psycopg.Connection[Any] | None = field(default=None, init=False)
    stop_timeout = 10.0  # `stop` is called last at shutdown, after the drain

    def __post_init__(self) -> None:
        super().__init__("lease-keeper")
        self.log = log.bind(instance_id=self.instance_id)

    @property
    def _terms(self) -> run_store.LeaseTerms:
        return run_store.LeaseTerms(
            self.instance_id, self.settings.lease_ttl, self.settings.lease_grace
        )

    def _stopped(self, deadline: float) -> None:
        if self._conn is not None:
            self._conn.close()

    def _run(self) -> None:
        """The thread: passes until stopped; whatever ends it otherwise is reported."""
        try:
            self._loop()
        except BaseException as exc:
            self.log.critical("lease_keeper_died", error=repr(exc))
            self.on_death(exc)
            raise
        if not self.stop_requested.is_set():  # cannot happen today; if it does, it is a death
            self.on_death(None)

    def _loop(self) -> None:
        interval = self.settings.renew_interval.total_seconds()
        reconnect = Backoff(*RECONNECT_SECONDS)
        wait = interval
        while not self.stop_requested.wait(wait):
            if self._down_since is not None and not self._reconnected():
                wait = reconnect.next()
                continue
            self.reported_once()
            reconnect.reset()
            wait = reconnect.next() if self._down_since is not None else interval

    def _reconnected(self) -> bool:
        """During an outage: whether a connection (sighting the epoch) can be had now; then the
        pass that follows at once renews every held run and stops the jobs of those whose rows
        are gone or no longer this owner's at their token (fenced)."""
        try:
            self._connection()
        except DatabaseUnavailable:
            return False
        assert self._down_since is not None
        self.log.info(
            "lease_keeper_reconnected",
            down_seconds=round(time.monotonic() - self._down_since, 3),
            held=len(self.held),
        )
        return True

    def reported_once(self) -> set[int] | None:
        """One pass as the thread runs it: its failure is logged and reported (`on_failure`),
        never raised; `on_pass` hears the fenced run ids, or None when the pass failed."""
        fenced: set[int] | None = None
        try:
            fenced = self.run_once()
            self._down_since = None
        except SchemaMismatch as exc:  # the daemon stops; nothing was renewed
            self.log.warning("lease_renewal_refused", error=str(exc))
        except Exception as exc:  # reported: an outage or contention is no surprise
            if isinstance(exc, DatabaseUnavailable) and self._down_since is None:
                self._down_since = time.monotonic()
            if isinstance(exc, (DatabaseUnavailable, *LOCK_ERRORS)):
                self.log.warning("lease_renewal_failed", error=first_line(exc))
            else:  # with its traceback; supervision counts it (ADR 0005)
                self.log.exception("lease_keeper_error")
            self.on_failure(exc)
        self.on_pass(fenced)
        return fenced

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = connect(self.url, autocommit=True, configure=self.configure)
        return self._conn

    def _heartbeat(self, conn: psycopg.Connection[Any], wait: timedelta) -> None:
        """Writes the heartbeat in its own short transaction: an instance row someone else holds
        past `wait` skips it this pass (logged), and never holds back a renewal."""
        before = time.time()
        try:
            with conn.transaction():
                apply_limits(conn, _waiting(wait))
                db_now = instance_store.heartbeat(
                    conn,
                    self.instance_id,
                    slots_in_use=self.slots_in_use(),
                    clock_drift=self.clock_drift,
                    stopping=self.stopping(),
                )
        except psycopg.errors.LockNotAvailable:
            self.log.warning("instance_heartbeat_locked")
            return
        if db_now is None and not self.stopping():  # a peer removed us as dead: come back
            self.log.warning("instance_reregistered")
            self.reregister(self.clock_drift)
            return
        if db_now is None:
            return
        self.clock_drift = timing.clock_drift(db_now, before, time.time())

    def run_once(self) -> set[int]:
        """One renewal pass; returns the ids of the runs found fenced. A run whose row another
        session holds is not renewed this pass, and not fenced either: its job's trust deadline
        runs on, and only that job is stopped if the row stays held until it passes."""
        if (refusal := self.refused()) is not None:
            raise refusal  # renew nothing on a schema this build cannot work with
        leases = self.held.leases()
        wait = timing.renewal_lock_wait(self.settings.lease_ttl)
        try:
            conn = self._connection()
            # The heartbeat first: an instance removed while it was frozen re-registers, and
            # re-checks the schema, before it renews anything (a refusal renews nothing).
            self._heartbeat(conn, wait)
            sent = time.monotonic()
            with conn.transaction():  # every row it can lock now, none waited for
                apply_limits(conn, _waiting(wait))
                renewals = run_store.renew(conn, self._terms, leases)
            fenced = self._settle(renewals, sent)
            locked = [lease for lease in leases if renewals[lease.run_id].outcome == "locked"]
            fenced |= self._retry_locked(
                conn, locked, time.monotonic() + wait.total_seconds(), renewals
            )
            followed = [lease for lease in leases if renewals[lease.run_id].followed]
            for lease in followed:  # none unless someone runs `runs logs -f` (ADR 0014)
                self._write_output(conn, lease, wait)
        except psycopg.OperationalError as exc:
            if self._conn is not None and is_connection_error(exc):
                self._conn.close()
            raise DatabaseUnavailable(first_line(exc)) from exc
        except psycopg.errors.ReadOnlySqlTransaction as exc:  # a standby, or one demoted: an
            if self._conn is not None:  # outage; the next pass connects afresh (KNOWN-FAILURES 31)
                self._conn.close()
            raise DatabaseUnavailable(first_line(exc)) from exc
        return fenced

    def _retry_locked(
        self,
        conn: psycopg.Connection[Any],
        locked: list[Lease],
        until: float,
        renewals: dict[int, run_store.Renewal],
    ) -> set[int]:
        """Tries each lease whose row was held again, alone, waiting for its row no later than
        `until` (monotonic); one still held is left for the next pass. Returns those fenced;
        what became of each is put in `renewals`."""
        fenced: set[int] = set()
        for lease in locked:
            sent = time.monotonic()
            if sent >= until:  # no wait left in this pass: the next one renews it
                self._still_locked(lease)
                continue
            try:
                with conn.transaction():
                    apply_limits(conn, _waiting(timedelta(seconds=until - sent)))
                    renewal = run_store.renew_one(conn, self._terms, lease)
            except psycopg.errors.LockNotAvailable:
                self._still_locked(lease)
                continue
            renewals[lease.run_id] = renewal
            fenced |= self._settle({lease.run_id: renewal}, sent)
        return fenced

    def _write_output(self, conn: psycopg.Connection[Any], lease: Lease, wait: timedelta) -> None:
        """A followed run just renewed: writes its job's output so far, made storable (NUL
        replaced, the last 64 KiB cut at a character boundary), when it changed since the last
        write; fenced on owner and token in its own short transaction. A lost fence, a held row
        or a refused value writes nothing and is left to the next renewal."""
        run = self.held.get(lease.run_id)
        if run is None or run.fenced or run.completing:
            return
        live = run.job.live_output()
        if live is None:  # nothing to read (an http job, a spool between two owners of it)
            return
        text = storable_output(live)
        if text == run.output_written:
            return
        try:
            with conn.transaction():
                apply_limits(conn, _waiting(wait))
                written = run_store.write_output(
                    conn, owner=self.instance_id, lease=lease, output_tail=text or None
                )
        except _OUTPUT_NOT_WRITTEN as exc:
            self.log.warning(
                "run_output_not_written",
                run_id=lease.run_id,
                error=first_line(exc),
            )
            return
        if written:
            run.output_written = text
        else:  # the next renewal finds it fenced and stops its job
            self.log.info("run_output_fenced", run_id=lease.run_id)

    def _still_locked(self, lease: Lease) -> None:
        run = self.held.get(lease.run_id)
        self.log.warning(
            "run_renewal_locked",
            run_id=lease.run_id,
            occurrence_id=lease.occurrence_id,
            task_id=None if run is None else run.task_id,
        )

    def _settle(self, renewals: dict[int, run_store.Renewal], sent: float) -> set[int]:
        """Applies what a statement sent at `sent` did: each renewed run's own trust deadline
        moves; a fenced run's job is stopped; a locked one is left as it is."""
        deadline = self.settings.trust_deadline(sent)
        fenced: set[int] = set()
        for run_id, renewal in renewals.items():
            run = self.held.get(run_id)
            if run is None or renewal.outcome == "locked":
                continue
            if renewal.outcome == "renewed":
                run.renewed(deadline)
                if renewal.cancel_requested and not run.cancel_requested:
                    # A cancel request: stop the job, keep the lease until its end is written.
                    run.cancel_requested = True
                    run.job.stop("cancelled: a cancel was requested")
                    self.log.info(
                        "run_cancel_requested",
                        run_id=run_id,
                        occurrence_id=run.occurrence_id,
                        task_id=run.task_id,
                    )
            elif not run.completing:
                run.fenced = True
                fenced.add(run_id)
                run.job.stop("fenced: the lease was taken over or cancelled")
                if run.trace is not None:
                    run.trace.event("fenced", {"stage": "renewal"})
                self.log.warning(
                    "run_fenced",
                    stage="renewal",
                    run_id=run_id,
                    occurrence_id=run.occurrence_id,
                    task_id=run.task_id,
                )
        return fenced


_OUTPUT_NOT_WRITTEN: tuple[type[psycopg.Error], ...] = (
    *LOCK_ERRORS,
    psycopg.DataError,  # a value the column refuses: nothing is lost but the live view
    psycopg.IntegrityError,
)


def _waiting(wait: timedelta) -> Limits:
    """The keeper's transaction limits, waiting at most `wait` for a row lock."""
    return Limits(lock_timeout=f"{max(1, int(wait.total_seconds() * 1000))}ms")
