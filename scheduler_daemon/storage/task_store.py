"""Reads and writes task rows through the named queries in sql/task.sql."""

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from scheduler_daemon.domain.outcome import TaskOutcome
from scheduler_daemon.domain.task import (
    DueLeft,
    TaskRecord,
    TaskRef,
    TaskSpec,
)
from scheduler_daemon.storage import instance_store, query
from scheduler_daemon.storage.database import Statement
from scheduler_daemon.storage.error import Conflict, NotFound
from scheduler_daemon.storage.task_rows import record


def _columns(spec: TaskSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "schedule_kind": spec.schedule_kind,
        "cron_expr": spec.cron,
        "every": spec.every,
        "run_at": spec.at,
        "anchor_at": spec.anchor,
        "timezone": spec.timezone,
        "dst_gap": spec.dst_gap,
        "dst_overlap": spec.dst_overlap,
        "executor": spec.executor,
        "payload": Jsonb(spec.payload),
        "concurrency_key": spec.concurrency_key,
        "overlap": spec.overlap,
        "misfire": spec.misfire,
        "misfire_grace": spec.misfire_grace,
        "catchup_limit": spec.catchup_limit,
        "catchup_window": spec.catchup_window,
        "start_deadline": spec.start_deadline,
        "run_timeout": spec.timeout,
        "max_attempts": spec.max_attempts,
        "backoff": spec.backoff,
        "backoff_max": spec.backoff_max,
        "spread": spec.spread,
        "paused": spec.paused,
        "history_retention": spec.history_retention,
        "in_process": spec.in_process,
        "notify_url": spec.notify_url,
        "notify_on": None if spec.notify_on is None else list(spec.notify_on),
        "deadline": spec.deadline,
        "notify_headers": Jsonb(dict(spec.notify_headers)) if spec.notify_headers else None,
        "notify_header_refs": (
            Jsonb(dict(spec.notify_header_refs)) if spec.notify_header_refs else None
        ),
    }


def insert(
    conn: psycopg.Connection[Any],
    spec: TaskSpec,
    next_run_at: datetime | None,
    *,
    source: str | None = None,
    needs_build: str | None = None,
) -> TaskRecord:
    """Inserts a task and wakes idle daemons for it at commit (instance_store's `task_added`
    with its due time), in one statement. Conflict if a live task has its name: nothing is
    inserted, and the caller's transaction goes on. `needs_build`: its mark (ADR 0029)."""
    if next_run_at is not None:  # as the database returns it, so the payload reads the same
        next_run_at = next_run_at.astimezone(conn.info.timezone)
    row = query.run(
        conn,
        "task_insert",
        {
            **_columns(spec),
            "next_run_at": next_run_at,
            "source": source,
            "needs_build": needs_build,
            "channel": instance_store.WAKEUP_CHANNEL,
            "reason_woken": instance_store.task_added_reason(next_run_at),
        },
    )
    if row is None:
        raise Conflict(f"a task named '{spec.name}' already exists")
    return record(row)


_TAKEN_NAME = re.compile(r"Key \(name\)=\((?P<name>.*)\) already exists")


def insert_many(
    conn: psycopg.Connection[Any], tasks: Sequence[tuple[TaskSpec, datetime | None, str | None]]
) -> list[TaskRecord]:
    """Inserts (spec, next_run_at, needs_build) triples in one statement; returns their records
    in the same order. Conflict naming the first taken name, and nothing inserted, if any name
    is taken."""
    if not tasks:
        return []
    rows = [
        {**_columns(spec), "next_run_at": due, "needs_build": needs} for spec, due, needs in tasks
    ]
    params = {column: [row[column] for row in rows] for column in rows[0]}
    # An array per task does not fit one array column (unnest would flatten a ragged one): the
    # events go as one comma-separated text each (none holds a comma).
    params["notify_on"] = [None if v is None else ",".join(v) for v in params["notify_on"]]
    try:
        with conn.transaction():
            inserted = query.run(conn, "task_insert_many", params)
    except psycopg.errors.UniqueViolation as exc:
        taken = _TAKEN_NAME.search(exc.diag.message_detail or "")
        name = taken["name"] if taken else "in this batch"
        raise Conflict(f"a task named '{name}' already exists") from exc
    by_name = {row["name"]: record(row) for row in inserted}
    return [by_name[spec.name] for spec, _, _ in tasks]


def find(conn: psycopg.Connection[Any], ref: str | int) -> TaskRecord:
    """A task by id (deleted ones too) or by the name of a live task; NotFound otherwise."""
    task_id = int(ref) if isinstance(ref, int) or str(ref).isdigit() else None
    row = query.run(conn, "task_find", {"id": task_id, "name": str(ref)})
    if row is None:
        raise NotFound(f"unknown task '{ref}'")
    return record(row)


def lock(conn: psycopg.Connection[Any], ref: str | int) -> TaskRecord:
    """Finds a live task and takes its row lock (the parent lock, always first), in one
    statement."""
    name, params = lock_statement(ref)
    return locked(ref, query.run(conn, name, params))


