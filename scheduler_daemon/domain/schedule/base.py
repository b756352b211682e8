"""What every schedule answers (`Schedule`), its error, and the instant helpers the schedule
modules share: refusing naive datetimes, bounding a stream of fire times, clamping a walk."""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Protocol

MICROSECOND = timedelta(microseconds=1)
DAY = timedelta(days=1)


class ScheduleError(ValueError):
    """A schedule definition that cannot be used; the message is one line, shown as is."""


class Schedule(Protocol):
    """What every schedule answers; all instants are aware UTC datetimes."""

    def next_after(self, t: datetime) -> datetime | None: ...

    def prev_at_or_before(self, t: datetime) -> datetime | None: ...

    def fire_times(
        self, after: datetime, until: datetime | None = None, limit: int | None = None
    ) -> Iterator[datetime]: ...

    def fire_times_reversed(
        self, at_or_before: datetime, since: datetime | None = None, limit: int | None = None
    ) -> Iterator[datetime]: ...

    def count_between(self, start: datetime, end: datetime, cap: int) -> tuple[int, bool]: ...


def aware(t: datetime) -> datetime:
    """`t` in UTC; ValueError for a naive datetime (a caller's bug, not bad input)."""
    if t.tzinfo is None or t.utcoffset() is None:
        raise ValueError(f"expected a timezone-aware datetime, got naive {t.isoformat()}")
    return t.astimezone(UTC)


def clamp(t: datetime) -> datetime:
    """Keep probes and walks two days inside the range datetime can represent."""
    naive = t.replace(tzinfo=None)
    low, high = datetime.min + 2 * DAY, datetime.max - 2 * DAY
    return min(max(naive, low), high).replace(tzinfo=t.tzinfo)


def bounded(
    instants: Iterator[datetime], bound: datetime | None, limit: int | None, *, forward: bool
) -> Iterator[datetime]:
    """`instants` up to `bound` (inclusive; `until` forward, `since` backward) and `limit`."""
    bound = None if bound is None else aware(bound)
    for count, instant in enumerate(instants):
        if limit is not None and count >= limit:
            return
        if bound is not None and (instant > bound if forward else instant < bound):
            return
        yield instant
