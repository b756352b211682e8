"""Backfill planning: which firings of a range to queue again, from their recorded rows (pure).

A firing's *latest outcome* is the status of the newest occurrence (highest sequence) recorded
for it: a scheduled one, a summary of skipped firings that covers it, or a backfill one. A firing
with no row (before the task existed, or pruned by the history retention) is `missing`. Manual
occurrences are not firings of the schedule and are not looked at.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from scheduler_daemon.domain.schedule.base import ScheduleError
from scheduler_daemon.domain.schedule.zone import load_zone
from scheduler_daemon.domain.status import FINISHED, OccurrenceStatus, Trigger
from scheduler_daemon.domain.task import InvalidTask

MISSING = "missing"
# What --include accepts: every final status, and `missing`.
CHOICES = (*(s.value for s in FINISHED), MISSING)
# The default: everything but success.
DEFAULT_INCLUDE = tuple(c for c in CHOICES if c != OccurrenceStatus.SUCCESS)
DEFAULT_MAX = 10_000
BATCH = 500  # firings per transaction


class InvalidBackfill(InvalidTask):
    """A backfill request that cannot be carried out; the message is one line."""


def range_instant(option: str, text: str, zone: str) -> datetime:
    """A backfill range's end (`--from`/`--to`, or the console's form fields): an ISO 8601
    instant, or a local time read in the task's `zone`; anything else one line naming `option`."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidBackfill(
            f"{option} '{text}' is not an ISO 8601 instant such as 2030-01-01T09:00"
        ) from exc
    try:
        return value if value.tzinfo else value.replace(tzinfo=load_zone(zone))
    except ScheduleError as exc:
        raise InvalidBackfill(str(exc)) from exc


@dataclass(frozen=True)
class Recorded:
    """One occurrence row that covers firings: exact (`last` None) or a skipped summary
    covering every firing in [scheduled_for, last]."""

    scheduled_for: datetime
    last: datetime | None
    seq: int
    status: str
    trigger: str


@dataclass(frozen=True)
class Firing:
    """A firing of the range, its latest outcome, and whether it has a backfill occurrence
    already (one per firing: the database refuses a second)."""

    scheduled_for: datetime
    outcome: str
    backfilled: bool

    def wanted(self, include: Iterable[str]) -> bool:
        return not self.backfilled and self.outcome in tuple(include)


def parse_include(text: str | None) -> tuple[str, ...]:
    """`failed,timeout` → the statuses; None → the default (all but success)."""
    if text is None:
        return DEFAULT_INCLUDE
    chosen = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    unknown = [c for c in chosen if c not in CHOICES]
    if unknown or not chosen:
        raise InvalidBackfill(
            f"--include {text!r}: choose from {', '.join(CHOICES)} (comma-separated)"
        )
    return chosen


def classify(firings: Sequence[datetime], rows: Iterable[Recorded]) -> list[Firing]:
    """Each firing with its latest outcome among `rows`, in firing order."""
    latest: dict[datetime, tuple[int, str]] = {}
    backfilled: set[datetime] = set()
    ranges: list[Recorded] = []
    for row in rows:
        if row.last is not None:
            ranges.append(row)
            continue
        if row.trigger == Trigger.BACKFILL:
            backfilled.add(row.scheduled_for)
        if row.scheduled_for not in latest or latest[row.scheduled_for][0] < row.seq:
            latest[row.scheduled_for] = (row.seq, row.status)
    result = []
    for at in firings:
        best = latest.get(at)
        for summary in ranges:
            assert summary.last is not None
            if summary.scheduled_for <= at <= summary.last and (
                best is None or best[0] < summary.seq
            ):
                best = (summary.seq, summary.status)
        result.append(Firing(at, MISSING if best is None else best[1], at in backfilled))
    return result
