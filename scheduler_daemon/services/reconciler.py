"""Reconciler: repairs work whose owner is provably gone, one orphan per short transaction.

Safe when several daemons (and `recover`) run it at once: each fix locks task → occurrence → run
and re-checks with a compare-and-set what the scan saw, so exactly one reconciler wins and a fix
that lost its race changes nothing. Scans page through in id order, so a backlog larger than one
page is drained in one pass.
"""

import functools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

import structlog
from psycopg_pool import ConnectionPool

from scheduler_daemon.domain import control, timing
from scheduler_daemon.domain.occurrence import ExpiredClaim, OccurrenceRef
from scheduler_daemon.domain.outcome import decide, finalize_one_shot, settlement, task_outcome
from scheduler_daemon.domain.run import TakeoverCandidate
from scheduler_daemon.domain.status import LostReason, OccurrenceStatus, OutcomeStatus, TaskStatus
from scheduler_daemon.domain.task import TaskRef
from scheduler_daemon.domain.trace import RunTracer
from scheduler_daemon.settings import DaemonSettings
from scheduler_daemon.storage import (
    instance_store,
    migration,
    occurrence_store,
    outbox_store,
    run_store,
    task_store,
)
from scheduler_daemon.storage.database import (
    FIRST_TRY_LIMITS,
    UNIT_LIMITS,
    Conn,
    Limits,
    first_line,
    transaction,
)
from scheduler_daemon.storage.error import LOCK_ERRORS, about_the_row

log = structlog.get_logger()
# The deadline scan judges the firings whose deadline passed since the fleet's mark (the
# instant every deadline before was judged by a completed scan, kept in the database), looking
# this far behind it (a firing recorded by a transaction that committed after the scan that
# passed it, or by an operator's command), in windows of at most this length after it: a fleet
# back from a long outage catches up a window at a time, each an index range per task with a
# deadline (ADR 0016).
DEADLINE_LOOKBACK = timedelta(hours=1)
DEADLINE_WINDOWS = 24  # windows per pass at most: a day's outage caught up in one pass
DEADLINE_PAGE = 500
LOCKED = object()  # a unit's rows were locked by someone else past its lock wait
CATEGORIES = (
    "taken_over",
    "requeued_claims",
    "expired",
    "finalized_tasks",
    "resumed_tasks",
    "removed_instances",
)


class Seen(Protocol):
    """A row a scan saw (TakeoverCandidate, OccurrenceRef, TaskRef): paged by its id."""

    @property
    def id(self) -> int: ...


@dataclass
class ReconcileReport:
    """Ids per category: changed, or with `dry_run` what would change."""

    dry_run: bool = False
    ids: dict[str, list[Any]] = field(default_factory=lambda: {c: [] for c in CATEGORIES})

    @property
    def counts(self) -> dict[str, int]:
        return {c: len(v) for c, v in self.ids.items()}

    @property
    def changed(self) -> int:
        return sum(self.counts.values())

    def add(self, other: "ReconcileReport") -> None:
        for category, ids in other.ids.items():
            self.ids[category] += [i for i in ids if i not in self.ids[category]]


