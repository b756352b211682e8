"""Reads the history `audit` checks, as typed rows, through the named queries in sql/audit.sql.

Every function only reads; the caller runs it inside a read-only snapshot
(`database.transaction(snapshot=True)`), so the rows of one check come from one moment.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from scheduler_daemon.domain.coverage import DefinitionEvent, Pruned
from scheduler_daemon.domain.sweep import Change, Span
from scheduler_daemon.storage import fleet_store, query

Conn = psycopg.Connection[Any]


@dataclass(frozen=True)
class RecordedTwice:
    task_id: int
    scheduled_for: datetime
    trigger: str  # schedule or backfill
    occurrence_ids: tuple[int, ...]


@dataclass(frozen=True)
class ActiveTwice:
    task_id: int
    occurrence_ids: tuple[int, ...]


@dataclass(frozen=True)
class ExclusiveRun:
    """A run in a group whose runs must not overlap (`scope` task or concurrency_key)."""

    scope: str
    group_key: str
    span: Span


@dataclass(frozen=True)
class OutOfOrder:
    scope: str  # concurrency_key or queue_task
    group_key: str
    occurrence_id: int
    run_id: int
    started_at: datetime
    waiting_id: int
    waiting_first_started_at: datetime | None
    waiting_finished_at: datetime | None


@dataclass(frozen=True)
class SucceededTwice:
    occurrence_id: int
    run_ids: tuple[int, ...]


@dataclass(frozen=True)
class OverdueRun:
    run_id: int
    occurrence_id: int
    owner: str
    takeover_at: datetime
    live_instance_ids: tuple[str, ...]
    checked_at: datetime


@dataclass(frozen=True)
class OneShot:
    task_id: int
    status: str
    occurrence_id: int | None
    occurrence_seq: int | None
    occurrence_status: str | None


@dataclass(frozen=True)
class TokenOutOfOrder:
    occurrence_id: int
    previous_id: int
    run_id: int
    previous_token: int
    lease_token: int


@dataclass(frozen=True)
class CancelledRunning:
    occurrence_id: int
    task_id: int
    run_ids: tuple[int, ...]


@dataclass(frozen=True)
class EarlyRun:
    """A run started before its occurrence's spread start."""

    run_id: int
    occurrence_id: int
    task_id: int
    started_at: datetime
    spread_start: datetime


@dataclass(frozen=True)
class EpochChangeReruns:
    """The occurrences created before one failover's first sighting and run after it."""

    timeline: int
    first_seen_at: datetime
    occurrence_count: int
    occurrence_ids: tuple[int, ...]  # the first `shown` of them


def _ids(row: dict[str, Any], *names: str) -> dict[str, Any]:
    """`row` with the array columns `names` as tuples (hashable, immutable)."""
    return {**row, **{n: tuple(row[n]) for n in names}}


def clock(conn: Conn, now: datetime | None = None) -> datetime:
    """The database's now (`now`: a test's pinned time)."""
    return query.run(conn, "audit_clock", {"now": now})


def next_runs(conn: Conn) -> dict[int, datetime]:
    """Per task, its next_run_at (tasks with none are absent)."""
    return {r["task_id"]: r["next_run_at"] for r in query.run(conn, "audit_task_next_run")}


def pruned(conn: Conn) -> dict[int, Pruned]:
    """Per task, what of its history the prune may have deleted (by its retention, the fleet's
    read here, and by the mark a prune records); tasks that can have lost none are absent."""
    rows = query.run(conn, "audit_task_pruned", {"retention": fleet_store.history_retention(conn)})
    return {r["task_id"]: Pruned(**r) for r in rows}


def recorded_twice(conn: Conn, since: datetime | None) -> list[RecordedTwice]:
    rows = query.run(conn, "audit_firing_recorded_twice", {"since": since})
    return [RecordedTwice(**_ids(r, "occurrence_ids")) for r in rows]


def task_events(conn: Conn) -> list[DefinitionEvent]:
    return [DefinitionEvent(**r) for r in query.run(conn, "audit_task_events")]


def scheduled_occurrences(
    conn: Conn, task_id: int, low: datetime, high: datetime
) -> tuple[list[datetime], list[tuple[datetime, datetime]]]:
    """One task's recorded firings in [low, high]: exact instants and summary ranges."""
    rows = query.run(
        conn, "audit_scheduled_occurrences", {"task_id": task_id, "low": low, "high": high}
    )
    exact = [r["scheduled_for"] for r in rows if r["last_scheduled_for"] is None]
    ranges = [
        (r["scheduled_for"], r["last_scheduled_for"])
        for r in rows
        if r["last_scheduled_for"] is not None
    ]
    return exact, ranges


def active_twice(conn: Conn) -> list[ActiveTwice]:
    rows = query.run(conn, "audit_forbid_active_twice")
    return [ActiveTwice(**_ids(r, "occurrence_ids")) for r in rows]


def exclusive_runs(conn: Conn, since: datetime | None) -> list[ExclusiveRun]:
    return [
        ExclusiveRun(r["scope"], r["group_key"], Span(r["id"], r["started_at"], r["finished_at"]))
        for r in query.run(conn, "audit_exclusive_runs", {"since": since})
    ]


def out_of_order(conn: Conn, since: datetime | None) -> list[OutOfOrder]:
    return [OutOfOrder(**r) for r in query.run(conn, "audit_fifo_order", {"since": since})]


def budget_runs(conn: Conn, since: datetime | None) -> list[Span]:
    rows = query.run(conn, "audit_budget_runs", {"since": since})
    return [Span(r["id"], r["started_at"], r["finished_at"]) for r in rows]


def budget_changes(conn: Conn) -> list[Change]:
    """The budget's values over time; a value that is not a number is skipped."""
    changes = []
    for r in query.run(conn, "audit_budget_changes"):
        if isinstance(r["value"], int | float) and not isinstance(r["value"], bool):
            changes.append(Change(r["at"], int(r["value"])))
    return changes


def succeeded_twice(conn: Conn, since: datetime | None) -> list[SucceededTwice]:
    rows = query.run(conn, "audit_success_twice", {"since": since})
    return [SucceededTwice(**_ids(r, "run_ids")) for r in rows]


def overdue_runs(conn: Conn, slack: timedelta, now: datetime | None = None) -> list[OverdueRun]:
    rows = query.run(conn, "audit_takeover_overdue", {"slack": slack, "now": now})
    return [OverdueRun(**_ids(r, "live_instance_ids")) for r in rows]


def one_shots(conn: Conn) -> list[OneShot]:
    return [OneShot(**r) for r in query.run(conn, "audit_one_shots")]


def tokens_out_of_order(conn: Conn, since: datetime | None) -> list[TokenOutOfOrder]:
    rows = query.run(conn, "audit_lease_token_order", {"since": since})
    return [TokenOutOfOrder(**r) for r in rows]


def cancelled_running(conn: Conn) -> list[CancelledRunning]:
    rows = query.run(conn, "audit_cancelled_run_still_running")
    return [CancelledRunning(**_ids(r, "run_ids")) for r in rows]


def started_before_spread(conn: Conn, since: datetime | None) -> list[EarlyRun]:
    return [EarlyRun(**r) for r in query.run(conn, "audit_started_before_spread", {"since": since})]


def epoch_change_reruns(conn: Conn, since: datetime | None, shown: int) -> list[EpochChangeReruns]:
    rows = query.run(conn, "audit_epoch_change_reruns", {"since": since, "shown": shown})
    return [EpochChangeReruns(**_ids(r, "occurrence_ids")) for r in rows]
