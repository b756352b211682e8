"""Prunes history older than its retention through the named queries in sql/retention.sql."""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from scheduler_daemon.storage import query

# The cursor's start: before every finished occurrence.
START = (datetime.min.replace(year=1), 0)


@dataclass(frozen=True)
class Batch:
    """What one batch deleted (or would delete), how many rows it scanned, and the cursor to go
    on from; `after` None: the scan reached the end."""

    occurrences: int
    runs: int
    scanned: int
    after: tuple[datetime, int] | None


def min_override(conn: psycopg.Connection[Any]) -> timedelta | None:
    return query.run(conn, "retention_min_override")


def prune(
    conn: psycopg.Connection[Any],
    *,
    retention: timedelta | None,
    min_retention: timedelta,
    after: tuple[datetime, int],
    scan: int,
    limit: int,
    dry_run: bool = False,
    now: datetime | None = None,
    task_id: int | None = None,
) -> Batch:
    """One batch: deletes at most `limit` occurrences (with their runs) of the at most `scan`
    finished ones after `after`, oldest first (with `task_id`, only that task's), raising each
    task's task_pruned mark in the same statement; with `dry_run` only counts them. JIT off for
    the transaction: over a history of 400 partitions its plan was JIT-compiled (7,373
    functions) and never finished a pass (bench/history_scale.py, issue 47)."""
    query.run(conn, "retention_jit_off")
    row = query.run(
        conn,
        "retention_preview" if dry_run else "retention_prune",
        {
            "retention": retention,
            "min_retention": min_retention,
            "after_at": after[0],
            "after_id": after[1],
            "scan": scan,
            "limit": limit,
            "now": now,
            "task_id": task_id,
        },
    )
    return Batch(row["occurrences"], row["runs"], row["scanned"], _cursor(row, scan))


def _cursor(row: dict[str, Any], scan: int) -> tuple[datetime, int] | None:
    """Where the next batch goes on from; None when this one read less than `scan` rows."""
    if row["scanned"] >= scan and row["after_at"] is not None:
        return (row["after_at"], row["after_id"])
    return None


@dataclass(frozen=True)
class Window:
    """The rows one batch scans: their tasks' ids, how many, and the cursor after them (None: the
    scan reached the end)."""

    task_ids: list[int]
    scanned: int
    after: tuple[datetime, int] | None


def window(
    conn: psycopg.Connection[Any],
    *,
    min_retention: timedelta,
    after: tuple[datetime, int],
    scan: int,
    now: datetime | None = None,
) -> Window:
    """What the batch at `after` would scan, read without locking anything."""
    row = query.run(
        conn,
        "retention_window",
        {
            "min_retention": min_retention,
            "after_at": after[0],
            "after_id": after[1],
            "scan": scan,
            "now": now,
        },
    )
    return Window(row["task_ids"], row["scanned"], _cursor(row, scan))
