"""Backfill: queue the firings of a past range again, one `backfill` occurrence per firing.

The firings come from the task's own schedule walk (zone and DST policies applied); the latest
outcome of each (domain/backfill.py) decides. Firings at or after the task's next firing (still
owed to the dispatcher) or after now are left out. A `forbid` task's backfill occurrences are
recorded with overlap `queue`: they run one after another in firing order, after any active
occurrence, and the task's own firings are skipped (`overlap`) meanwhile. Each batch of firings
is one short transaction under the task lock; the primary key of firing_key
makes a second backfill, or one running beside it, queue nothing twice.
"""

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg

from scheduler_daemon.domain import backfill
from scheduler_daemon.domain.operator import Actor
from scheduler_daemon.domain.status import OverlapPolicy, ScheduleKind, TaskStatus
from scheduler_daemon.domain.task import TaskRecord
from scheduler_daemon.storage import (
    instance_store,
    occurrence_store,
    operator_action_store,
    task_store,
)
from scheduler_daemon.storage.error import NotFound

_MICROSECOND = timedelta(microseconds=1)


@dataclass
class BackfillResult:
    """The firings of a backfill's range with their latest outcomes, the ones it wanted, and
    the ids of the occurrences it queued (none with `dry_run`, or for a firing that had one)."""

    task_id: int
    task_name: str
    dry_run: bool
    firings: list[backfill.Firing]
    occurrence_ids: list[int]
    wanted: list[backfill.Firing] = field(default_factory=list)


def queue_backfill(
    tx: Callable[[], AbstractContextManager[psycopg.Connection[Any]]],
    ref: str | int,
    *,
    start: datetime,
    end: datetime,
    include: tuple[str, ...] = backfill.DEFAULT_INCLUDE,
    max_firings: int = backfill.DEFAULT_MAX,
    dry_run: bool = False,
    requested_by: str,
    actor: Actor | None = None,
    progress: Callable[[int, int], None] | None = None,
    now: datetime | None = None,
) -> BackfillResult:
    """Queues one `backfill` occurrence per firing of [start, end] whose latest outcome is
    in `include`, in firing order. Firings at or after the task's next firing (still owed
    to the dispatcher) or after now are left out. A `forbid` task's backfill occurrences
    are recorded with overlap `queue`: they run one after another in firing order, after
    any active occurrence, and the task's own firings are skipped (`overlap`) meanwhile.
    Each batch of firings is one transaction under the task lock; the primary key of
    firing_key (issue 47) makes a second backfill (or one running beside it) queue
    nothing twice. With `actor`, a batch that queued records it in `operator_action` in its
    own transaction. `progress(done, total)` is called after each batch."""
    if start > end:
        raise backfill.InvalidBackfill(
            f"--from {start.isoformat()} is after --to {end.isoformat()}"
        )
    if max_firings < 1:
        raise backfill.InvalidBackfill("--max must be at least 1")
    with tx() as conn:
        task = task_store.find(conn, ref)
        db_now = task_store.clock(conn, now)
    if task.deleted_at is not None:
        raise NotFound(f"task '{ref}' was deleted")
    times = _fire_times(task, start, min(end, db_now), max_firings)
    result = BackfillResult(task.id, task.name, dry_run, [], [])
    for first in range(0, len(times), backfill.BATCH):
        batch = times[first : first + backfill.BATCH]
        with tx() as conn:
            queued = _queue_batch(
                conn, task, batch, result, include, requested_by=requested_by, now=now
            )
            if actor is not None and queued:
                operator_action_store.record(
                    conn, actor, "backfill", task_id=task.id, detail=_queued_text(task, queued)
                )
        if progress is not None:
            progress(len(batch), len(times))
    result.wanted = [f for f in result.firings if f.wanted(include)]
    return result


def _fire_times(
    task: TaskRecord, start: datetime, until: datetime, max_firings: int
) -> list[datetime]:
    """The task's firings from `start` to `until`, short of its next firing (still owed to the
    dispatcher); refused when there are more than `max_firings`."""
    if task.next_run_at is not None:
        until = min(until, task.next_run_at - _MICROSECOND)
    schedule = task.spec.schedule()
    times = list(schedule.fire_times(start - _MICROSECOND, until=until, limit=max_firings + 1))
    if len(times) > max_firings:
        raise backfill.InvalidBackfill(
            f"the range has more than {max_firings} firings of task '{task.name}'; "
            "narrow --from/--to or raise --max"
        )
    return times


def _queue_batch(
    conn: psycopg.Connection[Any],
    task: TaskRecord,
    batch: list[datetime],
    result: BackfillResult,
    include: tuple[str, ...],
    *,
    requested_by: str,
    now: datetime | None,
) -> list[int]:
    """One batch of firings in the caller's transaction: classified by their latest outcomes
    and, unless `result.dry_run`, the wanted ones queued under the task's lock; returns the
    ids it queued."""
    locked = task if result.dry_run else task_store.lock(conn, task.id)
    recorded = occurrence_store.firings(conn, task.id, batch[0], batch[-1])
    firings = backfill.classify(batch, recorded)
    result.firings += firings
    wanted = [f for f in firings if f.wanted(include)]
    if result.dry_run or not wanted:
        return []
    overlap = (
        OverlapPolicy.QUEUE
        if task.spec.overlap in (OverlapPolicy.FORBID, OverlapPolicy.REPLACE)
        else task.spec.overlap
    )
    batch_now = task_store.clock(conn, now)
    queued: list[int] = []
    for firing in wanted:
        row = occurrence_store.insert_backfill(
            conn,
            task_id=task.id,
            occurrence_seq=task_store.next_seq(conn, task.id),
            scheduled_for=firing.scheduled_for,
            overlap=overlap,
            concurrency_key=locked.spec.concurrency_key,
            requested_by=requested_by,
            now=batch_now,
        )
        if row is not None:
            queued.append(row["id"])
    result.occurrence_ids += queued
    if locked.spec.schedule_kind == ScheduleKind.ONCE and locked.status in (
        TaskStatus.COMPLETED,
        TaskStatus.FAILED,
        TaskStatus.CANCELLED,
    ):  # a firing run again: a finished one-shot follows its newest firing
        task_store.set_next_run(conn, task.id, next_run_at=None, status=TaskStatus.RUNNING)
    instance_store.notify_wakeup(conn, "backfill")
    return queued


def _queued_text(task: TaskRecord, queued: list[int]) -> str:
    return (
        f"queued {len(queued)} backfill occurrence(s) of task {task.name} "
        f"(ids {queued[0]}..{queued[-1]})"
    )
