"""The per-task figures the metrics export, as the database recorded them: a typed row per label
value (a task's name, or OTHER_TASK for the tasks past the limit), and lost firings counted by a
bounded reason."""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler_daemon.domain.row import FromRow
from scheduler_daemon.domain.status import LostReason

# The label value the tasks past --metrics-task-limit share (a live task of this name would
# share it too: the docs say so).
OTHER_TASK = "_other"
# The consecutive failures gauge counts up to this and stays there (ADR 0026): a task failing for
# its whole history is read as this many failures, not walked to its first one on every sample.
FAILURES_CAP = 1000
_KNOWN = frozenset(LostReason)


@dataclass(frozen=True)
class TaskFigures(FromRow):
    """One label value's gauges; the times are epoch seconds of the database's timestamps, None
    where there is none (never succeeded, never fired, not set to fire; always for OTHER_TASK)."""

    task: str
    last_success: float | None
    last_schedule: float | None
    next_schedule: float | None
    running: int
    failures: int  # at most FAILURES_CAP


def lost_by_reason(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], int]:
    """(task, reason) → firings, from rows of `task`, `reason`, `firings`; a reason outside the
    vocabulary (a hand's write, a newer build's) is counted under `other`, so the label stays a
    bounded set."""
    counted: dict[tuple[str, str], int] = {}
    for row in rows:
        reason = row["reason"] if row["reason"] in _KNOWN else LostReason.OTHER
        key = (row["task"], str(reason))
        counted[key] = counted.get(key, 0) + int(row["firings"])
    return counted
