"""The Client's task definitions: add, update, pause, resume and delete tasks, read them and
their next fire times. Each change locks the task row first; `*_in` runs in the caller's
transaction (`tasks apply`)."""

import dataclasses
import functools
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg

from scheduler_daemon.client.base import (
    PAGE_SIZE,
    ClientBase,
    Page,
    allowed,
    check_limit,
    task_needs,
    task_ref,
)
from scheduler_daemon.domain import argument, control
from scheduler_daemon.domain import limit as bound
from scheduler_daemon.domain.misfire import DispatchPlan, Firing
from scheduler_daemon.domain.occurrence import Occurrence
from scheduler_daemon.domain.operator import Actor
from scheduler_daemon.domain.status import TaskStatus, Trigger
from scheduler_daemon.domain.task import InvalidTask, TaskRecord, TaskSpec
from scheduler_daemon.storage import (
    calendar_store,
    fleet_store,
    instance_store,
    occurrence_store,
    operator_action_store,
    task_store,
)


class TaskDefinition(ClientBase):
    """Defines tasks and changes them; what a change does to due firings is domain.control's."""

    def add_task(self, spec: TaskSpec, *, now: datetime | None = None) -> TaskRecord:
        spec.validate()  # the rules that need no database, before connecting
        # One round trip begins the transaction and reads the clock, one inserts (and wakes the
        # daemons), then COMMIT.
        with self._session.transaction(now=now) as tx:
            return self._add(tx.conn, spec, tx.now, source=None)

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
        spec, skips = spec.resolved()  # a local --at, read in its zone by its DST policies
        if spec.deadline is not None:
            spec.check_deadline(fleet_store.history_retention(conn))
        due = None if skips else spec.schedule().next_after(db_now)
        needs = task_needs(conn, spec)  # marked while an older build runs (ADR 0029)
        added = task_store.insert(conn, spec, due, source=source, needs_build=needs)
        added = _link_calendars(conn, added, spec)
        return _skip_one_shot(conn, added, db_now) if skips else added

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
            retention = fleet_store.history_retention(conn)
            for spec in specs:
                _named(spec, functools.partial(spec.check_deadline, retention))
            db_now = task_store.clock(conn, now)
            ready, skipping = [], set()
            for given in specs:
                spec = given.with_changes(anchor=db_now)
                if spec.at is not None or spec.spread is not None:  # the rules needing the clock
                    _named(spec, functools.partial(spec.validate, db_now))
                spec, skips = spec.resolved()
                if skips:
                    skipping.add(spec.name)
                first = None if skips else spec.schedule().next_after(db_now)
                ready.append((spec, first, task_needs(conn, spec)))  # ADR 0029
            added = task_store.insert_many(conn, ready)
            added = [_link_calendars(conn, t, s) for t, (s, _, _) in zip(added, ready, strict=True)]
            added = [_skip_one_shot(conn, t, db_now) if t.name in skipping else t for t in added]
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
        task = task_store.lock(conn, task_ref(ref))
        db_now = task_store.clock(conn, now)
        plan = allowed(control.plan_update(task, changes, db_now))
        if plan.spec.deadline is not None:
            plan.spec.check_deadline(fleet_store.history_retention(conn))
        self._record_owed(conn, task, plan.owed, db_now)
        if plan.unpark:
            task_store.unpark(conn, task.id)
        if "exclude_calendars" in changes:  # before the update, whose row shows them
            _set_calendars(conn, task.id, plan.spec.exclude_calendars)
        updated = task_store.update(
            conn,
            task.id,
            plan.spec,
            status=plan.status,
            next_run_at=plan.next_run_at,
            now=db_now,
            source=source,
            needs_build=task_needs(conn, plan.spec),  # as the new definition needs (ADR 0029)
        )
        return updated if plan.skipped is None else _skip_one_shot(conn, updated, db_now)

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
            return task_store.find(conn, task_ref(ref))

    def list_tasks(self) -> list[TaskRecord]:
        with self._tx() as conn:
            return task_store.list_live(conn)

    def export_tasks(self) -> tuple[list[TaskRecord], bool]:
        """The live tasks, and whether their secrets are the stored ones: False for a role
        that may not read them (the reader), which reads them masked (ADR 0031)."""
        with self._tx() as conn:
            return task_store.list_live(conn), task_store.secrets_readable(conn)

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
        check_limit(limit)
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

    def pause(
        self,
        ref: str | int,
        *,
        until: datetime | timedelta | None = None,
        actor: Actor | None = None,
        now: datetime | None = None,
    ) -> TaskRecord:
        """Stops firing. Firings already due and not yet dispatched are recorded as skipped
        (`paused`): nothing is owed while paused, and resume starts from its next firing.
        `until` (an instant with an offset, or a duration from now on the database clock): the
        pause ends by itself then, as `resume` would (a reconciler's pass); None clears a
        pending end. With `actor`, `operator_action` records it in the same transaction."""
        with self._tx() as conn:
            paused = self.pause_in(conn, ref, until=until, now=now)
            if actor is not None:
                detail = None if paused.paused_until is None else f"until {paused.paused_until}"
                operator_action_store.record(conn, actor, "pause", task_id=paused.id, detail=detail)
            return paused

    def pause_in(
        self,
        conn: psycopg.Connection[Any],
        ref: str | int,
        *,
        until: datetime | timedelta | None = None,
        now: datetime | None = None,
    ) -> TaskRecord:
        task = task_store.lock(conn, task_ref(ref))
        db_now = task_store.clock(conn, now)
        end = None if until is None else control.pause_end(until, db_now)
        plan = control.plan_pause(task, db_now, end)
        self._record_owed(conn, task, plan.owed, db_now)
        return task_store.set_paused(
            conn,
            task.id,
            paused=True,
            status=plan.status,
            next_run_at=plan.next_run_at,
            now=db_now,
            paused_until=plan.until,
        )

    def resume(
        self, ref: str | int, *, actor: Actor | None = None, now: datetime | None = None
    ) -> TaskRecord:
        """Unpauses; the next firing is computed from now, since paused firings are not owed.
        A task that is not paused is left as it is (its due firings are still owed). With
        `actor`, `operator_action` records it in the same transaction."""
        with self._tx() as conn:
            resumed = self.resume_in(conn, ref, now=now)
            if actor is not None:
                operator_action_store.record(conn, actor, "resume", task_id=resumed.id)
            return resumed

    def resume_in(
        self, conn: psycopg.Connection[Any], ref: str | int, *, now: datetime | None = None
    ) -> TaskRecord:
        task = task_store.lock(conn, task_ref(ref))
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
        """The next `count` fire times after the database's now; none for a one-shot past
        `enabled` (its one firing was recorded: a skipped local `--at` holds a later instant)."""
        argument.count_within(count, "-n", bound.MAX_NEXT_COUNT)
        with self._tx() as conn:
            task = task_store.find(conn, task_ref(ref))
            db_now = task_store.clock(conn, now)
        if task.status != TaskStatus.ENABLED:
            return []
        return list(task.spec.schedule().fire_times(db_now, limit=count))

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
        task = task_store.lock(conn, task_ref(ref))
        db_now = task_store.clock(conn, now)
        active = occurrence_store.active_count(conn, task.id)
        plan = allowed(control.plan_delete(task, db_now, active=active, force=force))
        self._record_owed(conn, task, plan.owed, db_now)
        cancelled = occurrence_store.cancel_active(
            conn, task.id, reason="task deleted", requested_by=requested_by, now=db_now
        )
        task_store.delete(conn, task.id, db_now)
        return cancelled


