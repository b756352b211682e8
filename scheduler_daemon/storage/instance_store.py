"""The registry of daemon instances: register, heartbeat, deregister, list (sql/instance.sql)."""

from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from scheduler_daemon.domain.instance import Instance
from scheduler_daemon.storage import query

# The one NOTIFY channel: wakeup_notify sends on it, the waker's connection LISTENs on it.
WAKEUP_CHANNEL = "scheduler_daemon_wakeup"
TASK_ADDED = "task_added"  # the wake-up reason that makes a woken daemon dispatch at once


def register(conn: psycopg.Connection[Any], **fields: Any) -> Instance:
    return Instance.from_row(query.run(conn, "instance_register", fields))


def heartbeat(
    conn: psycopg.Connection[Any],
    instance_id: str,
    *,
    slots_in_use: int,
    clock_drift: timedelta | None,
    stopping: bool,
) -> datetime | None:
    """The database clock, or None when the row is gone (a reconciler removed us as dead)."""
    row = query.run(
        conn,
        "instance_heartbeat",
        {
            "id": instance_id,
            "slots_in_use": slots_in_use,
            "clock_drift": clock_drift,
            "stopping": stopping,
        },
    )
    return None if row is None else row["db_now"]


def deregister(conn: psycopg.Connection[Any], instance_id: str) -> None:
    query.run(conn, "instance_deregister", {"id": instance_id})


def list_instances(conn: psycopg.Connection[Any]) -> list[Instance]:
    return [Instance.from_row(row) for row in query.run(conn, "instance_list")]


def database_clock(conn: psycopg.Connection[Any]) -> datetime:
    return query.run(conn, "instance_clock")["db_now"]


def notify_wakeup(conn: psycopg.Connection[Any], reason: str) -> None:
    """Wakes idle daemons when this transaction commits."""
    query.run(conn, "wakeup_notify", {"channel": WAKEUP_CHANNEL, "reason": reason})


def notify_task_added(conn: psycopg.Connection[Any], next_run_at: datetime | None) -> None:
    """Wakes idle daemons for a new task and tells them when it falls due (database clock), so
    they can sleep until then without a round trip of their own."""
    notify_wakeup(conn, task_added_reason(next_run_at))


def task_added_reason(next_run_at: datetime | None) -> str:
    """The wake-up payload of a new task that falls due at `next_run_at` (None: never)."""
    due = "" if next_run_at is None else f" {next_run_at.isoformat()}"
    return f"{TASK_ADDED}{due}"


def task_added_due(payload: str) -> datetime | None:
    """The due time a `notify_task_added` payload carries; None when it carries none."""
    reason, _, due = payload.partition(" ")
    if reason != TASK_ADDED or not due:
        return None
    try:
        return datetime.fromisoformat(due)
    except ValueError:
        return None


def listen_wakeups(conn: psycopg.Connection[Any]) -> None:
    """Subscribes `conn` (autocommit, a session of its own) to the wake-ups."""
    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(WAKEUP_CHANNEL)))


def unlisten_wakeups(conn: psycopg.Connection[Any]) -> None:
    """Takes `listen_wakeups` back."""
    conn.execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(WAKEUP_CHANNEL)))


def remove_dead(conn: psycopg.Connection[Any], dead_after: timedelta) -> list[str]:
    return [
        row["id"] for row in query.run(conn, "instance_remove_dead", {"dead_after": dead_after})
    ]


def dead(conn: psycopg.Connection[Any], dead_after: timedelta) -> list[str]:
    return [row["id"] for row in query.run(conn, "instance_dead", {"dead_after": dead_after})]
