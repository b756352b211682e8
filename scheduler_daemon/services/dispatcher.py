"""Dispatcher: turns due tasks into occurrences, applying the misfire and overlap policies."""

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import psycopg
import structlog
from psycopg_pool import ConnectionPool

from scheduler_daemon.domain.calendar import Exclusion, read_window
from scheduler_daemon.domain.misfire import DispatchPlan, plan_dispatch
from scheduler_daemon.domain.spread import spread_offset
from scheduler_daemon.domain.status import (
    LostReason,
    OccurrenceStatus,
    OverlapPolicy,
    ScheduleKind,
)
from scheduler_daemon.domain.task import TaskRecord
from scheduler_daemon.storage import (
    calendar_store,
    migration,
    occurrence_store,
    outbox_store,
    task_store,
)
from scheduler_daemon.storage.database import Conn, first_line, transaction

log = structlog.get_logger()


@dataclass
class DispatchResult:
    tasks: int = 0
    queued: int = 0
    skipped: int = 0
    db_now: datetime | None = None
    next_due: datetime | None = None  # the earliest task not yet due falls due then
    locked: tuple[int, ...] = ()  # tasks still due: rows it could not lock (held elsewhere)
    queue_due: bool = False  # a queued occurrence may start by now (read at the last commit)
    ready: int = 0  # of `queued`, the occurrences that may start now (no spread start ahead)
    # Spread starts still ahead of the occurrences it queued (database clock): the loop claims
    # at each, where nothing wakes it (--spread).
    spread_starts: list[datetime] = field(default_factory=list)


