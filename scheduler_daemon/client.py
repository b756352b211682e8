"""The Python API for defining and inspecting tasks; the `tasks`, `runs`, `config` commands use it.

Each call is one short transaction on the Client's one reused connection (opened on first use,
reopened after a fork or a lost connection; `close()` or `with Client(...)` ends it). Every time it
reads comes from the database clock (`now` pins it in tests), and every multi-row change locks the
task row first. `add_tasks` and `trigger(count=N)` do many rows in one transaction.
"""

import functools
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal, TypeVar

import psycopg

from scheduler_daemon.backfill import BackfillResult, queue_backfill
from scheduler_daemon.domain import argument, backfill, control
from scheduler_daemon.domain import limit as bound
from scheduler_daemon.domain.instance import Instance
from scheduler_daemon.domain.lock_holder import CONFIRM_AFTER_SECONDS, LockHolder, held_throughout
from scheduler_daemon.domain.misfire import Firing
from scheduler_daemon.domain.occurrence import Occurrence
from scheduler_daemon.domain.outcome import task_outcome
from scheduler_daemon.domain.run import HistoryRow, RunDetail
from scheduler_daemon.domain.status import (
    OccurrenceStatus,
    OverlapPolicy,
    RunStatus,
    TaskStatus,
    Trigger,
)
from scheduler_daemon.domain.task import InvalidTask, TaskRecord, TaskSpec
from scheduler_daemon.domain.timing import renew_interval
from scheduler_daemon.executors.base import STOP_GRACE_SECONDS
from scheduler_daemon.storage import (
    fleet_store,
    history,
    instance_store,
    migration,
    occurrence_store,
    run_store,
    task_store,
)
from scheduler_daemon.storage.database import Session
from scheduler_daemon.storage.error import Conflict, NotFound

Plan = TypeVar("Plan")


@dataclass(frozen=True)
class Cancellation:
    """What `Client.cancel` did: `cancelled` at once, or `requested` of a running occurrence's
    owner, with how soon it stops the job (None: its owner is not registered) or else the run's
    takeover point."""

    occurrence: Occurrence
    cancel: Literal["cancelled", "requested"]
    stop_within_seconds: float | None = None
    takeover_at: datetime | None = None


PAGE_SIZE = 100
"""`tasks list` and `runs list` print a first page of this many rows by default."""
ALL_PAGE_SIZE = 1000
"""`--all` reads the history this many rows per transaction."""


@dataclass(frozen=True)
class Page:
    """Rows of one page, and the cursor that continues after them (None: this was the last)."""

    rows: list[Any]
    after: str | None


def history_cursor(row: HistoryRow) -> str:
    """The `runs list --after` cursor that continues after this history row."""
    return str(row.occurrence_id) + ("" if row.id is None else f":{row.id}")


def _check_limit(limit: int | None) -> None:
    if limit is not None:
        argument.at_least_one(limit, "--limit")
        argument.count_within(limit, "--limit", bound.INT4_MAX)


MAX_TRIGGER_COUNT = bound.MAX_TRIGGER_COUNT  # occurrences one `trigger(count=N)` may queue


@dataclass(frozen=True)
class TriggerBatch:
    """What `trigger(count=N)` queued: N manual occurrences of one task, in one transaction."""

    task_id: int
    task_name: str
    status: OccurrenceStatus
    count: int
    occurrence_ids: list[int]


