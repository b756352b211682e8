"""Writes occurrence rows (and the runs they own) through sql/occurrence.sql and sql/run.sql."""

from datetime import datetime, timedelta
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
    _cancel_runs(conn, ids, reason=reason, requested_by=requested_by, now=now)
    return ids


def _cancel_runs(
    conn: psycopg.Connection[Any],
    occurrence_ids: list[int],
    *,
    reason: str,
    requested_by: str,
    now: datetime | None,
) -> None:
    """Ends the running runs of just-cancelled occurrences (occurrence before run)."""
    if occurrence_ids:
        query.run(
            conn,
            "run_cancel_for_occurrences",
            {
                "occurrence_ids": occurrence_ids,
                "reason": reason,
                "requested_by": requested_by,
                "now": now,
            },
        )


def get(conn: psycopg.Connection[Any], occurrence_id: int) -> dict[str, Any] | None:
    return query.run(conn, "occurrence_get", {"id": occurrence_id})


def executing_count(conn: psycopg.Connection[Any]) -> int:
    return int(query.run(conn, "occurrence_executing_count"))


def queue_depth(conn: psycopg.Connection[Any]) -> int:
    return int(query.run(conn, "occurrence_queue_depth"))


def claim(
    conn: psycopg.Connection[Any], *, owner: str, limit: int, claim_ttl: timedelta
) -> list[dict[str, Any]]:
    """Claims up to `limit` startable occurrences (status launching, token raised)."""
    if limit <= 0:
        return []
    return query.run(
        conn, "occurrence_claim", {"owner": owner, "limit": limit, "claim_ttl": claim_ttl}
    )


def launch(
    conn: psycopg.Connection[Any], occurrence_id: int, *, owner: str, token: int
) -> dict[str, Any] | None:
    """Moves our claim to running; None when it is no longer ours (fenced)."""
    return query.run(
        conn, "occurrence_launch", {"id": occurrence_id, "owner": owner, "token": token}
    )


def release_claims(conn: psycopg.Connection[Any], owner: str) -> int:
    return query.run(conn, "occurrence_release_claims", {"owner": owner})


def lock(conn: psycopg.Connection[Any], occurrence_id: int) -> dict[str, Any] | None:
    return query.run(conn, "occurrence_lock", {"id": occurrence_id})


def finish(
    conn: psycopg.Connection[Any],
    occurrence_id: int,
    *,
    token: int,
    status: str,
    error: str | None,
    reason: str | None = None,
) -> bool:
    return (
        query.run(
            conn,
            "occurrence_finish",
            {
                "id": occurrence_id,
                "token": token,
                "status": status,
                "error": error,
                "reason": reason,
            },
        )
        == 1
    )


def retry(
    conn: psycopg.Connection[Any],
    occurrence_id: int,
    *,
    token: int,
    delay: timedelta,
    error: str | None,
    refund: bool,
) -> bool:
    """Back to the queue after `delay`; `refund` gives the attempt back (an interruption)."""
    return (
        query.run(
            conn,
            "occurrence_retry",
            {
                "id": occurrence_id,
                "token": token,
                "delay": delay,
                "error": error,
                "refund": int(refund),
            },
        )
        == 1
    )


def cancel(
    conn: psycopg.Connection[Any], occurrence_id: int, *, reason: str, requested_by: str
) -> dict[str, Any] | None:
    """Cancels one active occurrence (task locked first) and then its running run."""
    row = query.run(
        conn,
        "occurrence_cancel",
        {"id": occurrence_id, "reason": reason, "requested_by": requested_by},
    )
    if row is not None:
        _cancel_runs(conn, [occurrence_id], reason=reason, requested_by=requested_by, now=None)
    return row


def expired_claims(
    conn: psycopg.Connection[Any], *, after: int, limit: int
) -> list[dict[str, Any]]:
    return query.run(conn, "occurrence_expired_claims", {"after": after, "limit": limit})


def requeue_claim(conn: psycopg.Connection[Any], occurrence_id: int, *, token: int) -> bool:
    return query.run(conn, "occurrence_requeue_claim", {"id": occurrence_id, "token": token}) == 1


def past_deadline(conn: psycopg.Connection[Any], *, after: int, limit: int) -> list[dict[str, Any]]:
    return query.run(conn, "occurrence_past_deadline", {"after": after, "limit": limit})


def expire(conn: psycopg.Connection[Any], occurrence_id: int) -> dict[str, Any] | None:
    return query.run(conn, "occurrence_expire", {"id": occurrence_id})


def latest(conn: psycopg.Connection[Any], task_id: int) -> dict[str, Any] | None:
    return query.run(conn, "occurrence_latest", {"task_id": task_id})