class Dispatcher:
    """Claims due tasks with SKIP LOCKED in batches; for each, in the same transaction, inserts
    its occurrences (sequence allocated under the task lock) and advances `next_run_at`, in one
    statement (`occurrence_dispatch`)."""

    def __init__(
        self,
        pool: ConnectionPool,
        *,
        instance_id: str,
        batch: int,
        known: Sequence[str] | None = None,
    ) -> None:
        self.pool = pool
        self.instance_id = instance_id
        self.batch = batch
        # The revisions whose marked tasks it may dispatch (ADR 0029): its own chain's.
        self.known = list(known) if known is not None else migration.known_revisions()

    def run_once(self, now: datetime | None = None, *, claims_after: int = 0) -> DispatchResult:
        """Dispatches every due task, a batch per transaction: the due scan goes with its BEGIN,
        each task is one round trip, and the next due time with its COMMIT, read beside the
        tasks still due, whose rows the scan skipped (`locked`: the loop backs off from them
        until its next poll). `claims_after`: how many occurrences this daemon's own claim,
        right after, can start; only the ones queued beyond that wake the idle daemons (each
        woken peer takes the budget lock to claim nothing)."""
        result = DispatchResult()
        while True:
            due = task_store.claim_due(self.batch, now, known=self.known)
            with transaction(self.pool, clock=True, now=now, first=due) as tx:
                tasks = tx.result
                # A parked row is progress too: it left the due scan, so the next batch differs.
                dispatched = sum(self._dispatch_one(tx.conn, row, tx.now, result) for row in tasks)
                result.tasks += len(tasks)
                result.db_now = tx.now
                wake = result.ready > claims_after
                left = task_store.commit_next_due(
                    tx.conn, wake=wake, limit=self.batch, known=self.known, now=now
                )
                result.next_due, result.locked = left.next_due, tuple(left.locked)
                result.queue_due = left.queue_due
            if len(tasks) < self.batch or not dispatched:
                return result

    def _dispatch_one(
        self, conn: Conn, row: dict[str, Any], db_now: datetime, result: DispatchResult
    ) -> bool:
        """One task, its writes in a savepoint. A task whose row cannot be read or planned (a
        cron expression or zone this build rejects), or whose writes fail, is parked with its
        error, out of the due scan until a `tasks update` fixes it, so it costs nothing and
        never stops the others."""
        try:
            self._dispatch(conn, task_store.record(row), db_now, result, row.get("calendar_ids"))
        except psycopg.OperationalError as exc:
            if not isinstance(exc, psycopg.errors.ProgramLimitExceeded):
                raise  # lock timeouts, lost connections: the whole pass is retried
            self._park(conn, row["id"], exc, db_now)  # a value too big for an index
        except Exception as exc:  # a poison row: park it, every other task must still fire
            self._park(conn, row["id"], exc, db_now)
        return True

    def _park(self, conn: Conn, task_id: int, exc: Exception, db_now: datetime) -> None:
        error = first_line(exc)
        task_store.park(conn, task_id, error=error, now=db_now)
        log.error("task_parked", task_id=task_id, error=error, instance_id=self.instance_id)

    def _dispatch(
        self,
        conn: Conn,
        task: TaskRecord,
        db_now: datetime,
        result: DispatchResult,
        calendar_ids: list[int] | None = None,
    ) -> None:
        spec = task.spec
        assert task.next_run_at is not None
        plan = plan_dispatch(
            spec.schedule(),
            next_run_at=task.next_run_at,
            now=db_now,
            misfire=spec.misfire,
            misfire_grace=spec.misfire_grace,
            catchup_limit=spec.catchup_limit,
            catchup_window=spec.catchup_window,
            overlap=spec.overlap,
            # Only `forbid` looks at what is active: the others skip the count's round trip.
            active=spec.overlap == OverlapPolicy.FORBID
            and occurrence_store.active_count(conn, task.id) > 0,
            # Only a task with calendars reads their dates: the others skip the round trip.
            exclusion=_exclusion(conn, task, db_now) if calendar_ids else None,
        )
        once_fired = spec.schedule_kind == ScheduleKind.ONCE and bool(plan.firings)
        rows, recorded = self._record(conn, task, plan, once_fired=once_fired, db_now=db_now)
        if len(recorded.firings) < len(plan.firings):  # its first row extended the newest
            result.skipped += plan.firings[0].firing_count
        plan = recorded
        inserted = {row["scheduled_for"]: row for row in rows}
        _notify(conn, task, rows, db_now)
        for firing in plan.firings:
            row = inserted.get(firing.scheduled_for)
            if row is None:  # the unique scheduled firing: someone recorded it already
                log.warning(
                    "firing_already_recorded",
                    task_id=task.id,
                    scheduled_for=firing.scheduled_for.isoformat(),
                    instance_id=self.instance_id,
                )
                continue
            if firing.status == OccurrenceStatus.QUEUED:
                result.queued += 1
                if row["not_before"] > db_now:
                    result.spread_starts.append(row["not_before"])
                else:
                    result.ready += 1
            else:
                result.skipped += firing.firing_count
            log.debug(
                "occurrence_created",
                task_id=task.id,
                occurrence_id=row["id"],
                status=firing.status,
                reason=firing.reason,
                instance_id=self.instance_id,
            )

    def _record(
        self,
        conn: Conn,
        task: TaskRecord,
        plan: DispatchPlan,
        *,
        once_fired: bool,
        db_now: datetime,
    ) -> tuple[list[dict[str, Any]], DispatchPlan]:
        """Writes the plan (`occurrence_store.dispatch`), a `replace` task's predecessors
        replaced first when it queues a firing, and a run of excluded firings that continues
        the task's newest row extending that row (`_extend_excluded`). Each of those and the
        plan's rows stand or fall together: a dispatch that fails (the task is parked) must not
        have stopped the predecessor, or recorded firings its next due time still owes. Returns
        the rows inserted and the plan they were inserted for."""
        replaces = task.spec.overlap == OverlapPolicy.REPLACE and any(
            f.status == OccurrenceStatus.QUEUED for f in plan.firings
        )
        extends = bool(plan.firings) and plan.firings[0].reason == LostReason.EXCLUDED
        with conn.transaction() if replaces or extends else contextlib.nullcontext():
            if replaces:
                self._replace(conn, task, db_now)
            if extends:
                plan = _extend_excluded(conn, task, plan, db_now)
            offsets = _offsets(task, [f.scheduled_for for f in plan.firings])
            rows = occurrence_store.dispatch(
                conn, task, plan, once_fired=once_fired, now=db_now, spread_offsets=offsets
            )
        return rows, plan

    def _replace(self, conn: Conn, task: TaskRecord, db_now: datetime) -> None:
        """The new firing of a `replace` task replaces its active predecessors, before it is
        inserted (the task is locked): a queued one is cancelled, a running one asked to stop;
        the claim starts the new one once that job is gone (sd_claim_launch_v6)."""
        replaced = occurrence_store.cancel_active(
            conn, task.id, reason=LostReason.REPLACED, requested_by=None, now=db_now
        )
        for predecessor in replaced:
            log.info(
                "occurrence_replaced",
                task_id=task.id,
                occurrence_id=predecessor.id,
                status=predecessor.status,
                cancel_requested=predecessor.status == OccurrenceStatus.RUNNING,
                instance_id=self.instance_id,
            )


