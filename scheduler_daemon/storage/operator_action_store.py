"""The record of operators' actions (sql/operator_action.sql): written by the CLI and the web
console after an action commits, read newest first."""

from typing import Any

import psycopg

from scheduler_daemon.storage import query


def insert(
    conn: psycopg.Connection[Any],
    *,
    actor: str,
    action: str,
    source: str,
    task_id: int | None,
    occurrence_id: int | None,
    detail: str | None,
) -> dict[str, Any]:
    """Records one action; returns the row (its `at` from the database clock)."""
    params = {
        "actor": actor,
        "action": action,
        "source": source,
        "task_id": task_id,
        "occurrence_id": occurrence_id,
        "detail": detail,
    }
    return dict(query.run(conn, "operator_action_insert", params))


def recent(
    conn: psycopg.Connection[Any], *, task_id: int | None, limit: int
) -> list[dict[str, Any]]:
    """The newest `limit` actions (of one task when `task_id` is given), newest first."""
    rows = query.run(conn, "operator_action_recent", {"task_id": task_id, "limit": limit})
    return [dict(row) for row in rows]
