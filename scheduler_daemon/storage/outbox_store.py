"""The notification outbox: the rows a finished occurrence owes, written beside its outcome,
claimed by a deliverer for one POST and recorded fenced on that claim."""

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg

from scheduler_daemon.domain.notification import OPERATOR_REASONS, Notification
from scheduler_daemon.storage import query


def enqueue(
    conn: psycopg.Connection[Any],
    occurrence_ids: Sequence[int],
    *,
    savepoint: bool = False,
    grouped: bool = False,
) -> int:
    """Inside the transaction that finished `occurrence_ids` (their rows locked): records the
    notifications they owe, at most one per (occurrence, event); returns how many were new.
    `savepoint`: in a savepoint of its own, as the dispatcher runs each task's writes.
    `grouped`: one per task, event and reason, on its first occurrence, counting the firings
    (the dispatcher's skipped firings: see `outbox_enqueue`)."""
    if not occurrence_ids:
        return 0
    run = query.run_in_savepoint if savepoint else query.run
    params = {"ids": sorted(set(occurrence_ids)), "grouped": grouped}
    return int(run(conn, "outbox_enqueue", params))


def deadline_window(
    conn: psycopg.Connection[Any], *, lookback: timedelta
) -> tuple[datetime, datetime, bool]:
    """The window of deadlines a scan judges next: (after, until] and whether `until` is now
    (`deadline_mark_window`)."""
    row = query.run(conn, "deadline_mark_window", {"lookback": lookback})
    return row["after"], row["until"], bool(row["caught_up"])


def advance_deadline_mark(conn: psycopg.Connection[Any], until: datetime) -> bool:
    """Raises the fleet's mark to `until`, every deadline up to it judged; False: it was there."""
    return query.run(conn, "deadline_mark_advance", {"until": until}) == 1


def enqueue_deadlines(
    conn: psycopg.Connection[Any], *, after: datetime, until: datetime, limit: int
) -> int:
    """Records the `deadline` notifications owed by recorded firings whose deadline falls in
    (after, until] (see `outbox_enqueue_deadlines`); returns how many were new."""
    params = {"after": after, "until": until, "limit": limit, "operator": OPERATOR_REASONS}
    return int(query.run(conn, "outbox_enqueue_deadlines", params))


def enqueue_unrecorded_deadlines(conn: psycopg.Connection[Any], *, limit: int) -> int:
    """Records the `deadline` notifications owed by due firings not recorded past their
    deadline, keyed by the firing (see `outbox_enqueue_unrecorded_deadlines`)."""
    return int(query.run(conn, "outbox_enqueue_unrecorded_deadlines", {"limit": limit}))


def enqueue_late_deadlines(
    conn: psycopg.Connection[Any], occurrence_ids: Sequence[int], *, now: datetime | None
) -> int:
    """Inside the transaction that recorded `occurrence_ids` (the dispatcher's): one `deadline`
    notification for those recorded past their deadline, counting them, in a savepoint of its
    own, as the dispatcher runs each task's writes (see `outbox_enqueue_late_deadlines`). Run
    once more when it wrote none: the first firing's key may have been taken by a scan's row
    committed while this waited on it, and the others are still owed theirs."""
    if not occurrence_ids:
        return 0
    params = {"ids": sorted(set(occurrence_ids)), "now": now}
    written = 0
    for _ in range(2):
        written = int(query.run_in_savepoint(conn, "outbox_enqueue_late_deadlines", params))
        if written:
            break
    return written


def prune_unrecorded(
    conn: psycopg.Connection[Any],
    *,
    retention: timedelta | None,
    min_retention: timedelta,
    limit: int,
) -> int:
    """Deletes notifications of firings that had no row when written, once past their task's
    retention (else `retention`; none is shorter than `min_retention`) (see
    `outbox_prune_unrecorded`); returns how many."""
    params = {"retention": retention, "min_retention": min_retention, "limit": limit}
    return int(query.run(conn, "outbox_prune_unrecorded", params))


def claim(
    conn: psycopg.Connection[Any], *, lease: timedelta, full: Sequence[str] = ()
) -> Notification | None:
    """Claims the oldest due notification for one POST, none bound for a URL in `full` (see
    `outbox_claim`)."""
    row = query.run(conn, "outbox_claim", {"lease": lease, "full": list(full)})
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
