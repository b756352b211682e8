"""The Client's runs on demand: a manual trigger (one occurrence, or a batch of them) and a
backfill of a past range."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from scheduler_daemon.backfill import BackfillResult, queue_backfill
from scheduler_daemon.client.base import ClientBase, allowed, task_ref
from scheduler_daemon.domain import argument, backfill, control
from scheduler_daemon.domain import limit as bound
from scheduler_daemon.domain.occurrence import Occurrence
from scheduler_daemon.domain.operator import Actor
from scheduler_daemon.domain.status import LostReason, OccurrenceStatus, OverlapPolicy, Trigger
from scheduler_daemon.domain.task import TaskRecord
from scheduler_daemon.storage import (
    instance_store,
    occurrence_store,
    operator_action_store,
    task_store,
)

MAX_TRIGGER_COUNT = bound.MAX_TRIGGER_COUNT  # occurrences one `trigger(count=N)` may queue


@dataclass(frozen=True)
class TriggerBatch:
    """What `trigger(count=N)` queued: N manual occurrences of one task, in one transaction."""

    task_id: int
    task_name: str
    status: OccurrenceStatus
    count: int
    occurrence_ids: list[int]


class Triggering(ClientBase):
    """Queues occurrences by hand: now (`trigger`) or for past firings (`backfill`)."""

    def trigger(
        self,
        ref: str | int,
        *,
        requested_by: str,
        count: int = 1,
        actor: Actor | None = None,
        now: datetime | None = None,
        args: Mapping[str, Any] | None = None,
    ) -> "Occurrence | TriggerBatch":
        """A `manual` occurrence now; it follows the task's overlap policy. With `count` > 1,
        that many queued in one transaction (`queue` runs them one after another, `allow` side
        by side; a `forbid` task is refused): a TriggerBatch instead of one Occurrence. With
        `actor`, `operator_action` records it in the same transaction. `args` (a JSON object,
        argument.trigger_args): recorded on the one occurrence and handed to each of its
        attempts; refused with `count` > 1."""
        if args is not None:
            args = argument.checked_args(args)  # as the CLI checks them: one line, nothing written
            if count != 1:
                raise argument.InvalidArgument("arguments trigger one occurrence: drop --count")
        if count != 1:
            return self._trigger_many(ref, count, requested_by=requested_by, actor=actor, now=now)
        # One round trip begins the transaction, reads the clock and takes the parent lock;
        # one more inserts the occurrence (with its sequence number and the wake-up) and
        # commits; with an actor, the record's insert commits instead (one more). (A `forbid`
        # task's rule reads in between: one more.)
        lock = task_store.lock_statement(task_ref(ref))
        with self._session.transaction(now=now, first=lock) as tx:
            conn, db_now = tx.conn, tx.now
            task = task_store.locked(ref, tx.result)
            return self._trigger_one(
                conn, task, db_now, requested_by=requested_by, actor=actor, args=args
            )

    def _trigger_one(
        self,
        conn: psycopg.Connection[Any],
        task: TaskRecord,
        db_now: datetime,
        *,
        requested_by: str,
        actor: Actor | None,
        args: dict[str, Any] | None,
    ) -> Occurrence:
        """The manual occurrence of the locked `task` (its overlap policy and key apply), and
        its record; the last statement commits."""
        # Only a `forbid` task's rule reads its active occurrences (at most one, by index), in
        # a statement of its own: after the lock, so it sees every committed trigger.
        forbid = task.spec.overlap == OverlapPolicy.FORBID
        active = occurrence_store.active_count(conn, task.id) if forbid else 0
        plan = control.plan_trigger(task, active=active)
        if task.spec.overlap == OverlapPolicy.REPLACE:  # the manual firing wins too
            occurrence_store.cancel_active(
                conn, task.id, reason=LostReason.REPLACED, requested_by=None, now=db_now
            )
        occurrence = occurrence_store.insert_trigger(
            conn,
            task_id=task.id,
            overlap=task.spec.overlap,
            concurrency_key=task.spec.concurrency_key,
            status=plan.status,
            reason=plan.reason,
            requested_by=requested_by,
            now=db_now,
            commit=actor is None,
            args=None if args is None else Jsonb(args),
        )
        if actor is not None:
            operator_action_store.record(
                conn,
                actor,
                "trigger",
                task_id=task.id,
                occurrence_id=occurrence.id,
                detail=trigger_text(occurrence),
                commit=True,
            )
        return replace(occurrence, task_name=task.name)

    def _trigger_many(
        self,
        ref: str | int,
        count: int,
        *,
        requested_by: str,
        actor: Actor | None,
        now: datetime | None,
    ) -> TriggerBatch:
        argument.count_within(count, "--count", MAX_TRIGGER_COUNT)
        with self._tx() as conn:
            task = task_store.lock(conn, task_ref(ref))
            allowed(control.plan_trigger_many(task, count))
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
            batch = TriggerBatch(
                task.id, task.name, OccurrenceStatus.QUEUED, len(rows), [row["id"] for row in rows]
            )
            if actor is not None:
                operator_action_store.record(
                    conn, actor, "trigger", task_id=task.id, detail=trigger_text(batch)
                )
            return batch

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
        actor: Actor | None = None,
        progress: Callable[[int, int], None] | None = None,
        now: datetime | None = None,
    ) -> BackfillResult:
        """Queues a `backfill` occurrence per firing of [start, end] whose latest outcome is in
        `include` (scheduler_daemon/backfill.py says how); with `actor`, each transaction that
        queued records it (`operator_action`) before it commits."""
        return queue_backfill(
            self._tx,
            task_ref(ref),
            start=start,
            end=end,
            include=include,
            max_firings=max_firings,
            dry_run=dry_run,
            requested_by=requested_by,
            actor=actor,
            progress=progress,
            now=now,
        )


def trigger_text(done: "Occurrence | TriggerBatch") -> str:
    """What a trigger did, in one line (the CLI's output, the console's message, the record's
    detail)."""
    if isinstance(done, TriggerBatch):
        ids = done.occurrence_ids
        return f"{done.count} occurrences queued (ids {ids[0]}..{ids[-1]})"
    if done.status == OccurrenceStatus.QUEUED:
        return f"occurrence {done.id} queued"
    return f"occurrence {done.id} skipped: {done.reason} (an occurrence is active)"