@dataclass(eq=False)
class Reconciler:
    pool: ConnectionPool
    _: KW_ONLY
    instance_id: str
    restart_quiet: timedelta
    max_interruptions: int
    dead_after: timedelta
    page: int = 100
    tracer: RunTracer | None = None  # a takeover is a short span of its own (--otel)
    # The revisions whose marked rows it may repair (ADR 0029): its own chain's by default.
    known: Sequence[str] = field(default_factory=migration.known_revisions)

    def __post_init__(self) -> None:
        self.log = log.bind(instance_id=self.instance_id)

    @classmethod
    def from_settings(
        cls,
        pool: ConnectionPool,
        instance_id: str,
        settings: DaemonSettings,
        tracer: RunTracer | None = None,
    ) -> "Reconciler":
        """The daemon's reconciler and `recover`'s alike: one reading of the settings."""
        return cls(
            pool,
            instance_id=instance_id,
            restart_quiet=settings.restart_quiet,
            max_interruptions=settings.max_interruptions,
            dead_after=settings.instance_expiry,
            tracer=tracer,
        )

    def run_once(self, *, dry_run: bool = False) -> ReconcileReport:
        report = ReconcileReport(dry_run=dry_run)
        steps: list[tuple[str, Callable[..., Sequence[Seen]], Callable[[Any, Limits], Any]]] = [
            ("taken_over", self._takeover_page, self._take_over),
            ("requeued_claims", self._claims_page, self._requeue_claim),
            ("expired", self._deadline_page, self._expire),
            ("finalized_tasks", self._one_shots_page, self._finalize),
            ("resumed_tasks", self._pauses_page, self._resume),
        ]
        for category, page, fix in steps:
            locked: list[Seen] = []
            for candidate in self._candidates(page):
                if dry_run:
                    report.ids[category].append(candidate.id)
                    continue
                fixed = self._isolated(category, fix, candidate, FIRST_TRY_LIMITS)
                if fixed is LOCKED:
                    locked.append(candidate)
                elif fixed is not None:
                    report.ids[category].append(fixed)
            for candidate in locked:  # after all the others: a held row delays only its own fix
                fixed = self._isolated(category, fix, candidate, UNIT_LIMITS)
                if fixed is not None and fixed is not LOCKED:
                    report.ids[category].append(fixed)
        dead = instance_store.dead if dry_run else instance_store.remove_dead
        removed = self._isolated(
            "removed_instances",
            lambda _, limits: self._in_unit(limits, dead, self.dead_after),
            None,
            UNIT_LIMITS,
        )
        report.ids["removed_instances"] = [] if removed is LOCKED else removed or []
        if not dry_run:
            self._isolated(
                "deadlines", lambda _, limits: self._notify_deadlines(limits), None, UNIT_LIMITS
            )
        if report.changed:
            self.log.info("reconciled", dry_run=dry_run, **report.counts)
        self.log.debug("reconcile_pass", dry_run=dry_run)  # a test signal; cheap at info level
        return report

    # -- recover --wait --------------------------------------------------------------------------
    def inside_lease(self) -> list[dict[str, Any]]:
        """The running runs left after a pass, each with `takeover_from` (database clock),
        whether its owner still `renewing`, and the database's `db_now`."""
        with transaction(self.pool) as tx:
            return run_store.inside_lease(
                tx.conn,
                restart_quiet=self.restart_quiet,
                overdue=timing.renewal_overdue_per_ttl(),
            )

    def wait_for_takeovers(
        self,
        limit: timedelta,
        report: ReconcileReport,
        *,
        on_wait: Callable[[list[dict[str, Any]], datetime], None],
        poll: float = 1.0,
    ) -> list[dict[str, Any]]:
        """After a pass: waits, at most `limit` from now on the database clock, for the takeover
        points of the runs whose owner stopped renewing, and takes each over with another pass
        as soon as its point has passed; `on_wait` hears what is waited for and until when,
        whenever that changes. Runs whose owner still renews are not waited for (a renewal
        moves their point on, and an owner that starts renewing again leaves the wait). Adds
        what the passes changed to `report`; returns the runs still running at the end."""
        inside = self.inside_lease()
        if not inside:
            return inside
        deadline = inside[0]["db_now"] + limit
        announced: list[int] = []
        while True:
            now = inside[0]["db_now"] if inside else deadline
            waiting = [r for r in inside if not r["renewing"] and r["takeover_from"] <= deadline]
            if not waiting or now > deadline:
                return inside
            if [r["id"] for r in waiting] != announced:
                announced = [r["id"] for r in waiting]
                on_wait(waiting, max(r["takeover_from"] for r in waiting))
            due = min(r["takeover_from"] for r in waiting)
            if due >= now:
                # A duration from two database readings; the pass re-checks on the database clock.
                time.sleep(min((due - now).total_seconds(), poll) + 0.01)
            else:
                passed = self.run_once()
                report.add(passed)
                if not passed.counts["taken_over"]:  # locked, or lost a race: not a spin
                    time.sleep(poll / 4)
            inside = self.inside_lease()

    def _isolated(
        self,
        category: str,
        fix: Callable[[Any, Limits], Any],
        seen: Seen | None,
        limits: Limits,
    ) -> Any:
        """Runs one fix as its own unit: one that cannot lock its rows in time (a row held by an
        operator, a slow migration, a frozen peer) returns LOCKED and is left for a later try,
        and every other unit still runs. A failure with the full unit wait is logged. A fix
        that raised about its row's values (`about_the_row`) becomes that row's outcome: its
        task parked with the error (`_row_failed`), and the pass goes on."""
        try:
            return fix(seen, limits)
        except LOCK_ERRORS as exc:
            if limits is not FIRST_TRY_LIMITS:
                self.log.warning(
                    "reconcile_unit_failed",
                    category=category,
                    id=None if seen is None else seen.id,
                    error=first_line(exc),
                )
            return LOCKED
        except Exception as exc:
            if not about_the_row(exc):
                raise
            self._row_failed(category, seen, exc, limits)
            return None

    def _row_failed(self, category: str, seen: Seen | None, exc: Exception, limits: Limits) -> None:
        """A fix that raised about its row: the task it concerns is parked with the error, out
        of the due scan until an update fixes it (`status` and `tasks show` say why); said once,
        when it parks (a later pass that meets the row again parks nothing and says it at debug
        level). A unit about no task is logged."""
        error = f"reconcile {category} failed: {first_line(exc)}"
        task_id = getattr(seen, "task_id", seen.id if isinstance(seen, TaskRef) else None)
        parked = False
        if task_id is not None:
            with transaction(self.pool, limits) as tx:
                parked = task_store.park(
                    tx.conn, task_id, error=error, now=task_store.clock(tx.conn)
                )
        if parked or task_id is None:
            self.log.error(
                "task_parked" if parked else "reconcile_unit_failed",
                category=category,
                id=None if seen is None else seen.id,
                task_id=task_id,
                error=error,
            )
        else:
            self.log.debug("reconcile_unit_failed", category=category, task_id=task_id, error=error)

    def _notify_deadlines(self, limits: Limits) -> int:
        """The `deadline` notifications firings owe (ADR 0016), in short transactions: the
        recorded firings whose deadline fell in the window after the fleet's mark (pages of
        DEADLINE_PAGE until one comes back short), the mark raised past each window judged
        whole, then the due firings not recorded past their deadline."""
        total = 0
        for _ in range(DEADLINE_WINDOWS):
            with transaction(self.pool, limits) as tx:
                after, until, caught_up = outbox_store.deadline_window(
                    tx.conn, lookback=DEADLINE_LOOKBACK
                )
            total += self._pages(
                limits,
                functools.partial(
                    outbox_store.enqueue_deadlines, after=after, until=until, limit=DEADLINE_PAGE
                ),
            )
            with transaction(self.pool, limits) as tx:
                outbox_store.advance_deadline_mark(tx.conn, until)
            if caught_up:
                break
        total += self._pages(
            limits,
            functools.partial(outbox_store.enqueue_unrecorded_deadlines, limit=DEADLINE_PAGE),
        )
        if total:
            self.log.info("deadline_notifications_recorded", notifications=total)
        return total

    def _pages(self, limits: Limits, page: Callable[[Conn], int]) -> int:
        """Runs `page` in a transaction of its own until it records fewer than DEADLINE_PAGE."""
        total = 0
        while True:
            with transaction(self.pool, limits) as tx:
                added = page(tx.conn)
            total += added
            if added < DEADLINE_PAGE:
                return total

    def _in_unit(self, limits: Limits, step: Callable[..., Any], *args: Any) -> Any:
        with transaction(self.pool, limits) as tx:
            return step(tx.conn, *args)

    def _candidates(self, page: Callable[..., Sequence[Seen]]) -> Iterator[Seen]:
        after = 0
        while True:
            with transaction(self.pool) as tx:
                rows = page(tx.conn, after=after, limit=self.page)
            yield from rows
            if len(rows) < self.page:
                return
            after = rows[-1].id

    # -- pages -----------------------------------------------------------------------------------
    def _takeover_page(self, conn: Conn, **kw: Any) -> list[TakeoverCandidate]:
        return run_store.takeover_candidates(
            conn, restart_quiet=self.restart_quiet, known=self.known, **kw
        )

    def _claims_page(self, conn: Conn, **kw: Any) -> list[ExpiredClaim]:
        return occurrence_store.expired_claims(conn, known=self.known, **kw)

    def _deadline_page(self, conn: Conn, **kw: Any) -> list[OccurrenceRef]:
        return occurrence_store.past_deadline(conn, known=self.known, **kw)

    def _one_shots_page(self, conn: Conn, **kw: Any) -> list[TaskRef]:
        return task_store.unfinished_one_shots(conn, known=self.known, **kw)

    def _pauses_page(self, conn: Conn, **kw: Any) -> list[TaskRef]:
        return task_store.pauses_ended(conn, known=self.known, **kw)

    # -- fixes: each one transaction, task → occurrence → run ------------------------------------
    def _take_over(self, seen: TakeoverCandidate, limits: Limits = UNIT_LIMITS) -> int | None:
        with transaction(self.pool, limits) as tx:
            task = task_store.lock_row(tx.conn, seen.task_id)
            occ = occurrence_store.lock(tx.conn, seen.occurrence_id)
            run_store.lock(tx.conn, seen.id)
            if not run_store.take_over(
                tx.conn,
                seen.id,
                token=seen.lease_token,
                by=self.instance_id,
                restart_quiet=self.restart_quiet,
                error=f"taken over: {seen.owner} stopped renewing",
            ):
                return None  # the owner finished it or another reconciler won
            if (
                occ is not None
                and occ.status == OccurrenceStatus.RUNNING
                and occ.lease_token == seen.lease_token
            ):
                decision = decide(
                    OutcomeStatus.STOPPED,
                    attempts=occ.attempts,
                    max_attempts=task.spec.max_attempts if task else 1,
                    interruptions=occ.interruptions,
                    max_interruptions=self.max_interruptions,
                    backoff=timedelta(0),
                    cancel_reason=occ.cancel_reason,  # a pending cancel ends here
                )
                error = f"interrupted: {seen.owner} stopped renewing its lease"
                occurrence_store.settle(
                    tx.conn,
                    occ,
                    token=seen.lease_token,
                    settlement=settlement(occ, decision, error),
                )
        self.log.warning(
            "run_taken_over",
            run_id=seen.id,
            occurrence_id=seen.occurrence_id,
            task_id=seen.task_id,
            owner=seen.owner,
        )
        if self.tracer is not None:
            self.tracer.takeover(
                {
                    "scheduler.run.id": seen.id,
                    "scheduler.occurrence.id": seen.occurrence_id,
                    "scheduler.task.id": seen.task_id,
                    "scheduler.lease_token": seen.lease_token,
                    "scheduler.previous_owner": seen.owner,
                    "scheduler.instance_id": self.instance_id,
                }
            )
        return seen.id

    def _requeue_claim(self, seen: ExpiredClaim, limits: Limits = UNIT_LIMITS) -> int | None:
        with transaction(self.pool, limits) as tx:
            task_store.lock_row(tx.conn, seen.task_id)
            occurrence_store.lock(tx.conn, seen.id)
            if not occurrence_store.requeue_claim(tx.conn, seen.id, token=seen.lease_token):
                return None
        self.log.info("claim_requeued", occurrence_id=seen.id, task_id=seen.task_id)
        return seen.id

    def _expire(self, seen: OccurrenceRef, limits: Limits = UNIT_LIMITS) -> int | None:
        with transaction(self.pool, limits) as tx:
            task_store.lock_row(tx.conn, seen.task_id)
            occurrence_store.lock(tx.conn, seen.id)
            expired = occurrence_store.expire(tx.conn, seen.id)
            if expired is None:
                return None
            task_store.record_outcome(
                tx.conn,
                seen.task_id,
                task_outcome(expired, OccurrenceStatus.EXPIRED, "start deadline passed"),
            )
        self.log.warning(
            "occurrence_expired",
            occurrence_id=seen.id,
            task_id=seen.task_id,
            reason=LostReason.START_DEADLINE,
        )
        return seen.id

    def _finalize(self, seen: TaskRef, limits: Limits = UNIT_LIMITS) -> int | None:
        """Finalizes a one-shot task from its latest occurrence, read after the task lock."""
        with transaction(self.pool, limits) as tx:
            task = task_store.lock_row(tx.conn, seen.id)
            if task is None or task.status != TaskStatus.RUNNING:
                return None
            end = finalize_one_shot(occurrence_store.latest(tx.conn, task.id))
            if end is None:
                return None  # still active: a later pass looks again
            if end.outcome is not None:
                task_store.record_outcome(tx.conn, task.id, end.outcome)
            task_store.finish_lifecycle(tx.conn, task.id, status=end.status, error=end.error)
        self.log.info("task_finalized", task_id=seen.id)
        return seen.id

    def _resume(self, seen: TaskRef, limits: Limits = UNIT_LIMITS) -> int | None:
        """Resumes a task whose `--until` pause ended, as `tasks resume` would at its instant
        (the next firing from it: paused firings are not owed, later ones are), recorded as
        the action of `scheduler`, in one transaction. Re-read after the task lock: an
        operator's resume or pause since the scan (which clears or moves the end) wins, and
        only one reconciler resumes it."""
        with transaction(self.pool, limits) as tx:
            task = task_store.lock_row(tx.conn, seen.id)
            if task is None or task.deleted_at is not None:
                return None
            plan = control.plan_resume(task, task_store.clock(tx.conn), pending=True)
            if plan is None or not task_store.end_pause(
                tx.conn,
                task.id,
                next_run_at=plan.next_run_at,
                status=plan.status,
                error=plan.error,
            ):
                return None
        self.log.info("task_pause_ended", task_id=seen.id, paused_until=task.paused_until)
        return seen.id
