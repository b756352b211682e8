"""Writes occurrence rows (and the runs they own) through sql/occurrence.sql and sql/run.sql."""

from datetime import datetime
from typing import Any

import psycopg

from scheduler_daemon.storage import query


def insert(
    conn: psycopg.Connection[Any],
    *,
    task_id: int,
    occurrence_seq: int,
    scheduled_for: datetime,
    trigger: str,
    overlap: str,
    concurrency_key: str | None,
    status: str,
    reason: str | None,
    now: datetime,
    requested_by: str | None = None,
    firing_count: int = 1,
    last_scheduled_for: datetime | None = None,
) -> dict[str, Any]:
    """Inserts an occurrence; the caller holds the task's row lock and allocated the seq."""
    return query.run(
        conn,
        "occurrence_insert",
        {
            "task_id": task_id,
            "occurrence_seq": occurrence_seq,
            "scheduled_for": scheduled_for,
            "last_scheduled_for": last_scheduled_for,
            "firing_count": firing_count,
            "trigger": trigger,
            "overlap": overlap,
            "concurrency_key": concurrency_key,
            "status": status,
            "reason": reason,
            "requested_by": requested_by,
            "now": now,
        },
    )


def active_count(conn: psycopg.Connection[Any], task_id: int) -> int:
    return int(query.run(conn, "occurrence_active_count", {"task_id": task_id}))


def cancel_active(
    conn: psycopg.Connection[Any], task_id: int, *, reason: str, requested_by: str, now: datetime
) -> list[int]:
    """Cancels a locked task's active occurrences (raising their tokens) and then their running
    runs: occurrence before run, the one lock order. Returns the cancelled occurrence ids."""
    rows = query.run(
        conn,
        "occurrence_cancel_active",
        {"task_id": task_id, "reason": reason, "requested_by": requested_by, "now": now},
    )
    ids = [row["id"] for row in rows]
    if ids:
        query.run(
            conn,
            "run_cancel_for_occurrences",
            {"occurrence_ids": ids, "reason": reason, "requested_by": requested_by, "now": now},
        )
    return ids


def get(conn: psycopg.Connection[Any], occurrence_id: int) -> dict[str, Any] | None:
    return query.run(conn, "occurrence_get", {"id": occurrence_id})
