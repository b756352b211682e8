"""The audit's firing check (part of the Auditor): the fire times a task's definition history
owes that no recorded row covers (`firing_missing`), told apart from the fire times at or after
the task's `next_run_at`, which no dispatcher has reached yet: a fleet that is stopped owes them,
it has not lost them (the `owed` notice, which leaves the exit code alone). The dispatcher
advances `next_run_at` in the transaction that records the firings it passes (or their summary
row), so a firing before it without a row is missing, whatever the fleet's state.
"""

from collections import defaultdict
from datetime import datetime
from itertools import groupby

from scheduler_daemon.domain.audit import (
    AuditWindow,
    Findings,
    Incomplete,
    Notice,
    Violation,
)
from scheduler_daemon.domain.coverage import (
    Coverage,
    CoverageResult,
    MissingFiring,
    gaps,
    missing_firings,
    owed_since,
    owed_windows,
    split_windows,
)
from scheduler_daemon.storage import audit_store


def firing_findings(conn: audit_store.Conn, window: AuditWindow, *, limit: int) -> Findings:
    """One snapshot's missing firings (condensed into gaps once confirmed), what could not be
    checked, and one `owed` notice per task with firings pending at or after its next_run_at."""
    found: dict[tuple[object, ...], MissingFiring] = {}
    incomplete: list[Incomplete] = []
    notices: list[Notice] = []
    events = audit_store.task_events(conn)
    pruned = audit_store.pruned(conn)  # per task: older history may be gone
    next_runs = audit_store.next_runs(conn)
    for task_id, history in groupby(events, key=lambda e: e.task_id):
        since = owed_since(window.since, pruned.get(task_id))
        windows = owed_windows(list(history), since=since, cutoff=window.cutoff)
        if not windows:
            continue
        exact, ranges = audit_store.scheduled_occurrences(
            conn, task_id, windows[0].after, windows[-1].until
        )
        coverage = Coverage(exact, ranges)
        next_run_at = next_runs.get(task_id)
        before, pending = split_windows(windows, next_run_at)
        result = missing_firings(before, coverage, limit=limit)
        found.update({(task_id, m.at): m for m in result.missing})
        incomplete += _incomplete(task_id, result)
        owed = missing_firings(pending, coverage, limit=limit)
        if owed.missing and next_run_at is not None:
            notices.append(_owed_notice(task_id, next_run_at, owed))
    violations = [Violation("firing_missing", "", {}, identity=key) for key in found]

    def condense(kept: list[Violation]) -> list[Violation]:
        by_task: dict[int, list[MissingFiring]] = defaultdict(list)
        for v in kept:
            by_task[found[v.identity].event.task_id].append(found[v.identity])
        return [
            Violation(
                "firing_missing",
                f"task {task_id}: "
                + (
                    f"firing {gap.first.isoformat()} has no occurrence"
                    if gap.count == 1
                    else f"{gap.count} consecutive firings from {gap.first.isoformat()} to "
                    f"{gap.last.isoformat()} have no occurrence"
                ),
                {
                    "task_id": task_id,
                    "task_event_id": gap.event.id,
                    "first_missing": gap.first,
                    "last_missing": gap.last,
                    "missing_count": gap.count,
                },
            )
            for task_id in sorted(by_task)
            for gap in gaps(by_task[task_id])
        ]

    return Findings(violations, incomplete, condense, notices)


def _incomplete(task_id: int, result: CoverageResult) -> list[Incomplete]:
    notes = [
        Incomplete(
            "firing_missing",
            f"task {task_id}: definition {u.event.id} from {u.event.at.isoformat()} "
            f"has no computable fire times ({u.error}); not checked",
        )
        for u in result.unplannable
    ]
    if result.checked_from is not None:
        notes.append(
            Incomplete(
                "firing_missing",
                f"task {task_id}: checked the newest {result.examined} firings, back to "
                f"{result.checked_from.isoformat()}; pass a later --since for the rest",
            )
        )
    return notes


def _owed_notice(task_id: int, next_run_at: datetime, owed: CoverageResult) -> Notice:
    """The firings of one task the dispatcher has not reached (newest first in `owed`)."""
    first, last = owed.missing[-1].at, owed.missing[0].at
    count = len(owed.missing)
    counted = f"{count}" if owed.checked_from is None else f"at least {count}"
    return Notice(
        "owed",
        f"task {task_id}: {counted} firing(s) from {first.isoformat()} to {last.isoformat()} "
        "are owed, not dispatched yet (at or after its next_run_at): is any daemon running? "
        "(`scheduler-daemon status`)",
        {
            "task_id": task_id,
            "next_run_at": next_run_at,
            "first_owed": first,
            "last_owed": last,
            "owed_count": count,
        },
    )