def _skip_one_shot(conn: psycopg.Connection[Any], task: TaskRecord, db_now: datetime) -> TaskRecord:
    """Records the one firing of the locked (or just written) one-shot `task`, whose local
    `--at` a DST gap swallows under `--dst-gap skip`, as the dispatcher records a skipped
    one-shot firing (`occurrence_dispatch`): a `skipped` row (reason `dst_gap`) at the instant
    the task holds, the task `cancelled` with no next firing (ADR 0006, ADR 0019). Returns the
    task as shown."""
    plan = DispatchPlan((control.skipped_one_shot(task.spec),), next_run_at=None)
    occurrence_store.dispatch(conn, task, plan, once_fired=True, now=db_now)
    return task_store.find(conn, task.id)


def _set_calendars(conn: psycopg.Connection[Any], task_id: int, names: Sequence[str]) -> None:
    """The locked task's calendars become `names`; InvalidTask (one line; the caller's
    transaction rolls back, nothing written) naming the first that does not exist."""
    try:
        found = set(calendar_store.set_for_task(conn, task_id, names))
    except psycopg.errors.ForeignKeyViolation:  # deleted while this waited for its lock
        raise InvalidTask("--exclude-calendar: a calendar given was deleted meanwhile") from None
    unknown = [name for name in names if name not in found]
    if unknown:
        raise InvalidTask(f"--exclude-calendar: unknown calendar '{unknown[0]}'")


def _link_calendars(conn: psycopg.Connection[Any], task: TaskRecord, spec: TaskSpec) -> TaskRecord:
    """Links a task just inserted to its calendars (`--exclude-calendar`), shown on it."""
    if not spec.exclude_calendars:
        return task
    _set_calendars(conn, task.id, spec.exclude_calendars)
    return dataclasses.replace(
        task, spec=dataclasses.replace(task.spec, exclude_calendars=spec.exclude_calendars)
    )


def _named(spec: TaskSpec, check: Callable[[], None]) -> None:
    """Runs one spec's validation in a batch, naming the task in the one-line error."""
    try:
        check()
    except InvalidTask as exc:
        raise InvalidTask(f"task '{spec.name}': {exc}") from exc
