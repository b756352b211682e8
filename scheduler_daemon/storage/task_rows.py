"""A task row read back into the TaskRecord it describes: its jsonb decoded within the bounds of
domain.claim (a value too deep or not JSON is one line, InvalidTask, so a row parks its task
instead of failing a pass), or read leniently for the locks that need only the task's policy."""

from typing import Any

from scheduler_daemon.domain.claim import PAYLOAD_MAX_DEPTH
from scheduler_daemon.domain.json_text import UndecodableJson, loads_bounded
from scheduler_daemon.domain.task import PAYLOAD_KEY, InvalidTask, TaskRecord, TaskSpec


def _decoded(value: Any, column: str) -> Any:
    """A jsonb column as the daemon's reads give it (text, `task_read`) decoded within
    PAYLOAD_MAX_DEPTH; any other read's (decoded by psycopg) as it is. InvalidTask, one line,
    for a text too deep or not JSON."""
    if not isinstance(value, str):
        return value
    try:
        return loads_bounded(value, PAYLOAD_MAX_DEPTH)
    except UndecodableJson as exc:
        raise InvalidTask(f"{column} unreadable: {exc}") from None


def _what_runs(row: dict[str, Any]) -> dict[str, Any]:
    """The fields of a task's spec read from its jsonb: its target and headers, its notify
    headers. An exception for a value no writer of this build produces (written by SQL)."""
    payload = _decoded(row["payload"], "payload")
    notify_headers = _decoded(row.get("notify_headers"), "notify_headers")
    notify_header_refs = _decoded(row.get("notify_header_refs"), "notify_header_refs")
    return {
        "target": payload[PAYLOAD_KEY[row["executor"]]],
        "headers": tuple(payload.get("headers", {}).items()),
        "header_refs": tuple(payload.get("header_refs", {}).items()),
        "notify_headers": tuple((notify_headers or {}).items()),
        "notify_header_refs": tuple((notify_header_refs or {}).items()),
    }


def _what_runs_leniently(row: dict[str, Any]) -> dict[str, Any]:
    """`_what_runs`, or nothing to run (no target, no headers) when the row says nothing this
    build can read."""
    try:
        return _what_runs(row)
    except Exception:  # any value written behind the checks: the caller needs the policy only
        return {
            "target": "",
            "headers": (),
            "header_refs": (),
            "notify_headers": (),
            "notify_header_refs": (),
        }


def record(row: dict[str, Any], *, lenient: bool = False) -> TaskRecord:
    """The TaskRecord a task row describes. An exception (one line) when its payload or notify
    headers cannot be read; with `lenient`, a record that runs nothing instead: the locks of the
    completer and the reconciler read a task for its policy (attempts, backoff, schedule), and
    a payload written behind the checks must not stop a run's outcome or takeover."""
    what = _what_runs_leniently(row) if lenient else _what_runs(row)
    spec = TaskSpec(
        name=row["name"],
        executor=row["executor"],
        cron=row["cron_expr"],
        every=row["every"],
        at=row["run_at"],
        timezone=row["timezone"],
        dst_gap=row["dst_gap"],
        dst_overlap=row["dst_overlap"],
        concurrency_key=row["concurrency_key"],
        overlap=row["overlap"],
        misfire=row["misfire"],
        misfire_grace=row["misfire_grace"],
        catchup_limit=row["catchup_limit"],
        catchup_window=row["catchup_window"],
        start_deadline=row["start_deadline"],
        timeout=row["run_timeout"],
        max_attempts=row["max_attempts"],
        backoff=row["backoff"],
        backoff_max=row.get("backoff_max"),  # absent in an older build's row read: fixed
        spread=row.get("spread"),
        paused=row["paused"],
        anchor=row["anchor_at"],
        history_retention=row.get("history_retention"),
        in_process=bool(row.get("in_process")),  # NULL (an older build's): not in-process
        notify_url=row.get("notify_url"),
        notify_on=None if row.get("notify_on") is None else tuple(row["notify_on"]),
        deadline=row.get("deadline"),
        # Read by the statements that show a task (`task_shown`); the daemon's reads leave it.
        exclude_calendars=tuple(row.get("exclude_calendars") or ()),
        **what,
    )
    return TaskRecord(
        id=row["id"],
        spec=spec,
        status=row["status"],
        next_run_at=row["next_run_at"],
        occurrence_seq=row["occurrence_seq"],
        last_outcome_seq=row["last_outcome_seq"],
        last_status=row["last_status"],
        last_scheduled_for=row["last_scheduled_for"],
        last_finished_at=row["last_finished_at"],
        last_error=row["last_error"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        deleted_at=row["deleted_at"],
        parked_at=row.get("parked_at"),
        park_error=row.get("park_error"),
        source=row.get("source"),
        paused_until=row.get("paused_until"),
        needs_build=row.get("needs_build"),
    )
