"""Fixed schedules, in plain UTC arithmetic with no zone: a fixed interval from an anchor, and
a one-shot instant."""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from scheduler_daemon.domain.schedule.base import MICROSECOND, ScheduleError, aware, bounded


class _Stepping:
    """fire_times for schedules whose next_after and prev_at_or_before are cheap."""

    def next_after(self, t: datetime) -> datetime | None:
        raise NotImplementedError

    def prev_at_or_before(self, t: datetime) -> datetime | None:
        raise NotImplementedError

    def fire_times(
        self, after: datetime, until: datetime | None = None, limit: int | None = None
    ) -> Iterator[datetime]:
        return bounded(
            _walk(self.next_after, aware(after), timedelta(0)), until, limit, forward=True
        )

    def fire_times_reversed(
        self, at_or_before: datetime, since: datetime | None = None, limit: int | None = None
    ) -> Iterator[datetime]:
        start = aware(at_or_before)
        return bounded(
            _walk(self.prev_at_or_before, start, -MICROSECOND), since, limit, forward=False
        )


@dataclass(frozen=True)
class IntervalSchedule(_Stepping):
    """Fixed rate: fires at `anchor + k * every` for k >= 1, in plain UTC arithmetic. The anchor
    (the creation, or the update that set `every`) is not a firing: the dispatcher's first one is
    one interval later, and backfill, `audit` and `tasks next` walk this same sequence."""

    every: timedelta
    anchor: datetime

    def __post_init__(self) -> None:
        if self.every <= timedelta(0):
            raise ScheduleError(f"interval must be positive, got {self.every}")
        if self.anchor.tzinfo is None or self.anchor.utcoffset() is None:
            raise ScheduleError("interval anchor must be timezone-aware")
        object.__setattr__(self, "anchor", self.anchor.astimezone(UTC))

    def next_after(self, t: datetime) -> datetime | None:
        t = aware(t)
        if t < self.anchor:
            return self._at(1)
        return self._at((t - self.anchor) // self.every + 1)

    def prev_at_or_before(self, t: datetime) -> datetime | None:
        t = aware(t)
        if t < self.anchor:
            return None
        k = (t - self.anchor) // self.every
        return self._at(k) if k >= 1 else None

    def count_between(self, start: datetime, end: datetime, cap: int) -> tuple[int, bool]:
        """Count arithmetically; always exact, whatever `cap`."""
        start, end = aware(start), aware(end)
        if end < self.anchor or end < start:
            return 0, True
        first = max(1, -((self.anchor - start) // self.every))
        last = (end - self.anchor) // self.every
        return max(0, last - first + 1), True

    def _at(self, k: int) -> datetime | None:
        try:
            return self.anchor + k * self.every
        except OverflowError:
            return None


@dataclass(frozen=True)
class OneShotSchedule(_Stepping):
    """Fires once, at `at`; never when `skipped` (a local wall time a DST gap swallowed, under
    `--dst-gap skip`: zone.read_wall), as a cron's wall time there does not fire."""

    at: datetime
    skipped: bool = False

    def __post_init__(self) -> None:
        if self.at.tzinfo is None or self.at.utcoffset() is None:
            raise ScheduleError("one-shot time must be timezone-aware")
        object.__setattr__(self, "at", self.at.astimezone(UTC))

    def next_after(self, t: datetime) -> datetime | None:
        return self.at if self.at > aware(t) and not self.skipped else None

    def prev_at_or_before(self, t: datetime) -> datetime | None:
        return self.at if self.at <= aware(t) and not self.skipped else None

    def count_between(self, start: datetime, end: datetime, cap: int) -> tuple[int, bool]:
        return (1 if aware(start) <= self.at <= aware(end) and not self.skipped else 0), True


def _walk(
    step: Callable[[datetime], datetime | None], t: datetime, nudge: timedelta
) -> Iterator[datetime]:
    while (t_next := step(t)) is not None:
        yield t_next
        t = t_next + nudge