def lock_statement(ref: str | int) -> tuple[str, dict[str, Any]]:
    """`lock` as a statement to send with others (a transaction's `first`); `locked` reads it."""
    task_id = int(ref) if isinstance(ref, int) or str(ref).isdigit() else None
    return "task_lock_ref", {"id": task_id, "name": str(ref)}


def locked(ref: str | int, row: dict[str, Any] | None) -> TaskRecord:
    """The live task `lock_statement(ref)` locked; NotFound if none."""
    if row is None:
        raise NotFound(f"unknown task '{ref}'")
    if row["deleted_at"] is not None:
        raise NotFound(f"unknown task '{ref}' (it was deleted)")
    return record(row)


def list_live(
    conn: psycopg.Connection[Any],
    *,
    after: str | None = None,
    prefix: str | None = None,
    status: str | None = None,
    paused: bool | None = None,
    limit: int | None = None,
) -> list[TaskRecord]:
    """Live tasks in byte order of their names, after the name `after`, filtered; `limit`
    None: all of them."""
    pattern = None
    if prefix is not None:
        pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    params = {
        "after": after,
        "pattern": pattern,
        "status": status,
        "paused": paused,
        "limit": limit,
    }
    return [record(row) for row in query.run(conn, "task_list", params)]


def update(
    conn: psycopg.Connection[Any],
    task_id: int,
    spec: TaskSpec,
    *,
    status: str,
    next_run_at: datetime | None,
    now: datetime,
    source: str | None = None,
    needs_build: str | None = None,
) -> TaskRecord:
    """Rewrites a locked task's definition; `source` (when given) makes an apply source own it.
    `needs_build`: its mark (ADR 0029), as the new definition needs it now."""
    params = {
        "source": source,
        "needs_build": needs_build,
        **_columns(spec),
        "id": task_id,
        "status": status,
        "next_run_at": next_run_at,
        "now": now,
    }
    return record(query.run(conn, "task_update", params))


def set_paused(
    conn: psycopg.Connection[Any],
    task_id: int,
    *,
    paused: bool,
    status: str,
    next_run_at: datetime | None,
    now: datetime,
    last_error: str | None = None,
    paused_until: datetime | None = None,
) -> TaskRecord:
    params = {
        "id": task_id,
        "paused": paused,
        "paused_until": paused_until,
        "status": status,
        "next_run_at": next_run_at,
        "now": now,
        "last_error": last_error,
    }
    return record(query.run(conn, "task_set_paused", params))


def next_seq(conn: psycopg.Connection[Any], task_id: int) -> int:
    """Allocates the next occurrence_seq; the caller holds the task's row lock."""
    return int(query.run(conn, "task_next_seq", {"id": task_id}))


def next_seqs(conn: psycopg.Connection[Any], task_id: int, count: int) -> range:
    """Allocates `count` consecutive occurrence_seq values; the caller holds the task's lock."""
    last = int(query.run(conn, "task_next_seqs", {"id": task_id, "count": count}))
    return range(last - count + 1, last + 1)


def delete(conn: psycopg.Connection[Any], task_id: int, now: datetime) -> None:
    query.run(conn, "task_delete", {"id": task_id, "now": now})


def clock(conn: psycopg.Connection[Any], now: datetime | None = None) -> datetime:
    """The database clock (or the time a test pinned)."""
    return query.run(conn, "clock_now", {"now": now})


def claim_due(limit: int, now: datetime | None = None, *, known: Sequence[str]) -> Statement:
    """The statement, sent with its transaction's BEGIN, that locks up to `limit` due tasks,
    skipping those another dispatcher holds and those marked for a build whose revision is not
    in `known` (ADR 0029). Its rows are raw: the caller turns each into a TaskRecord on its own,
    so one row that cannot be read is parked instead of failing the batch."""
    return "task_claim_due", {"limit": limit, "now": now, "known": list(known)}


def record_outcome(conn: psycopg.Connection[Any], task_id: int, outcome: TaskOutcome) -> bool:
    """Shows an outcome on the locked task (`record_outcomes`); False when it changed nothing
    (a newer outcome is shown, and it decides no one-shot's status)."""
    return record_outcomes(conn, [(task_id, outcome)]) == 1


def record_outcomes(
    conn: psycopg.Connection[Any], outcomes: Sequence[tuple[int, TaskOutcome]]
) -> int:
    """Shows a batch of (task_id, outcome) of locked tasks in one statement
    (`task_record_outcome_many`, whose function holds the rule); returns the tasks changed."""
    if not outcomes:
        return 0
    ordered = sorted(outcomes, key=lambda pair: (pair[0], pair[1].occurrence_seq))
    rows = [outcome for _, outcome in ordered]
    return int(
        query.run(
            conn,
            "task_record_outcome_many",
            {
                "task_ids": [task_id for task_id, _ in ordered],
                "occurrence_ids": [o.occurrence_id for o in rows],
                "seqs": [o.occurrence_seq for o in rows],
                "scheduled_fors": [o.scheduled_for for o in rows],
                "statuses": [o.status for o in rows],
                "errors": [o.error for o in rows],
                "lifecycles": [o.lifecycle for o in rows],
                "decides": [o.decides for o in rows],
                "now": None,
            },
        )
        or 0
    )


