"""The record of operators' actions (sql/operator_action.sql): written by the Client in the
action's own transaction (the CLI's and the web console's), read newest first."""

from typing import Any

import psycopg

from scheduler_daemon.domain.operator import Actor, check_action
from scheduler_daemon.storage import query


def record(
    conn: psycopg.Connection[Any],
    actor: Actor,
    action: str,
    *,
    task_id: int | None,
    occurrence_id: int | None = None,
    detail: str | None = None,
    commit: bool = False,
) -> dict[str, Any]:
    """Records `action` by `actor` in the caller's transaction, so the action and its record
    commit or roll back together; `commit`: the insert ends the transaction, COMMIT sent in
    the same round trip (the trigger's short path)."""
    check_action(action)
    params = {
        "actor": actor.name,
        "action": action,
        "source": actor.source,
        "task_id": task_id,
        "occurrence_id": occurrence_id,
        "detail": detail,
    }
    run = query.run_and_commit if commit else query.run
    return dict(run(conn, "operator_action_insert", params))


def recent(
    conn: psycopg.Connection[Any], *, task_id: int | None, limit: int
) -> list[dict[str, Any]]:
    """The newest `limit` actions (of one task when `task_id` is given), newest first."""
    rows = query.run(conn, "operator_action_recent", {"task_id": task_id, "limit": limit})
    return [dict(row) for row in rows]