class Client:
    """Task management against one database. `database_url=None` resolves it from the settings
    (SCHEDULER_DATABASE_URL, else the embedded server). One connection, reused by every call and
    shared by threads in turn; safe to keep across `fork` (the child opens its own) and through
    PgBouncer in transaction mode. Close it with `close()`, or use it as a context manager."""

    def __init__(self, database_url: str | None = None) -> None:
        if database_url is None:
            from scheduler_daemon.settings import resolve_database_url

            database_url = resolve_database_url(None)
        self.database_url = database_url
        self._session = Session(database_url)

    def close(self) -> None:
        """Closes the connection; a later call opens a new one."""
        self._session.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[psycopg.Connection[Any]]:
        with self._session.transaction() as conn:
            yield conn

    # -- tasks -----------------------------------------------------------------------------------
    def add_task(self, spec: TaskSpec, *, now: datetime | None = None) -> TaskRecord:
        spec.validate()  # the rules that need no database, before connecting
        # One round trip begins the transaction and reads the clock, one inserts (and wakes the
        # daemons), then COMMIT.
        with self._session.begin(now=now) as begun:
            return self._add(begun.conn, spec, begun.now, source=None)

    def add_in(
        self,
        conn: psycopg.Connection[Any],
        spec: TaskSpec,
        *,
        now: datetime | None = None,
        source: str | None = None,
    ) -> TaskRecord:
        """add_task inside the caller's transaction; `source` records a `tasks apply` source."""
        return self._add(conn, spec, task_store.clock(conn, now), source=source)

    @staticmethod
    def _add(
        conn: psycopg.Connection[Any], spec: TaskSpec, db_now: datetime, *, source: str | None
    ) -> TaskRecord:
        spec = spec.with_changes(anchor=db_now)
        spec.validate(db_now)
        return task_store.insert(conn, spec, spec.schedule().next_after(db_now), source=source)

    def add_tasks(
        self, specs: Iterable[TaskSpec], *, now: datetime | None = None
    ) -> list[TaskRecord]:
        """Adds many tasks in one transaction, with add_task's rules for each: all of them or,
        at the first one that breaks a rule (its name in the one-line error), none."""
        specs = list(specs)
        for spec in specs:
            _named(spec, spec.validate)
        seen: set[str] = set()
        for spec in specs:
            if spec.name in seen:
                raise InvalidTask(f"task '{spec.name}' is given more than once")
            seen.add(spec.name)
        if not specs:
            return []
        with self._tx() as conn:
            db_now = task_store.clock(conn, now)
            ready = []
            for given in specs:
                spec = given.with_changes(anchor=db_now)
                if spec.at is not None:  # the one rule that needs the clock (validated above)
                    _named(spec, functools.partial(spec.validate, db_now))
                ready.append((spec, spec.schedule().next_after(db_now)))
            added = task_store.insert_many(conn, ready)
            due = [t.next_run_at for t in added if t.next_run_at is not None]
            instance_store.notify_task_added(conn, min(due, default=None))
            return added

    def update_task(
        self, ref: str | int, *, now: datetime | None = None, **changes: Any
    ) -> TaskRecord:
        """Changes a task's definition; it takes effect from the next firing
        (domain.control.plan_update)."""
        with self._tx() as conn:
            return self.update_in(conn, ref, now=now, **changes)

    def update_in(
        self,
        conn: psycopg.Connection[Any],
        ref: str | int,
        *,
        now: datetime | None = None,
        source: str | None = None,
        **changes: Any,
    ) -> TaskRecord:
        """update_task inside the caller's transaction; `source` makes an apply source own it."""
        control.check_update(changes)
        task = task_store.lock(conn, _ref(ref))
        db_now = task_store.clock(conn, now)
        plan = _allowed(control.plan_update(task, changes, db_now))
        self._record_owed(conn, task, plan.owed, db_now)
        if plan.unpark:
            task_store.unpark(conn, task.id)
        return task_store.update(
            conn,
            task.id,
            plan.spec,
            status=plan.status,
            next_run_at=plan.next_run_at,
            now=db_now,
            source=source,
        )

    @staticmethod
    def _record_owed(
        conn: psycopg.Connection[Any],
        task: TaskRecord,
        owed: tuple[Firing, ...],
        db_now: datetime,
    ) -> None:
        """Records the locked task's due, undispatched firings (domain.control.owed_firings) as
        skipped rows: an operator's change moves the task past them; every firing keeps its row."""
        for firing in owed:
            occurrence_store.insert(
                conn,
                task_id=task.id,
                occurrence_seq=task_store.next_seq(conn, task.id),
                scheduled_for=firing.scheduled_for,
                trigger=Trigger.SCHEDULE,
                overlap=task.spec.overlap,
                concurrency_key=task.spec.concurrency_key,
                status=firing.status,
                reason=firing.reason,
                now=db_now,
                firing_count=firing.firing_count,
                last_scheduled_for=firing.last_scheduled_for,
            )

    def get_task(self, ref: str | int) -> TaskRecord:
        with self._tx() as conn:
            return task_store.find(conn, _ref(ref))

    def list_tasks(self) -> list[TaskRecord]:
        with self._tx() as conn:
            return task_store.list_live(conn)

    def tasks_page(
        self,
        *,
        limit: int | None = PAGE_SIZE,
        after: str | None = None,
        prefix: str | None = None,
        status: str | None = None,
        paused: bool | None = None,
    ) -> "Page":
        """One page of live tasks by name (byte order), after the name `after`; `limit` None:
        all. `Page.after` is the cursor of the next page (the last name), None after the last."""
        argument.task_status_filter(status)
        argument.search_text("--after", after)
        argument.search_text("--prefix", prefix)
        _check_limit(limit)
        with self._tx() as conn:
            rows = task_store.list_live(
                conn,
                after=after,
                prefix=prefix,
                status=status,
                paused=paused,
                limit=None if limit is None else limit + 1,
            )
        more = limit is not None and len(rows) > limit
        rows = rows[:limit] if more else rows
        return Page(rows, rows[-1].name if more else None)

    def pause(self, ref: str | int, *, now: datetime | None = None) -> TaskRecord:
        """Stops firing. Firings already due and not yet dispatched are recorded as skipped
        (`paused`): nothing is owed while paused, and resume starts from its next firing."""
        with self._tx() as conn:
            return self.pause_in(conn, ref, now=now)

    def pause_in(
        self, conn: psycopg.Connection[Any], ref: str | int, *, now: datetime | None = None
    ) -> TaskRecord:
        task = task_store.lock(conn, _ref(ref))
        db_now = task_store.clock(conn, now)
        plan = control.plan_pause(task, db_now)
        self._record_owed(conn, task, plan.owed, db_now)
        return task_store.set_paused(
            conn,
            task.id,
            paused=True,
            status=plan.status,
            next_run_at=plan.next_run_at,
            now=db_now,
        )

    def resume(self, ref: str | int, *, now: datetime | None = None) -> TaskRecord:
        """Unpauses; the next firing is computed from now, since paused firings are not owed.
        A task that is not paused is left as it is (its due firings are still owed)."""
        with self._tx() as conn:
            return self.resume_in(conn, ref, now=now)

    def resume_in(
        self, conn: psycopg.Connection[Any], ref: str | int, *, now: datetime | None = None
    ) -> TaskRecord:
        task = task_store.lock(conn, _ref(ref))
        db_now = task_store.clock(conn, now)
        plan = control.plan_resume(task, db_now)
        if plan is None:
            return task
        return task_store.set_paused(
            conn,
            task.id,
            paused=False,
            status=plan.status,
            next_run_at=plan.next_run_at,
            now=db_now,
            last_error=plan.error,
        )

    def next_fire_times(
        self, ref: str | int, count: int = 5, *, now: datetime | None = None
    ) -> list[datetime]:
        """The next `count` fire times after the database's now."""
        argument.count_within(count, "-n", bound.MAX_NEXT_COUNT)
        with self._tx() as conn:
            task = task_store.find(conn, _ref(ref))
            db_now = task_store.clock(conn, now)
        return list(task.spec.schedule().fire_times(db_now, limit=count))

    def trigger(
        self,
        ref: str | int,
        *,
        requested_by: str,
        count: int = 1,
        now: datetime | None = None,
    ) -> "Occurrence | TriggerBatch":
        """A `manual` occurrence now; it follows the task's overlap policy. With `count` > 1,
        that many queued in one transaction (`queue` runs them one after another, `allow` side
        by side; a `forbid` task is refused): a TriggerBatch instead of one Occurrence."""
        if count != 1:
            return self._trigger_many(ref, count, requested_by=requested_by, now=now)
        # One round trip begins the transaction, reads the clock and takes the parent lock;
        # one more inserts the occurrence (with its sequence number and the wake-up) and
        # commits. (A `forbid` task's rule reads in between: one more.)
        with self._session.begin(now=now, then=task_store.lock_statement(_ref(ref))) as begun:
            conn, db_now = begun.conn, begun.now
            task = task_store.locked(ref, begun.result)
            # Only a `forbid` task's rule reads its active occurrences (at most one, by index),
            # in a statement of its own: after the lock, so it sees every committed trigger.
            forbid = task.spec.overlap == OverlapPolicy.FORBID
            active = occurrence_store.active_count(conn, task.id) if forbid else 0
            plan = control.plan_trigger(task, active=active)
            occurrence = occurrence_store.insert_trigger(
                conn,
                task_id=task.id,
                overlap=task.spec.overlap,
                concurrency_key=task.spec.concurrency_key,
                status=plan.status,
                reason=plan.reason,
                requested_by=requested_by,
                now=db_now,
                rerun_status=TaskStatus.RUNNING if plan.rerun else None,
                commit=True,
            )
            return replace(occurrence, task_name=task.name)

    def _trigger_many(
        self, ref: str | int, count: int, *, requested_by: str, now: datetime | None
    ) -> TriggerBatch:
        argument.count_within(count, "--count", MAX_TRIGGER_COUNT)
        with self._tx() as conn:
            task = task_store.lock(conn, _ref(ref))
            plan = _allowed(control.plan_trigger_many(task, count))
            db_now = task_store.clock(conn, now)
            instance_store.notify_wakeup(conn, "triggered")
            rows = occurrence_store.insert_many(
                conn,
                task_id=task.id,
                seqs=task_store.next_seqs(conn, task.id, count),
                now=db_now,
                trigger=Trigger.MANUAL,
                overlap=task.spec.overlap,
                concurrency_key=task.spec.concurrency_key,
                status=OccurrenceStatus.QUEUED,
                requested_by=requested_by,
            )
            if plan.rerun:
                task_store.set_next_run(conn, task.id, next_run_at=None, status=TaskStatus.RUNNING)
            return TriggerBatch(
                task.id, task.name, OccurrenceStatus.QUEUED, len(rows), [row["id"] for row in rows]
            )

    def backfill(
        self,
        ref: str | int,
        *,
        start: datetime,
        end: datetime,
        include: tuple[str, ...] = backfill.DEFAULT_INCLUDE,
        max_firings: int = backfill.DEFAULT_MAX,
        dry_run: bool = False,
        requested_by: str,
        progress: Callable[[int, int], None] | None = None,
        now: datetime | None = None,
    ) -> BackfillResult:
        """Queues a `backfill` occurrence per firing of [start, end] whose latest outcome is in
        `include` (scheduler_daemon/backfill.py says how)."""
        return queue_backfill(
            self._tx,
            _ref(ref),
            start=start,
            end=end,
            include=include,
            max_firings=max_firings,
            dry_run=dry_run,
            requested_by=requested_by,
            progress=progress,
            now=now,
        )

    def delete(
        self, ref: str | int, *, force: bool = False, requested_by: str, now: datetime | None = None
    ) -> list[Occurrence]:
        """Deletes a task, refusing while it has active occurrences unless `force` cancels them:
        queued ones at once, running ones by a cancel request (each keeps its slot until its
        owner confirms the job is gone). Returns each: `cancelled`, or `running` when requested."""
        with self._tx() as conn:
            return self.delete_in(conn, ref, force=force, requested_by=requested_by, now=now)

    def delete_in(
        self,
        conn: psycopg.Connection[Any],
        ref: str | int,
        *,
        force: bool = False,
        requested_by: str,
        now: datetime | None = None,
    ) -> list[Occurrence]:
        task = task_store.lock(conn, _ref(ref))
        db_now = task_store.clock(conn, now)
        active = occurrence_store.active_count(conn, task.id)
        plan = _allowed(control.plan_delete(task, db_now, active=active, force=force))
        self._record_owed(conn, task, plan.owed, db_now)
        cancelled = occurrence_store.cancel_active(
            conn, task.id, reason="task deleted", requested_by=requested_by, now=db_now
        )
        task_store.delete(conn, task.id, db_now)
        return cancelled

    # -- history ---------------------------------------------------------------------------------
    def list_runs(
        self,
        *,
        task: str | int | None = None,
        status: str | None = None,
        limit: int = PAGE_SIZE,
        after: str | None = None,
    ) -> list[HistoryRow]:
        """One page of history (see runs_page)."""
        return self.runs_page(task=task, status=status, limit=limit, after=after).rows

    def runs_page(
        self,
        *,
        task: str | int | None = None,
        status: str | None = None,
        limit: int | None = PAGE_SIZE,
        after: str | None = None,
    ) -> "Page":
        """History newest occurrence first (its own row, then its runs newest first), after the
        cursor `after`: `OCCURRENCE_ID:RUN_ID` after a run row, `OCCURRENCE_ID` after an
        occurrence row. `limit` None: all of it, read a page at a time."""
        argument.status_filter(status)
        _check_limit(limit)
        keyset = argument.history_cursor(after) if after is not None else None
        rows: list[HistoryRow] = []
        with self._tx() as conn:
            task_id = task_store.find(conn, _ref(task)).id if task is not None else None
        while True:
            want = ALL_PAGE_SIZE if limit is None else limit + 1 - len(rows)
            with self._tx() as conn:  # one short transaction per page
                page = history.list_history(
                    conn, task_id=task_id, status=status, limit=want, after=keyset
                )
            rows += page
            if len(page) < want or (limit is not None and len(rows) > limit):
                break
            keyset = (page[-1].occurrence_id, page[-1].id)
        more = limit is not None and len(rows) > limit
        rows = rows[:limit] if more else rows
        last = rows[-1] if more else None
        return Page(rows, history_cursor(last) if last else None)

    def show_run(self, run_id: int) -> RunDetail:
        with self._tx() as conn:
            run = history.get_run(conn, run_id)
        if run is None:
            raise NotFound(f"unknown run {run_id}")
        return run

    def show_occurrence(self, occurrence_id: int) -> tuple[Occurrence, list[RunDetail]]:
        """One occurrence and its runs, oldest first."""
        with self._tx() as conn:
            occurrence = occurrence_store.get(conn, occurrence_id)
            if occurrence is None:
                raise NotFound(f"unknown occurrence {occurrence_id}")
            return occurrence, history.runs_of(conn, occurrence_id)

    def cancel(self, ident: int, *, occurrence: bool = False, requested_by: str) -> Cancellation:
        """Cancels a run's occurrence (or an occurrence). A queued or claimed one ends at once
        (its token raised, so a launcher that has not started the job is fenced). A running one
        gets a cancel request: its owner learns of it at its next renewal, stops the job, and
        records `cancelled` once the job is gone; until then it keeps its slot (`forbid`, key,
        budget). If the owner is dead, the takeover ends it after its takeover point."""
        with self._tx() as conn:
            if occurrence:
                occurrence_id = ident
            else:
                run = history.get_run(conn, ident)
                if run is None:
                    raise NotFound(f"unknown run {ident}")
                occurrence_id = run.occurrence_id
            found = occurrence_store.get(conn, occurrence_id)
            if found is None:
                raise NotFound(f"unknown occurrence {occurrence_id}")
            task_store.lock_row(conn, found.task_id)  # parent first
            current = occurrence_store.lock(conn, occurrence_id)
            reason = f"cancelled by {requested_by}"
            if current is not None and current.status == OccurrenceStatus.RUNNING:
                requested = occurrence_store.request_cancel(
                    conn, occurrence_id, reason=reason, requested_by=requested_by
                )
                assert requested is not None  # running and locked
                within, takeover_at = self._stop_bound(conn, occurrence_id)
                return Cancellation(
                    replace(requested, task_name=found.task_name), "requested", within, takeover_at
                )
            cancelled = occurrence_store.cancel(
                conn, occurrence_id, reason=reason, requested_by=requested_by
            )
            if cancelled is None:
                status = current.status if current else found.status
                raise Conflict(f"occurrence {occurrence_id} is already {status}")
            task_store.record_outcome(
                conn,
                found.task_id,
                task_outcome(cancelled, OccurrenceStatus.CANCELLED, cancelled.reason),
            )
            instance_store.notify_wakeup(conn, "cancelled")
            return Cancellation(replace(cancelled, task_name=found.task_name), "cancelled")

    @staticmethod
    def _stop_bound(
        conn: psycopg.Connection[Any], occurrence_id: int
    ) -> tuple[float | None, datetime | None]:
        """How soon the owner of a running occurrence stops its job after a cancel request: at
        its next renewal (every TTL/3) plus the stop grace; an owner that no longer renews is
        taken over at the run's takeover point, and its watchdog killed the job before that."""
        running = [r for r in history.runs_of(conn, occurrence_id) if r.status == RunStatus.RUNNING]
        if not running:
            return None, None
        run = running[-1]
        owner = next(
            (i for i in instance_store.list_instances(conn) if i.id == run.instance_id), None
        )
        within = None
        if owner is not None:
            within = renew_interval(owner.lease_ttl).total_seconds() + STOP_GRACE_SECONDS
        return within, run.takeover_at

    def status(self) -> dict[str, Any]:
        """Registered instances, queue depth, executing runs against the budget, takeover bounds,
        and who holds the budget's lock longer than a claim does (`budget_lock_holders`)."""
        with self._tx() as conn:
            schema = migration.state_of(conn).fields()
            oldest = schema["oldest_build"]
            instances: list[Instance] = [
                # can this instance's build write to the schema as it is?
                replace(
                    row,
                    compatible=oldest is not None
                    and migration.build().works_after(row.schema_revision, oldest),
                )
                for row in instance_store.list_instances(conn)
            ]
            status = {
                "instances": instances,
                "schema": schema,
                "running_by_build": run_store.running_by_build(conn),
                "queue_depth": occurrence_store.queue_depth(conn),
                "executing_runs": occurrence_store.executing_count(conn),
                "max_concurrent_runs": fleet_store.budget(conn),
                "parked_tasks": task_store.parked(conn),
            }
            holders = fleet_store.budget_lock_holders(conn)
        return {**status, "budget_lock_holders": self._still_holding(holders)}

    def _still_holding(self, first: list[LockHolder]) -> list[LockHolder]:
        """The holders of the budget's lock in `first` whose transaction still holds it a moment
        later: not a daemon's claim, which holds it for milliseconds. No wait when none held it."""
        if not first:
            return []
        time.sleep(CONFIRM_AFTER_SECONDS)
        with self._tx() as conn:
            return held_throughout(first, fleet_store.budget_lock_holders(conn))

    # -- fleet settings --------------------------------------------------------------------------
    def fleet_settings(self) -> dict[str, Any]:
        with self._tx() as conn:
            return {row["key"]: row["value"] for row in fleet_store.list_settings(conn)}

    def set_fleet_setting(self, name: str, value: str, *, updated_by: str) -> dict[str, Any]:
        key, stored = argument.fleet_setting(name, value)  # within its bound (domain/limit.py)
        with self._tx() as conn:
            return fleet_store.set_setting(conn, key, stored, updated_by)


def _allowed(plan: Plan | control.Refusal) -> Plan:
    """The plan, or the refusal raised as a Conflict (exit code 2 in the CLI)."""
    if isinstance(plan, control.Refusal):
        raise Conflict(plan.message)
    return plan


def _ref(ref: str | int) -> str | int:
    """A TASK argument as the stores look it up; NotFound when no task can have it (an id past
    bigint, a NUL in a name: domain.argument.task_ref)."""
    found = argument.task_ref(ref)
    if found is None:
        raise NotFound(f"unknown task {str(ref)!r}")
    return found


def _named(spec: TaskSpec, check: Callable[[], None]) -> None:
    """Runs one spec's validation in a batch, naming the task in the one-line error."""
    try:
        check()
    except InvalidTask as exc:
        raise InvalidTask(f"task '{spec.name}': {exc}") from exc
