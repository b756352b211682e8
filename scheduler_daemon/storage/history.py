"""Reads run history: runs, and occurrences whose status no run shows (sql/run.sql)."""

from typing import Any

import psycopg

from scheduler_daemon.domain.status import RunStatus
from scheduler_daemon.storage import query


def list_history(
    conn: psycopg.Connection[Any],
    *,
    task_id: int | None,
    status: str | None,
    limit: int,
    after: tuple[int, int | None] | None = None,
) -> list[dict[str, Any]]:
    """One page, newest occurrence first, after the keyset `after` = (occurrence_id, run id or
    None for that occurrence's own row)."""
    return query.run(
        conn,
        "run_history",
        {
            "task_id": task_id,
            "status": status,
            "limit": limit,
            "after_occurrence": after[0] if after else None,
            "after_run": after[1] if after else None,
            "run_statuses": list(RunStatus),
        },
    )


def get_run(conn: psycopg.Connection[Any], run_id: int) -> dict[str, Any] | None:
    return query.run(conn, "run_get", {"id": run_id})


def runs_of(conn: psycopg.Connection[Any], occurrence_id: int) -> list[dict[str, Any]]:
    return query.run(conn, "run_list_for_occurrence", {"occurrence_id": occurrence_id})
