"""Reads run history: runs, occurrences whose status no run shows, and a run's output (the one
write: a follower's mark, `run.followed_at`) (sql/run.sql)."""

from datetime import timedelta
from typing import Any

import psycopg

from scheduler_daemon.domain.run import HistoryRow, RunDetail, RunOutput
from scheduler_daemon.domain.status import RunStatus
from scheduler_daemon.storage import query


def list_history(
    conn: psycopg.Connection[Any],
    *,
    task_id: int | None,
    status: str | None,
    limit: int,
    after: tuple[int, int | None] | None = None,
) -> list[HistoryRow]:
    """One page, newest occurrence first, after the keyset `after` = (occurrence_id, run id or
    None for that occurrence's own row)."""
    rows = query.run(
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
    return [HistoryRow.from_row(row) for row in rows]


def get_run(conn: psycopg.Connection[Any], run_id: int) -> RunDetail | None:
    row = query.run(conn, "run_get", {"id": run_id})
    return None if row is None else RunDetail.from_row(row)


def runs_of(conn: psycopg.Connection[Any], occurrence_id: int) -> list[RunDetail]:
    """The runs of one occurrence, oldest first."""
    rows = query.run(conn, "run_list_for_occurrence", {"occurrence_id": occurrence_id})
    return [RunDetail.from_row(row) for row in rows]


def follow(conn: psycopg.Connection[Any], run_id: int, refresh: timedelta) -> RunOutput | None:
    """`runs logs -f`: the run's status and output tail, marking a running run followed (at
    most once per `refresh`); None: no such run."""
    row = query.run(conn, "run_follow", {"id": run_id, "refresh": refresh})
    return None if row is None else RunOutput.from_row(row)


def output(conn: psycopg.Connection[Any], run_id: int) -> RunOutput | None:
    """`runs logs`: the run's status and output tail; None: no such run."""
    row = query.run(conn, "run_output", {"id": run_id})
    return None if row is None else RunOutput.from_row(row)
