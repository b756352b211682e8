"""The console's actions: trigger, pause, resume, cancel, backfill (dry run, then confirm).
Each goes through the Client exactly as the CLI's command does (the same domain rules, the same
refusals and one-line errors) with the operator role's grants the console connects with, and is
recorded in `operator_action` in its own transaction: a record the database refuses rolls the
action back, and the refusal is the line shown."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from scheduler_daemon import presentation
from scheduler_daemon.client import Client, TriggerBatch, trigger_text
from scheduler_daemon.domain import backfill
from scheduler_daemon.domain.argument import InvalidArgument, pause_until
from scheduler_daemon.domain.limit import OutOfBounds
from scheduler_daemon.domain.operator import Actor
from scheduler_daemon.domain.schedule.base import ScheduleError
from scheduler_daemon.domain.status import OccurrenceStatus
from scheduler_daemon.domain.task import InvalidTask
from scheduler_daemon.logconfig import scrub_text
from scheduler_daemon.storage.database import first_line
from scheduler_daemon.storage.error import Conflict, DatabaseUnavailable, NotFound


class Busy(Exception):
    """One at a time: the same work is already running for another request (HTTP 429)."""


REFUSALS = (
    Busy,
    Conflict,
    NotFound,
    InvalidArgument,
    InvalidTask,
    OutOfBounds,
    ScheduleError,
    backfill.InvalidBackfill,
)


@dataclass(frozen=True)
class Done:
    """What an action did: one line for the page, and a dry run's firings when it was one."""

    message: str
    ok: bool = True
    status: int = 200
    firings: list[dict[str, Any]] | None = None


def attempt(step: Callable[[], Done]) -> Done:
    """`step`, or its refusal as one line (`refusal`)."""
    try:
        return step()
    except (*REFUSALS, psycopg.Error, DatabaseUnavailable) as exc:
        return refusal(exc)


def refusal(exc: Exception) -> Done:
    """A refusal as one line: the domain's (the CLI's message; 404 for an unknown task or
    occurrence, else 409) or the database's (a role without the grant: 403; anything else: 503),
    secrets scrubbed; 429 when the same work runs for another request (Busy)."""
    if isinstance(exc, Busy):
        return Done(f"error: {exc}", ok=False, status=429)
    if isinstance(exc, NotFound):
        return Done(f"error: {scrub_text(str(exc))}", ok=False, status=404)
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return Done(f"error: database refused: {first_line(exc)}", ok=False, status=403)
    if isinstance(exc, psycopg.Error):
        return Done(f"error: database error: {scrub_text(first_line(exc))}", ok=False, status=503)
    if isinstance(exc, DatabaseUnavailable):
        return Done(f"error: {scrub_text(str(exc))}", ok=False, status=503)
    return Done(f"error: {scrub_text(str(exc))}", ok=False, status=409)


def _by(actor: str) -> Actor:
    return Actor(actor, "console")


def trigger(client: Client, task_id: int, actor: str) -> Done:
    occ = client.trigger(task_id, requested_by=actor, actor=_by(actor))
    assert not isinstance(occ, TriggerBatch)  # count 1
    return Done(trigger_text(occ), ok=occ.status == OccurrenceStatus.QUEUED)


def pause(client: Client, task_id: int, actor: str, *, until: str = "") -> Done:
    """Stops firing; with `until` (an instant or a duration, as `tasks pause --until` takes
    it, with its refusals) the pause ends by itself then."""
    end = pause_until(until.strip()) if until.strip() else None
    task = client.pause(task_id, until=end, actor=_by(actor))
    if task.paused_until is None:
        return Done(f"task '{task.name}' paused")
    return Done(f"task '{task.name}' paused until {presentation.iso(task.paused_until)}")


def resume(client: Client, task_id: int, actor: str) -> Done:
    task = client.resume(task_id, actor=_by(actor))
    return Done(f"task '{task.name}' resumed")


def cancel(client: Client, occurrence_id: int, actor: str) -> Done:
    done = client.cancel(occurrence_id, occurrence=True, requested_by=actor, actor=_by(actor))
    row = done.occurrence
    if done.cancel == "cancelled":
        return Done(f"occurrence {row.id} cancelled")
    return Done(f"occurrence {row.id}: cancel requested; its owner stops the job and confirms")


def backfill_range(
    client: Client, task_id: int, actor: str, *, start: str, end: str, confirm: bool
) -> Done:
    """A dry run lists the firings of [start, end] and what would be queued; `confirm` queues
    them (the latest outcomes the CLI's default picks: all but success)."""
    record = client.get_task(task_id)
    zone = record.spec.timezone
    chosen = backfill.DEFAULT_INCLUDE
    result = client.backfill(
        record.id,
        start=backfill.range_instant("from", start, zone),
        end=backfill.range_instant("to", end, zone),
        include=chosen,
        dry_run=not confirm,
        requested_by=actor,
        actor=_by(actor) if confirm else None,
    )
    if confirm:
        return Done(
            f"queued {len(result.occurrence_ids)} backfill occurrence(s) of task "
            f"{result.task_name} ({len(result.firings)} firing(s) in the range)"
        )
    firings = [
        {
            **presentation.fire_time_fields(f.scheduled_for, zone),
            "outcome": f.outcome,
            "backfilled": f.backfilled,
            "queue": f.wanted(chosen),
        }
        for f in result.firings
    ]
    text = (
        f"dry run: {len(result.wanted)} of {len(result.firings)} firings would be queued "
        f"for task {result.task_name}"
    )
    return Done(text, firings=firings)
