"""Reads what `tasks health` judges and shows, through the named queries in sql/health.sql."""

from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any

import psycopg

from scheduler_daemon.domain.health import ATTEMPT_SCAN, RUN_SAMPLE, Group, RunFigures, Signals
from scheduler_daemon.domain.task import TaskRecord
from scheduler_daemon.storage import query, task_store


@dataclass(frozen=True)
class TaskSignals:
    """One live task's name and id with the signals its verdict is decided from."""

    id: int
    name: str
    signals: Signals


@dataclass(frozen=True)
class Window:
    """One task's figures over the window: its row, its occurrences grouped, and its runs'."""

    task: TaskRecord
    now: datetime
    groups: tuple[Group, ...]
    figures: RunFigures


def signals(
    conn: psycopg.Connection[Any],
    window: timedelta,
    *,
    task_id: int | None = None,
    attempts: int,
    now: datetime | None = None,
    after: str | None = None,
    batch: int | None = None,
) -> list[TaskSignals]:
    """Every live task's signals (or the task `task_id`'s), in the byte order of names; with
    `after` and `batch`, the next `batch` after the name `after` (task_name_c_idx). JIT is
    off for the rest of the transaction (sql/health.sql says why)."""
    query.run(conn, "health_jit_off")
    rows = query.run(
        conn,
        "health_signals",
        {
            "now": now,
            "window": window,
            "id": task_id,
            "attempts": attempts,
            "scan": ATTEMPT_SCAN,
            "after": after,
            "batch": batch,
        },
    )
    return [
        TaskSignals(
            row["id"],
            row["name"],
            Signals(
                now=row["now"],
                paused=row["paused"],
                parked_at=row["parked_at"],
                park_error=row["park_error"],
                status=row["status"],
                misfire=row["misfire"],
                misfire_grace=row["misfire_grace"],
                next_run_at=row["next_run_at"],
                lost=tuple(Group.from_json(g, datetime.fromisoformat) for g in row["lost"] or ()),
                queued_past_deadline=row["queued_past_deadline"],
                recent_attempts=tuple(row["recent_attempts"]),
                failing_after=attempts,
            ),
        )
        for row in rows
    ]


def windows(
    conn: psycopg.Connection[Any],
    task_ids: Sequence[int],
    window: timedelta,
    *,
    now: datetime | None = None,
) -> dict[int, Window]:
    """The window's figures of the tasks `task_ids`, by id (after `signals`, JIT off)."""
    rows = query.run(
        conn,
        "health_window",
        {"now": now, "window": window, "ids": list(task_ids), "sample": RUN_SAMPLE},
    )
    return {
        row["id"]: Window(
            task=task_store.record(row),
            now=row["now"],
            groups=tuple(Group.from_json(g, datetime.fromisoformat) for g in row["groups"]),
            figures=RunFigures(*(row[f.name] for f in fields(RunFigures))),
        )
        for row in rows
    }
