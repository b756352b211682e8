"""The Python API for defining and inspecting tasks; the `tasks`, `runs`, `config` commands use it.

Each call is one short transaction. Every time it reads comes from the database clock (`now` pins it
in tests), and every multi-row change locks the task row first.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg

from scheduler_daemon.domain.misfire import skip_past_due
from scheduler_daemon.domain.outcome import LIFECYCLE
from scheduler_daemon.domain.status import (
    OccurrenceStatus,
    OverlapPolicy,
    RunStatus,
    ScheduleKind,
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
from scheduler_daemon.storage.database import transaction
from scheduler_daemon.storage.error import Conflict, NotFound

SCHEDULE_FIELDS = frozenset({"cron", "every", "at", "timezone", "dst_gap", "dst_overlap"})
OCCURRENCE_STATUSES = tuple(OccurrenceStatus)
FLEET_SETTINGS = {"max-concurrent-runs": "max_concurrent_runs"}


class Client:
    """Task management against one database. `database_url=None` resolves it from the settings
    (SCHEDULER_DATABASE_URL, else the embedded server)."""

    def __init__(self, database_url: str | None = None) -> None:
        if database_url is None:
            from scheduler_daemon.settings import resolve_database_url

            database_url = resolve_database_url(None)
        self.database_url = database_url

    @contextmanager
    def _tx(self) -> Iterator[psycopg.Connection[Any]]:
        with transaction(self.database_url) as conn:
            yield conn

    # -- tasks -----------------------------------------------------------------------------------
    def add_task(self, spec: TaskSpec, *, now: datetime | None = None) -> TaskRecord:
        spec.validate()  # the rules that need no database, before connecting
        with self._tx() as conn:
            db_now = task_store.clock(conn, now)
            spec = spec.with_changes(anchor=db_now)
            spec.validate(db_now)
            added = task_store.insert(conn, spec, spec.schedule().next_after(db_now))
            instance_store.notify_task_added(conn, added.next_run_at)
            return added

    def update_task(
        self, ref: str | int, *, now: datetime | None = None, **changes: Any
    ) -> TaskRecord:
        """Changes a task's definition; it takes effect from the next firing."""
        unknown = set(changes) - set(TaskSpec.__dataclass_fields__) - {"paused"}
        if unknown or "name" in changes or "anchor" in changes:
            raise InvalidTask(
                f"cannot update {', '.join(sorted(unknown | {'name'} & set(changes)))}"
            )
        with self._tx() as conn:
            task = task_store.lock(conn, ref)
            db_now = task_store.clock(conn, now)
            if (
                "at" in changes
                and task.spec.schedule_kind == ScheduleKind.ONCE
                and task.status != TaskStatus.ENABLED
            ):
                raise Conflict(f"task '{task.name}' already fired ({task.status}); add a new task")
            spec = task.spec.with_changes(**changes)
            rescheduled = bool(SCHEDULE_FIELDS & set(changes))
            if changes.get("every") is not None:
                spec = spec.with_changes(anchor=db_now)
            spec.validate(db_now, new_instant="at" in changes)
            next_run_at, status = task.next_run_at, task.status
            if rescheduled or task.parked_at is not None:
                # Firings the old definition owed and no dispatcher recorded yet get a row,
                # counted by the old schedule (by the new one for a parked task: its old one
                # could not be planned).
                if task.parked_at is not None:
                    self._skip_past_due(conn, task, spec, db_now, "parked")
                else:
                    self._skip_past_due(conn, task, task.spec, db_now, "rescheduled")
                next_run_at = spec.schedule().next_after(db_now)
                task_store.unpark(conn, task.id)
            status = TaskStatus.ENABLED if spec.schedule_kind != ScheduleKind.ONCE else task.status
            return task_store.update(
                conn, task.id, spec, status=status, next_run_at=next_run_at, now=db_now
            )

    @staticmethod
    def _skip_past_due(
        conn: psycopg.Connection[Any],
        task: TaskRecord,
        spec: TaskSpec,
        db_now: datetime,
        reason: str,
    ) -> int:
        """Records the locked task's due, undispatched firings as skipped for `reason` (an
        operator's change moves the task past them; every firing keeps its row). The firings
        are counted with `spec`'s schedule. Returns how many firings were recorded."""
        if task.spec.paused or task.status != TaskStatus.ENABLED or task.deleted_at is not None:
            return 0  # nothing is owed while paused, and a fired one-shot owes nothing more
        rows = skip_past_due(
            spec.schedule(), next_run_at=task.next_run_at, now=db_now, reason=reason
        )
        for firing in rows:
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
        return sum(f.firing_count for f in rows)

    def get_task(self, ref: str | int) -> TaskRecord:
        with self._tx() as conn:
            return task_store.find(conn, ref)

    def list_tasks(self) -> list[TaskRecord]:
        with self._tx() as conn:
            return task_store.list_live(conn)

    def pause(self, ref: str | int, *, now: datetime | None = None) -> TaskRecord:
        """Stops firing. Firings already due and not yet dispatched are recorded as skipped
        (`paused`): nothing is owed while paused, and resume starts from its next firing."""
        with self._tx() as conn:
            task = task_store.lock(conn, ref)
            db_now = task_store.clock(conn, now)
            next_run_at, status = task.next_run_at, task.status
            if task.parked_at is None and self._skip_past_due(
                conn, task, task.spec, db_now, "paused"
            ):
                next_run_at = task.spec.schedule().next_after(db_now)
                if task.spec.schedule_kind == ScheduleKind.ONCE:
                    # its one firing was skipped, as the dispatcher does
                    status = TaskStatus.CANCELLED
            return task_store.set_paused(
                conn, task.id, paused=True, status=status, next_run_at=next_run_at, now=db_now
            )

    def resume(self, ref: str | int, *, now: datetime | None = None) -> TaskRecord:
        """Unpauses; the next firing is computed from now, since paused firings are not owed.
        A task that is not paused is left as it is (its due firings are still owed)."""
        with self._tx() as conn:
            task = task_store.lock(conn, ref)
            if not task.spec.paused:
                return task
            db_now = task_store.clock(conn, now)
            next_run_at = task.spec.schedule().next_after(db_now)
            status, error = task.status, None
            if (
                task.spec.schedule_kind == ScheduleKind.ONCE
                and task.status == TaskStatus.ENABLED
                and next_run_at is None
            ):
                status = TaskStatus.CANCELLED
                error = "its instant passed while the task was paused"
            return task_store.set_paused(
                conn,
                task.id,
                paused=False,
                status=status,
                next_run_at=next_run_at,
                now=db_now,
                last_error=error,
            )

    def next_fire_times(
        self, ref: str | int, count: int = 5, *, now: datetime | None = None
    ) -> list[datetime]:
        """The next `count` fire times after the database's now."""
        if count < 1:
            raise InvalidTask("-n must be at least 1")
        with self._tx() as conn:
            task = task_store.find(conn, ref)
            db_now = task_store.clock(conn, now)
        return list(task.spec.schedule().fire_times(db_now, limit=count))

    def trigger(
        self, ref: str | int, *, requested_by: str, now: datetime | None = None
    ) -> dict[str, Any]:
        """A `manual` occurrence now; it follows the task's overlap policy."""
        with self._tx() as conn:
            task = task_store.lock(conn, ref)
            db_now = task_store.clock(conn, now)
            blocked = task.spec.overlap == OverlapPolicy.FORBID and occurrence_store.active_count(
                conn, task.id
            )
            instance_store.notify_wakeup(conn, "triggered")
            occurrence = occurrence_store.insert(
                conn,
                task_id=task.id,
                occurrence_seq=task_store.next_seq(conn, task.id),
                scheduled_for=db_now,
                trigger=Trigger.MANUAL,
                overlap=task.spec.overlap,
                concurrency_key=task.spec.concurrency_key,
                status=OccurrenceStatus.SKIPPED if blocked else OccurrenceStatus.QUEUED,
                reason="overlap" if blocked else None,
                requested_by=requested_by,
                now=db_now,
            )
            if (
                not blocked
                and task.spec.schedule_kind == ScheduleKind.ONCE
                and task.status in (TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED)
            ):
                # A finished one-shot run again: its status follows its newest occurrence.
                task_store.set_next_run(conn, task.id, next_run_at=None, status=TaskStatus.RUNNING)
            return {**occurrence, "task_name": task.name}

    def delete(
        self, ref: str | int, *, force: bool = False, requested_by: str, now: datetime | None = None
    ) -> list[dict[str, Any]]:
        """Deletes a task, refusing while it has active occurrences unless `force` cancels them:
        queued ones at once, running ones by a cancel request (each keeps its slot until its
        owner confirms the job is gone). Returns (id, occurrence_seq, status) of each."""
        with self._tx() as conn:
            task = task_store.lock(conn, ref)
            db_now = task_store.clock(conn, now)
            active = occurrence_store.active_count(conn, task.id)
            if active and not force:
                raise Conflict(
                    f"task '{task.name}' has {active} active occurrence(s); --force cancels them"
                )
            if task.parked_at is None:
                self._skip_past_due(conn, task, task.spec, db_now, "deleted")
            cancelled = occurrence_store.cancel_active(
                conn, task.id, reason="task deleted", requested_by=requested_by, now=db_now
            )
            task_store.delete(conn, task.id, db_now)
            return cancelled

    # -- history ---------------------------------------------------------------------------------
    def list_runs(
        self, *, task: str | int | None = None, status: str | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        if status is not None and status not in OCCURRENCE_STATUSES:
            raise InvalidTask(
                f"unknown status '{status}': choose one of {', '.join(OCCURRENCE_STATUSES)}"
            )
        if limit < 1:
            raise InvalidTask("--limit must be at least 1")
        with self._tx() as conn:
            task_id = task_store.find(conn, task).id if task is not None else None
            return history.list_history(conn, task_id=task_id, status=status, limit=limit)

    def show_run(self, run_id: int) -> dict[str, Any]:
        with self._tx() as conn:
            run = history.get_run(conn, run_id)
        if run is None:
            raise NotFound(f"unknown run {run_id}")
        return run

    def show_occurrence(self, occurrence_id: int) -> dict[str, Any]:
        with self._tx() as conn:
            occurrence = occurrence_store.get(conn, occurrence_id)
            if occurrence is None:
                raise NotFound(f"unknown occurrence {occurrence_id}")
            occurrence["runs"] = history.runs_of(conn, occurrence_id)
        return occurrence

    def cancel(self, ident: int, *, occurrence: bool = False, requested_by: str) -> dict[str, Any]:
        """Cancels a run's occurrence (or an occurrence). A queued or claimed one ends at once
        (its token raised, so a launcher that has not started the job is fenced). A running one
        gets a cancel request: its owner learns of it at its next renewal, stops the job, and
        records `cancelled` once the job is gone; until then it keeps its slot (`forbid`, key,
        budget). If the owner is dead, the takeover ends it after its takeover point.
        The result carries `cancel`: "cancelled" or "requested"."""
        with self._tx() as conn:
            if occurrence:
                occurrence_id = ident
            else:
                run = history.get_run(conn, ident)
                if run is None:
                    raise NotFound(f"unknown run {ident}")
                occurrence_id = run["occurrence_id"]
            found = occurrence_store.get(conn, occurrence_id)
            if found is None:
                raise NotFound(f"unknown occurrence {occurrence_id}")
            task_store.lock_row(conn, found["task_id"])  # parent first
            current = occurrence_store.lock(conn, occurrence_id)
            reason = f"cancelled by {requested_by}"
            if current is not None and current["status"] == OccurrenceStatus.RUNNING:
                requested = occurrence_store.request_cancel(
                    conn, occurrence_id, reason=reason, requested_by=requested_by
                )
                assert requested is not None  # running and locked
                return {
                    **requested,
                    "task_name": found["task_name"],
                    "cancel": "requested",
                    **self._stop_bound(conn, occurrence_id),
                }
            cancelled = occurrence_store.cancel(
                conn, occurrence_id, reason=reason, requested_by=requested_by
            )
            if cancelled is None:
                status = current["status"] if current else found["status"]
                raise Conflict(f"occurrence {occurrence_id} is already {status}")
            task_store.record_outcome(
                conn,
                found["task_id"],
                occurrence_id=occurrence_id,
                occurrence_seq=cancelled["occurrence_seq"],
                scheduled_for=cancelled["scheduled_for"],
                status=OccurrenceStatus.CANCELLED,
                error=cancelled["reason"],
                lifecycle=LIFECYCLE[OccurrenceStatus.CANCELLED],
            )
            instance_store.notify_wakeup(conn, "cancelled")
            return {**cancelled, "task_name": found["task_name"], "cancel": "cancelled"}

    @staticmethod
    def _stop_bound(conn: psycopg.Connection[Any], occurrence_id: int) -> dict[str, Any]:
        """How soon the owner of a running occurrence stops its job after a cancel request: at
        its next renewal (every TTL/3) plus the stop grace; an owner that no longer renews is
        taken over at the run's takeover point, and its watchdog killed the job before that."""
        running = [
            r for r in history.runs_of(conn, occurrence_id) if r["status"] == RunStatus.RUNNING
        ]
        if not running:
            return {"stop_within_seconds": None, "takeover_at": None}
        run = running[-1]
        owner = next(
            (i for i in instance_store.list_instances(conn) if i["id"] == run["owner"]), None
        )
        within = None
        if owner is not None:
            within = renew_interval(owner["lease_ttl"]).total_seconds() + STOP_GRACE_SECONDS
        return {"stop_within_seconds": within, "takeover_at": run["takeover_at"]}

    def status(self) -> dict[str, Any]:
        """Registered instances, queue depth, executing runs against the budget, takeover bounds."""
        with self._tx() as conn:
            instances = instance_store.list_instances(conn)
            schema = migration.state_of(conn).fields()
            oldest = schema["oldest_build"]
            for row in instances:  # can this instance's build write to the schema as it is?
                row["compatible"] = oldest is not None and migration.build().works_after(
                    row["schema_revision"], oldest
                )
            return {
                "instances": instances,
                "schema": schema,
                "running_by_build": run_store.running_by_build(conn),
                "queue_depth": occurrence_store.queue_depth(conn),
                "executing_runs": occurrence_store.executing_count(conn),
                "max_concurrent_runs": fleet_store.budget(conn),
                "parked_tasks": task_store.parked(conn),
            }

    # -- fleet settings --------------------------------------------------------------------------
    def fleet_settings(self) -> dict[str, Any]:
        with self._tx() as conn:
            return {row["key"]: row["value"] for row in fleet_store.list_settings(conn)}

    def set_fleet_setting(self, name: str, value: str, *, updated_by: str) -> dict[str, Any]:
        if name not in FLEET_SETTINGS:
            raise InvalidTask(
                f"unknown setting '{name}': choose one of {', '.join(FLEET_SETTINGS)}"
            )
        if not value.isdigit() or int(value) < 1:
            raise InvalidTask(f"{name} must be a whole number of at least 1, got '{value}'")
        with self._tx() as conn:
            return fleet_store.set_setting(conn, FLEET_SETTINGS[name], int(value), updated_by)
