"""The wall-clock walk: the naive wall times a cron expression names, in either direction, with
no time zone in sight (zone.py maps them to instants)."""

import copy
import functools
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from datetime import date, datetime, time, timedelta

from croniter import CroniterBadDateError

from scheduler_daemon.domain.schedule.base import DAY
from scheduler_daemon.domain.schedule.cron_syntax import day_parts, parsed, prototype

_SECOND = timedelta(seconds=1)


def _day_on_or_after(parts: tuple[str, ...], day: date) -> date | None:
    """The first day on or after `day` that any of `parts` (cron_syntax.day_parts) names."""
    found = [d for p in parts if (d := _part_on_or_after(p, day)) is not None]
    return min(found, default=None)


def _day_on_or_before(parts: tuple[str, ...], day: date) -> date | None:
    """The last day on or before `day` that any of `parts` names."""
    found = [d for p in parts if (d := _part_on_or_before(p, day)) is not None]
    return max(found, default=None)


@functools.lru_cache(maxsize=8192)
def _part_on_or_after(text: str, day: date) -> date | None:
    try:
        start = datetime.combine(day, time()) - _SECOND
        return copy.copy(parsed(text)).get_next(datetime, start_time=start).date()
    except (CroniterBadDateError, OverflowError, ValueError):
        return None


@functools.lru_cache(maxsize=8192)
def _part_on_or_before(text: str, day: date) -> date | None:
    try:
        start = datetime.combine(day + DAY, time())
        return copy.copy(parsed(text)).get_prev(datetime, start_time=start).date()
    except (CroniterBadDateError, OverflowError, ValueError):
        return None


def _field_values(values: Sequence[int | str], low: int, high: int) -> tuple[int, ...]:
    if "*" in values:
        return tuple(range(low, high + 1))
    return tuple(sorted({int(v) for v in values}))


class WallCron:
    """Enumerates the naive wall-clock times a cron expression names, in either direction.

    croniter finds the matching days (day-of-month, weekday, L, W, #) of each of the expression's
    `day_parts` (either day field matching; `either` False: croniter's reading of `#`, `L5` and
    `W` beside a restricted other day field, as builds before revision 0026 fired); the times
    of day within a matching day are the product of the hour, minute and second fields.
    """

    def __init__(self, expr: str, *, either: bool = True) -> None:
        expanded = prototype(expr).expanded
        self.expr = expr
        self.parts = day_parts(expr.strip(), either=either)
        self.minutes = _field_values(expanded[0], 0, 59)
        self.hours = _field_values(expanded[1], 0, 23)
        self.seconds = _field_values(expanded[5], 0, 59) if len(expanded) > 5 else (0,)

    def forward(self, x: datetime, *, inclusive: bool) -> Iterator[datetime]:
        secs = x.hour * 3600 + x.minute * 60 + x.second
        if x.microsecond or not inclusive:
            secs += 1
        day: date | None = x.date()
        try:
            while day is not None:
                match = _day_on_or_after(self.parts, day)
                if match is None:
                    return
                if match != day:
                    day, secs = match, 0
                midnight = datetime.combine(day, time())
                for tod in self._times_from(secs):
                    yield midnight + timedelta(seconds=tod)
                day, secs = day + DAY, 0
        except OverflowError:
            return

    def backward(self, x: datetime, *, inclusive: bool) -> Iterator[datetime]:
        secs = x.hour * 3600 + x.minute * 60 + x.second
        if not inclusive and not x.microsecond:
            secs -= 1
        day: date | None = x.date()
        try:
            while day is not None:
                match = _day_on_or_before(self.parts, day)
                if match is None:
                    return
                if match != day:
                    day, secs = match, 86399
                midnight = datetime.combine(day, time())
                for tod in self._times_back(secs):
                    yield midnight + timedelta(seconds=tod)
                day, secs = day - DAY, 86399
        except OverflowError:
            return

    def _times_from(self, secs: int) -> Iterator[int]:
        h0, rest = divmod(secs, 3600)
        m0, s0 = divmod(rest, 60)
        for h in self.hours[bisect_left(self.hours, h0) :]:
            minutes = self.minutes if h > h0 else self.minutes[bisect_left(self.minutes, m0) :]
            for m in minutes:
                later = h > h0 or m > m0
                for s in self.seconds if later else self.seconds[bisect_left(self.seconds, s0) :]:
                    yield h * 3600 + m * 60 + s

    def _times_back(self, secs: int) -> Iterator[int]:
        h0, rest = divmod(secs, 3600)
        m0, s0 = divmod(rest, 60)
        for h in reversed(self.hours[: bisect_right(self.hours, h0)]):
            minutes = self.minutes if h < h0 else self.minutes[: bisect_right(self.minutes, m0)]
            for m in reversed(minutes):
                earlier = h < h0 or m < m0
                seconds = (
                    self.seconds if earlier else self.seconds[: bisect_right(self.seconds, s0)]
                )
                for s in reversed(seconds):
                    yield h * 3600 + m * 60 + s
