"""Schedules: the instants at which a task fires (cron in an IANA zone, fixed interval, one shot).

Pure code: time is passed in, nothing is read from a clock. Every schedule answers the same
questions (`next_after`, `prev_at_or_before`, `fire_times`, `fire_times_reversed`,
`count_between`) with aware UTC datetimes. The cron semantics across daylight-saving changes are
documented for operators in docs/explanation/schedules.md; the short version is in `CronSchedule`.
"""

import copy
import functools
import re
import zoneinfo
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from enum import StrEnum
from typing import Protocol

from croniter import CroniterBadDateError, croniter

from scheduler_daemon.domain.status import DstGapPolicy, DstOverlapPolicy

_SECOND = timedelta(seconds=1)
_MICROSECOND = timedelta(microseconds=1)
_DAY = timedelta(days=1)
# Largest backward jump of a zone's UTC offset assumed by default (tzdata since 1970: 3 h, Casey).
# Larger jumps (Kwajalein 1969, Vostok 1994) are detected by probing offsets and widen the walk.
_REACH = timedelta(hours=3)
# Offsets are probed hourly: in tzdata, changes of a zone's offset are always days apart.
_PROBE = timedelta(hours=1)
# Offsets range over UTC-12..UTC+14, so one wall time's instants lie within 26 h of each other.
_SWING = timedelta(hours=27)
_BATCH = timedelta(hours=6)
_FAST_SPAN = timedelta(days=2)
_FIELDS = (
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31, L"),
    ("month", "1-12, JAN-DEC"),
    ("day-of-week", "0-7, SUN-SAT"),
    ("second", "0-59"),
)
_ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_CRON_FIELD = re.compile(r"\S+", re.ASCII)
_HASHED = re.compile(r"[hr](\(\d+-\d+\))?(/\d+)?", re.IGNORECASE)


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


