"""Reads and writes exclusion calendars, a task's links to them and the rows of its runs of
excluded firings (sql/calendar.sql, ADR 0025)."""

from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

import psycopg

from scheduler_daemon.domain.calendar import Calendar, CalendarDates
from scheduler_daemon.storage import query
from scheduler_daemon.storage.database import Conn


def write(
    conn: psycopg.Connection[Any],
    name: str,
    dates: CalendarDates,
    *,
    replace: bool,
    now: datetime | None = None,
) -> Calendar | None:
    """Creates calendar `name` with `dates`, or with `replace` rewrites it; None when it exists
    and `replace` is false (nothing written)."""
    row = query.run(
        conn,
        "calendar_insert",
        {
            "name": name,
            "source_kind": dates.source_kind,
            "first_day": dates.first_day,
            "last_day": dates.last_day,
            "replace": replace,
            "now": now,
        },
    )
    if row is None:
        return None
    count = query.run(conn, "calendar_dates_replace", {"id": row["id"], "days": list(dates.days)})
    return Calendar.from_row({**row, "date_count": count})


def list_all(conn: psycopg.Connection[Any]) -> list[Calendar]:
    return [Calendar.from_row(row) for row in query.run(conn, "calendar_list", {})]


def find(conn: psycopg.Connection[Any], name: str) -> Calendar | None:
    row = query.run(conn, "calendar_find", {"name": name})
    if row is None:
        return None
    days, tasks = tuple(row["days"]), tuple(row["tasks"])
    return Calendar.from_row({**row, "days": days, "tasks": tasks, "date_count": len(days)})


def lock(conn: psycopg.Connection[Any], name: str) -> tuple[int, list[str]] | None:
    """Locks calendar `name`: its id and the live tasks that name it, read after the lock (a
    link committed while it waited counts); None when there is none."""
    calendar_id = query.run(conn, "calendar_lock", {"name": name})
    if calendar_id is None:
        return None
    return calendar_id, [
        row["name"] for row in query.run(conn, "calendar_users", {"id": calendar_id})
    ]


def delete(conn: psycopg.Connection[Any], calendar_id: int) -> bool:
    return query.run(conn, "calendar_delete", {"id": calendar_id}) == 1


def set_for_task(conn: psycopg.Connection[Any], task_id: int, names: Sequence[str]) -> list[str]:
    """The locked task's calendars become `names`; returns those that exist (the caller refuses
    an unknown one, and its transaction rolls back)."""
    rows = query.run(conn, "task_calendars_set", {"task_id": task_id, "names": list(names)})
    return [row["name"] for row in rows]


def days_for_task(
    conn: psycopg.Connection[Any], task_id: int, low: date, high: date
) -> frozenset[date]:
    """The dates in [low, high] the task's calendars exclude (the dispatcher's read)."""
    rows = query.run(conn, "task_calendar_days", {"task_id": task_id, "low": low, "high": high})
    return frozenset(row["day"] for row in rows)


def named_days_for_task(
    conn: psycopg.Connection[Any], task_id: int, low: date, high: date
) -> dict[date, tuple[str, ...]]:
    """As days_for_task, each date with the names of the calendars that hold it."""
    params = {"task_id": task_id, "low": low, "high": high}
    rows = query.run(conn, "task_calendar_days_named", params)
    return {row["day"]: tuple(row["calendars"]) for row in rows}


def newest_scheduled(conn: Conn, task_id: int) -> dict[str, Any] | None:
    """The task's newest scheduled row: its id, status, reason and the last firing it records
    (`ends`)."""
    row = query.run(conn, "calendar_newest_scheduled_row", {"task_id": task_id})
    return dict(row) if row is not None else None


def extend_excluded(conn: Conn, row_id: int, *, count: int, last: datetime, now: datetime) -> None:
    """Extends an excluded run's row by the `count` firings that follow it, up to `last`."""
    params = {"id": row_id, "count": count, "last": last, "now": now}
    assert query.run(conn, "calendar_extend_excluded_row", params) is not None
