"""The notification outbox: the rows a finished occurrence owes, written beside its outcome,
claimed by a deliverer for one POST and recorded fenced on that claim."""

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import psycopg

from scheduler_daemon.domain.notification import Notification
from scheduler_daemon.storage import query


def enqueue(
    conn: psycopg.Connection[Any], occurrence_ids: Sequence[int], *, savepoint: bool = False
) -> int:
    """Inside the transaction that finished `occurrence_ids` (their rows locked): records the
    notifications they owe, at most one per (occurrence, event); returns how many were new.
    `savepoint`: in a savepoint of its own, as the dispatcher runs each task's writes."""
    if not occurrence_ids:
        return 0
    run = query.run_in_savepoint if savepoint else query.run
    return int(run(conn, "outbox_enqueue", {"ids": sorted(set(occurrence_ids))}))


def enqueue_deadlines(conn: psycopg.Connection[Any], *, lookback: timedelta, limit: int) -> int:
    """Records the `deadline` notifications owed by firings whose deadline passed within
    `lookback` (see `outbox_enqueue_deadlines`); returns how many were new."""
    params = {"lookback": lookback, "limit": limit}
    return int(query.run(conn, "outbox_enqueue_deadlines", params))


def claim(conn: psycopg.Connection[Any], *, lease: timedelta) -> Notification | None:
    """Claims the oldest due notification for one POST (see `outbox_claim`)."""
    row = query.run(conn, "outbox_claim", {"lease": lease})
    return None if row is None else Notification.from_row(row)


def delivered(conn: psycopg.Connection[Any], notification: Notification) -> bool:
    """Records its delivery; False: fenced (a later claim holds it, or it was recorded)."""
    params = {"id": notification.id, "attempts": notification.attempts}
    return query.run(conn, "outbox_delivered", params) == 1


def failed(
    conn: psycopg.Connection[Any], notification: Notification, *, error: str, delay: timedelta
) -> bool:
    """Records a failed POST, due again after `delay`; False: fenced."""
    params = {"id": notification.id, "attempts": notification.attempts, "error": error}
    return query.run(conn, "outbox_failed", {**params, "delay": delay}) == 1


def counts(conn: psycopg.Connection[Any]) -> dict[str, Any] | None:
    """Undelivered and failing notifications, and the oldest one's age (`status`); None on a
    schema before revision 0025."""
    if not query.run(conn, "outbox_exists"):
        return None
    return dict(query.run(conn, "outbox_counts"))