def load_zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA zone called `name`; ScheduleError for anything else (paths, `localtime`, '')."""
    if not isinstance(name, str) or name == "localtime" or name not in _zone_names():
        raise ScheduleError(f"unknown time zone {name!r}")
    try:
        return zoneinfo.ZoneInfo(name)
    except (ValueError, KeyError, OSError):
        raise ScheduleError(f"unknown time zone {name!r}") from None


def validate_cron(expr: str) -> None:
    """Raise ScheduleError unless `expr` is a 5-field cron (or 6 with seconds last) or an alias."""
    _prototype(expr)


@functools.cache
def _zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


@functools.lru_cache(maxsize=1024)
def _prototype(expr: str) -> croniter:
    text = expr.strip()
    fields = _CRON_FIELD.findall(text)
    if text.lower() == "@reboot":
        raise _cron_error(expr, "@reboot has no fire times; use a one-shot schedule")
    if text.startswith("@") and text.lower() not in _ALIASES:
        raise _cron_error(expr, f"unknown alias; use one of {', '.join(_ALIASES)}")
    if not text.startswith("@"):
        if len(fields) not in (5, 6):
            raise _cron_error(
                expr, f"expected 5 fields (minute hour day month weekday) or 6, got {len(fields)}"
            )
        for (name, _), value in zip(_FIELDS, fields, strict=False):
            if _HASHED.fullmatch(value):
                raise _cron_error(expr, f"{name} {value!r}: H and R are not supported")
    try:
        proto = croniter(text, datetime(2000, 1, 1))
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise _cron_error(expr, _cron_reason(fields, exc)) from None
    try:
        copy.copy(proto).get_next(datetime)
    except CroniterBadDateError:
        raise _cron_error(expr, "it never fires") from None
    return proto


def _cron_error(expr: str, reason: str) -> ScheduleError:
    return ScheduleError(f"invalid cron expression {expr!r}: {reason}")


def _cron_reason(fields: list[str], exc: Exception) -> str:
    for index, value in enumerate(fields):
        probe = ["*"] * len(fields)
        probe[index] = value
        try:
            croniter(" ".join(probe), datetime(2000, 1, 1))
        except (ValueError, TypeError, KeyError, IndexError):
            name, allowed = _FIELDS[index]
            return f"{name} {value!r} is not valid (allowed: {allowed})"
    message = re.sub(r"\[.*?\]\s*", "", str(exc)).strip()
    return message.splitlines()[0] if message else "not a cron expression"


@functools.lru_cache(maxsize=8192)
def _day_on_or_after(expr: str, day: date) -> date | None:
    try:
        start = datetime.combine(day, time()) - _SECOND
        return copy.copy(_prototype(expr)).get_next(datetime, start_time=start).date()
    except (CroniterBadDateError, OverflowError, ValueError):
        return None


@functools.lru_cache(maxsize=8192)
def _day_on_or_before(expr: str, day: date) -> date | None:
    try:
        start = datetime.combine(day + _DAY, time())
        return copy.copy(_prototype(expr)).get_prev(datetime, start_time=start).date()
    except (CroniterBadDateError, OverflowError, ValueError):
        return None


def _field_values(values: Sequence[int | str], low: int, high: int) -> tuple[int, ...]:
    if "*" in values:
        return tuple(range(low, high + 1))
    return tuple(sorted({int(v) for v in values}))


class _WallCron:
    """Enumerates the naive wall-clock times a cron expression names, in either direction.

    croniter finds the matching days (day-of-month, weekday, L, W, #); the times of day within a
    matching day are the product of the hour, minute and second fields.
    """

    def __init__(self, expr: str) -> None:
        expanded = _prototype(expr).expanded
        self.expr = expr
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
                match = _day_on_or_after(self.expr, day)
                if match is None:
                    return
                if match != day:
                    day, secs = match, 0
                midnight = datetime.combine(day, time())
                for tod in self._times_from(secs):
                    yield midnight + timedelta(seconds=tod)
                day, secs = day + _DAY, 0
        except OverflowError:
            return

    def backward(self, x: datetime, *, inclusive: bool) -> Iterator[datetime]:
        secs = x.hour * 3600 + x.minute * 60 + x.second
        if not inclusive and not x.microsecond:
            secs -= 1
        day: date | None = x.date()
        try:
            while day is not None:
                match = _day_on_or_before(self.expr, day)
                if match is None:
                    return
                if match != day:
                    day, secs = match, 86399
                midnight = datetime.combine(day, time())
                for tod in self._times_back(secs):
                    yield midnight + timedelta(seconds=tod)
                day, secs = day - _DAY, 86399
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


@dataclass(frozen=True)
class CronSchedule:
    """A cron expression read as wall-clock time in `timezone`.

    A wall time skipped by a spring-forward gap fires at the instant the gap ends
    (`dst_gap="shift"`) or not at all (`"skip"`); firings that land on one instant merge. A wall
    time repeated by a fall-back overlap fires at its first instant (`dst_overlap="first"`), its
    second (`"second"`) or both (`"both"`). Six fields put seconds last, as croniter reads them.
    """

    expr: str
    timezone: str = "UTC"
    dst_gap: str = DstGapPolicy.SHIFT
    dst_overlap: str = DstOverlapPolicy.FIRST
    _zone: tzinfo = field(init=False, repr=False, compare=False)
    _wall: _WallCron = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.dst_gap not in tuple(DstGapPolicy):
            raise ScheduleError(f"invalid dst_gap {self.dst_gap!r}: use {_either(DstGapPolicy)}")
        if self.dst_overlap not in tuple(DstOverlapPolicy):
            raise ScheduleError(
                f"invalid dst_overlap {self.dst_overlap!r}: use {_either(DstOverlapPolicy)}"
            )
        object.__setattr__(self, "_zone", load_zone(self.timezone))
        object.__setattr__(self, "_wall", _WallCron(self.expr))

    def next_after(self, t: datetime) -> datetime | None:
        return next(self._stream(_aware(t), forward=True), None)

    def prev_at_or_before(self, t: datetime) -> datetime | None:
        return next(self._stream(_aware(t), forward=False), None)

    def fire_times(
        self, after: datetime, until: datetime | None = None, limit: int | None = None
    ) -> Iterator[datetime]:
        return _bounded(self._stream(_aware(after), forward=True), until, limit, forward=True)

    def fire_times_reversed(
        self, at_or_before: datetime, since: datetime | None = None, limit: int | None = None
    ) -> Iterator[datetime]:
        return _bounded(
            self._stream(_aware(at_or_before), forward=False), since, limit, forward=False
        )

    def count_between(self, start: datetime, end: datetime, cap: int) -> tuple[int, bool]:
        """Count by enumeration: exact up to `cap`, else `(cap, False)`."""
        count = 0
        for _ in self.fire_times(_aware(start) - _MICROSECOND, until=_aware(end)):
            if count == cap:
                return cap, False
            count += 1
        return count, True

    # Wall time <-> instants.

    def _wall_of(self, t: datetime) -> datetime:
        return t.astimezone(self._zone).replace(tzinfo=None)

    def _offset(self, t: datetime) -> timedelta:
        return t.astimezone(self._zone).utcoffset() or timedelta(0)

    def _instants(self, wall: datetime, gap_end: list[datetime]) -> tuple[datetime, ...]:
        """The instants wall time `wall` fires at under the DST policies, in order."""
        first = wall.replace(tzinfo=self._zone).astimezone(UTC)
        second = wall.replace(tzinfo=self._zone, fold=1).astimezone(UTC)
        if first == second:
            return (first,)
        if first < second:  # repeated by a fall-back overlap
            return {
                DstOverlapPolicy.FIRST: (first,),
                DstOverlapPolicy.SECOND: (second,),
                DstOverlapPolicy.BOTH: (first, second),
            }[DstOverlapPolicy(self.dst_overlap)]
        if self.dst_gap == DstGapPolicy.SKIP:  # skipped by a spring-forward gap
            return ()
        if not (gap_end and second < gap_end[0] <= first):
            gap_end[:] = [self._gap_end(wall, second, first)]
        return (gap_end[0],)

    def _gap_end(self, wall: datetime, before: datetime, after: datetime) -> datetime:
        """The first instant whose wall time is past `wall`: the transition that skipped it."""
        low, high = int(before.timestamp()), int(after.timestamp())
        while high - low > 1:
            middle = (low + high) // 2
            if self._wall_of(datetime.fromtimestamp(middle, UTC)) > wall:
                high = middle
            else:
                low = middle
        return datetime.fromtimestamp(high, UTC)

    def _spread(self, low: datetime, high: datetime) -> timedelta:
        """How far the zone's offset varies over [low, high], probed every `_PROBE`."""
        low, high = _clamp(low), _clamp(high)
        offsets = {self._offset(high)}
        while low < high:
            offsets.add(self._offset(low))
            low += _PROBE
        return max(offsets) - min(offsets)

    def _steady(self, low: datetime, high: datetime, offset: timedelta) -> bool:
        """Whether the probes strictly inside (low, high) all show `offset`."""
        probe = low + _PROBE
        while probe < high:
            if self._offset(probe) != offset:
                return False
            probe += _PROBE
        return True

    def _plain(self, wall: datetime, offset: timedelta) -> datetime | None:
        """`wall` as an instant if it is unambiguous and has `offset`, else None."""
        local = wall.replace(tzinfo=self._zone)
        if local.utcoffset() != offset or local.replace(fold=1).utcoffset() != offset:
            return None
        return (wall - offset).replace(tzinfo=UTC)

    # Streams of fire times. The fast step handles the usual case: the next wall time is
    # unambiguous and no offset change lies between it and `t`. Otherwise a batch walks every
    # wall time near `t` and sorts their instants.

    def _stream(self, t: datetime, *, forward: bool) -> Iterator[datetime]:
        """Fire times after `t` in order (forward), or at or before `t` newest first."""
        walls: Iterator[datetime] | None = None
        offset = timedelta(0)
        while True:
            if walls is None:
                local = self._wall_of(t)
                walls = (
                    self._wall.forward(local, inclusive=False)
                    if forward
                    else self._wall.backward(local, inclusive=True)
                )
                offset = self._offset(t)
            wall = next(walls, None)
            instant = None if wall is None else self._plain(wall, offset)
            if (
                instant is not None
                and abs(instant - t) <= _FAST_SPAN
                and self._steady(min(t, instant), max(t, instant), offset)
            ):
                yield instant
                t = instant if forward else instant - _MICROSECOND
                if not forward and self._offset(t) != offset:
                    walls = None
                continue
            batch = self._batch(t, forward=forward)
            if not batch:
                return
            yield from batch
            t, walls = (batch[-1] if forward else batch[-1] - _MICROSECOND), None

    def _batch(self, t: datetime, *, forward: bool) -> list[datetime]:
        """Every fire time after `t` (or at or before it) up to some point, in stream order.

        Two wall times more than `reach` apart map to instants in the same order, where `reach`
        bounds the zone's backward offset jumps nearby. So the walk starts `reach` behind the wall
        time of `t`, and an instant is final once the walk is `reach` past its wall time.
        """
        sign = 1 if forward else -1
        walk = self._wall.forward if forward else self._wall.backward
        reach = _REACH
        while True:
            found: list[tuple[datetime, tuple[datetime, ...]]] = []
            end: datetime | None = None
            gap_end: list[datetime] = []
            for wall in walk(_clamp(self._wall_of(t) - sign * reach), inclusive=True):
                if found and sign * (wall - found[0][0]) > reach + _BATCH:
                    end = wall
                    break
                instants = self._instants(wall, gap_end)
                ahead = tuple(i for i in instants if (i > t if forward else i <= t))
                if ahead:
                    found.append((wall, ahead))
            every = {i for _, instants in found for i in instants}
            if not every:
                return []
            needed = self._reach_for(t, min(every), max(every))
            if needed > reach:
                reach = needed
                continue
            if end is not None:
                settled = [i for w, instants in found if sign * (end - w) > reach for i in instants]
                bound = max(settled) if forward else min(settled)
                every = {i for i in every if sign * (bound - i) >= timedelta(0)}
            return sorted(every, reverse=not forward)

    def _reach_for(self, t: datetime, low: datetime, high: datetime) -> timedelta:
        """A `reach` that covers every offset jump near `t` and near the instants found."""
        near_t = self._spread(t - _SWING, t + _SWING)
        near_found = self._spread(low - _SWING, high + _SWING)
        return max(_REACH, near_t, near_found)


class _Stepping:
    """fire_times for schedules whose next_after and prev_at_or_before are cheap."""

    def next_after(self, t: datetime) -> datetime | None:
        raise NotImplementedError

    def prev_at_or_before(self, t: datetime) -> datetime | None:
        raise NotImplementedError

    def fire_times(
        self, after: datetime, until: datetime | None = None, limit: int | None = None
    ) -> Iterator[datetime]:
        return _bounded(
            _walk(self.next_after, _aware(after), timedelta(0)), until, limit, forward=True
        )

    def fire_times_reversed(
        self, at_or_before: datetime, since: datetime | None = None, limit: int | None = None
    ) -> Iterator[datetime]:
        start = _aware(at_or_before)
        return _bounded(
            _walk(self.prev_at_or_before, start, -_MICROSECOND), since, limit, forward=False
        )


@dataclass(frozen=True)
class IntervalSchedule(_Stepping):
    """Fixed rate: fires at `anchor + k * every` for k >= 0, in plain UTC arithmetic."""

    every: timedelta
    anchor: datetime

    def __post_init__(self) -> None:
        if self.every <= timedelta(0):
            raise ScheduleError(f"interval must be positive, got {self.every}")
        if self.anchor.tzinfo is None or self.anchor.utcoffset() is None:
            raise ScheduleError("interval anchor must be timezone-aware")
        object.__setattr__(self, "anchor", self.anchor.astimezone(UTC))

    def next_after(self, t: datetime) -> datetime | None:
        t = _aware(t)
        if t < self.anchor:
            return self.anchor
        return self._at((t - self.anchor) // self.every + 1)

    def prev_at_or_before(self, t: datetime) -> datetime | None:
        t = _aware(t)
        if t < self.anchor:
            return None
        return self._at((t - self.anchor) // self.every)

    def count_between(self, start: datetime, end: datetime, cap: int) -> tuple[int, bool]:
        """Count arithmetically; always exact, whatever `cap`."""
        start, end = _aware(start), _aware(end)
        if end < self.anchor or end < start:
            return 0, True
        first = max(0, -((self.anchor - start) // self.every))
        last = (end - self.anchor) // self.every
        return max(0, last - first + 1), True

    def _at(self, k: int) -> datetime | None:
        try:
            return self.anchor + k * self.every
        except OverflowError:
            return None


@dataclass(frozen=True)
class OneShotSchedule(_Stepping):
    """Fires once, at `at`."""

    at: datetime

    def __post_init__(self) -> None:
        if self.at.tzinfo is None or self.at.utcoffset() is None:
            raise ScheduleError("one-shot time must be timezone-aware")
        object.__setattr__(self, "at", self.at.astimezone(UTC))

    def next_after(self, t: datetime) -> datetime | None:
        return self.at if self.at > _aware(t) else None

    def prev_at_or_before(self, t: datetime) -> datetime | None:
        return self.at if self.at <= _aware(t) else None

    def count_between(self, start: datetime, end: datetime, cap: int) -> tuple[int, bool]:
        return (1 if _aware(start) <= self.at <= _aware(end) else 0), True


def make_schedule(
    *,
    cron: str | None,
    every: timedelta | None,
    at: datetime | None,
    timezone: str,
    dst_gap: str,
    dst_overlap: str,
    anchor: datetime | None,
) -> CronSchedule | IntervalSchedule | OneShotSchedule:
    """The schedule a definition describes: the first of `cron`, `every`, `at` that is set."""
    if cron is not None:
        return CronSchedule(cron, timezone, dst_gap, dst_overlap)
    if every is not None:
        if anchor is None:
            raise ScheduleError("an interval schedule needs its anchor (the creation time)")
        return IntervalSchedule(every, anchor)
    if at is None:
        raise ScheduleError("no schedule: give one of cron, every or at")
    return OneShotSchedule(at)


def _either(choices: type[StrEnum]) -> str:
    """`'a', 'b' or 'c'`, for messages."""
    quoted = [f"'{c}'" for c in choices]
    return f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def _aware(t: datetime) -> datetime:
    if t.tzinfo is None or t.utcoffset() is None:
        raise ValueError(f"expected a timezone-aware datetime, got naive {t.isoformat()}")
    return t.astimezone(UTC)


def _clamp(t: datetime) -> datetime:
    """Keep probes and walks two days inside the range datetime can represent."""
    naive = t.replace(tzinfo=None)
    low, high = datetime.min + 2 * _DAY, datetime.max - 2 * _DAY
    return min(max(naive, low), high).replace(tzinfo=t.tzinfo)


def _walk(
    step: Callable[[datetime], datetime | None], t: datetime, nudge: timedelta
) -> Iterator[datetime]:
    while (t_next := step(t)) is not None:
        yield t_next
        t = t_next + nudge


def _bounded(
    instants: Iterator[datetime], bound: datetime | None, limit: int | None, *, forward: bool
) -> Iterator[datetime]:
    bound = None if bound is None else _aware(bound)
    for count, instant in enumerate(instants):
        if limit is not None and count >= limit:
            return
        if bound is not None and (instant > bound if forward else instant < bound):
            return
        yield instant