def commit_next_due(
    conn: psycopg.Connection[Any],
    *,
    wake: bool,
    limit: int,
    known: Sequence[str],
    now: datetime | None = None,
) -> DueLeft:
    """Commits the open transaction in the round trip that reads what the dispatch left: when
    the earliest enabled task not yet due falls due, and up to `limit` tasks still due at `now`
    (the transaction's clock unless pinned): rows it could not lock. With `wake`, the idle
    daemons are woken for what it queued. Rows marked for a build not in `known`: not counted."""
    params = {"channel": instance_store.WAKEUP_CHANNEL, "wake": wake, "limit": limit, "now": now}
    params["known"] = list(known)
    return DueLeft.from_row(query.run_and_commit(conn, "task_next_due_wake", params))


def secrets_readable(conn: psycopg.Connection[Any]) -> bool:
    """Whether the connected role may select the task's secret columns: the reader may not,
    and reads them masked (ADR 0031)."""
    return bool(query.run(conn, "task_secrets_readable"))


def python_exists(conn: psycopg.Connection[Any]) -> bool:
    """Whether any live task runs python jobs (`task_python_exists`)."""
    return bool(query.run(conn, "task_python_exists", {})["found"])


def lock_row(conn: psycopg.Connection[Any], task_id: int) -> TaskRecord | None:
    """Locks a task by id, deleted or not (a job of a deleted task still records its outcome);
    None when no such row exists."""
    row = query.run(conn, "task_lock", {"id": task_id})
    return None if row is None else record(row, lenient=True)


def lock_many(conn: psycopg.Connection[Any], ids: Sequence[int]) -> dict[int, TaskRecord]:
    """Locks the tasks `ids` in id order, deleted or not; by id (a missing id has no row)."""
    rows = query.run(conn, "task_lock_many", {"ids": sorted(set(ids))})
    return {row["id"]: record(row, lenient=True) for row in rows}


def unfinished_one_shots(
    conn: psycopg.Connection[Any], *, after: int, limit: int, known: Sequence[str]
) -> list[TaskRef]:
    """A page of the one-shot tasks left `running`, none marked outside `known` (ADR 0029)."""
    params = {"after": after, "limit": limit, "known": list(known)}
    rows = query.run(conn, "task_unfinished_one_shots", params)
    return [TaskRef.from_row(row) for row in rows]


def pauses_ended(
    conn: psycopg.Connection[Any], *, after: int, limit: int, known: Sequence[str]
) -> list[TaskRef]:
    """A page of the paused tasks past their `--until` (database clock), none marked outside
    `known` (ADR 0029)."""
    params = {"after": after, "limit": limit, "known": list(known)}
    rows = query.run(conn, "task_pauses_ended", params)
    return [TaskRef.from_row(row) for row in rows]


def end_pause(
    conn: psycopg.Connection[Any],
    task_id: int,
    *,
    next_run_at: datetime | None,
    status: str,
    error: str | None,
) -> bool:
    """Ends the locked task's `--until` pause whose instant has passed, recorded as the action of
    `scheduler` (`task_end_pause`); False when there is none to end."""
    params = {"id": task_id, "next_run_at": next_run_at, "status": status, "error": error}
    return bool(query.run(conn, "task_end_pause", params))


def finish_lifecycle(
    conn: psycopg.Connection[Any], task_id: int, *, status: str, error: str | None = None
) -> bool:
    return (
        query.run(conn, "task_finish_lifecycle", {"id": task_id, "status": status, "error": error})
        == 1
    )


def park(conn: psycopg.Connection[Any], task_id: int, *, error: str, now: datetime) -> bool:
    """Takes a task the dispatcher cannot plan out of the due scan until an update fixes it."""
    return query.run(conn, "task_park", {"id": task_id, "error": error, "now": now}) == 1


def unpark(conn: psycopg.Connection[Any], task_id: int) -> bool:
    return query.run(conn, "task_unpark", {"id": task_id}) == 1


def set_next_run(
    conn: psycopg.Connection[Any], task_id: int, *, next_run_at: datetime | None, status: str
) -> None:
    query.run(
        conn, "task_set_next_run", {"id": task_id, "next_run_at": next_run_at, "status": status}
    )


def parked(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return query.run(conn, "task_list_parked")


def overdue_summary(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """How many dispatchable tasks are past their next firing by more than its misfire grace
    (`count`), and the oldest such next_run_at (None: none)."""
    return query.run(conn, "task_overdue_summary")


def pending_resumes(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """The live tasks paused `--until` an instant, soonest end first."""
    return query.run(conn, "task_list_pending_resumes")
