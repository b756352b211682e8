"""The notification outbox: the rows a finished occurrence owes, written beside its outcome."""

from collections.abc import Sequence
from typing import Any

import psycopg

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