def _notify(conn: Conn, task: TaskRecord, rows: list[dict[str, Any]], db_now: datetime) -> None:
    """The skipped firings' notifications, in the transaction that records them, one per
    reason however many firings it skipped (coalesced after an outage: one POST, counting
    them); an excluded firing is the task's own calendar at work, never a notification (ADR
    0025)."""
    rows = [row for row in rows if row["reason"] != LostReason.EXCLUDED]
    skipped = [row["id"] for row in rows if row["status"] == OccurrenceStatus.SKIPPED]
    outbox_store.enqueue(conn, skipped, savepoint=True, grouped=True)
    deadline = task.spec.deadline
    if deadline is not None:  # firings recorded past their deadline (ADR 0016)
        late = [r["id"] for r in rows if r["scheduled_for"] + deadline <= db_now]
        outbox_store.enqueue_late_deadlines(conn, late, now=db_now)


def _exclusion(conn: Conn, task: TaskRecord, db_now: datetime) -> Exclusion:
    """The dates the task's calendars exclude, read in the dispatch transaction (so a calendar
    changed since the last pass applies from this one), from its oldest due firing to now."""
    assert task.next_run_at is not None
    low, high = read_window(task.next_run_at, db_now)
    days = calendar_store.days_for_task(conn, task.id, low, high)
    return Exclusion(task.spec.timezone, days, db_now)


def _extend_excluded(
    conn: Conn, task: TaskRecord, plan: DispatchPlan, db_now: datetime
) -> DispatchPlan:
    """The plan without its first row, an excluded run, when that run continues the task's
    newest scheduled row, itself an excluded run ending at the fire time just before it: that
    row is extended instead (ADR 0025). Consecutive excluded firings are one row across passes
    as within one, and no row is written before its firings are due, so a calendar changed,
    or a task paused, resumed or rescheduled inside a holiday, changes what the next pass
    records, and no firing is ever in two rows."""
    first = plan.firings[0]
    newest = calendar_store.newest_scheduled(conn, task.id)
    if (
        newest is None
        or (newest["status"], newest["reason"]) != (OccurrenceStatus.SKIPPED, LostReason.EXCLUDED)
        or task.spec.schedule().next_after(newest["ends"]) != first.scheduled_for
    ):
        return plan  # a new run: a queued firing, a pause or a reschedule lies between
    last = first.last_scheduled_for or first.scheduled_for
    calendar_store.extend_excluded(
        conn, newest["id"], count=first.firing_count, last=last, now=db_now
    )
    return replace(plan, firings=plan.firings[1:])


def _offsets(task: TaskRecord, nominal: list[datetime]) -> list[timedelta | None] | None:
    """Each firing's spread offset (domain/spread.py), None without `--spread`."""
    spread = task.spec.spread
    if spread is None:
        return None
    return [spread_offset(task.id, at, spread) for at in nominal]
