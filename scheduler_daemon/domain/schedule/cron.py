"""`CronSchedule`: a cron expression read as wall-clock time in an IANA zone, its fire times
found by walking wall times (wall.py) and mapping them to instants (zone.py). The semantics
across daylight-saving changes are documented for operators in docs/explanation/schedules.md."""

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from scheduler_daemon.domain.schedule.base import (
    MICROSECOND,
    ScheduleError,
    aware,
    bounded,
    clamp,
)
from scheduler_daemon.domain.schedule.wall import WallCron
from scheduler_daemon.domain.schedule.zone import ZoneClock, load_zone
from scheduler_daemon.domain.status import DstGapPolicy, DstOverlapPolicy

# Largest backward jump of a zone's UTC offset assumed by default (tzdata since 1970: 3 h, Casey).
# Larger jumps (Kwajalein 1969, Vostok 1994) are detected by probing offsets and widen the walk.
_REACH = timedelta(hours=3)
# Offsets range over UTC-12..UTC+14, so one wall time's instants lie within 26 h of each other.
_SWING = timedelta(hours=27)
_BATCH = timedelta(hours=6)
_FAST_SPAN = timedelta(days=2)


@dataclass(frozen=True)
class CronSchedule:
    """A cron expression read as wall-clock time in `timezone`.

    A wall time skipped by a spring-forward gap fires at the instant the gap ends
    (`dst_gap="shift"`) or not at all (`"skip"`); firings that land on one instant merge. A wall
    time repeated by a fall-back overlap fires at its first instant (`dst_overlap="first"`), its
    second (`"second"`) or both (`"both"`). Six fields put seconds last, as croniter reads them.
    When both day fields are restricted a day that matches either fires, `#`, `L5` and `W`
    included; `either_days` False reads those as croniter does (both must match), as builds
    before revision 0026 fired: only `audit`, judging the history they wrote, asks for that.
    """

    expr: str
    timezone: str = "UTC"
    dst_gap: str = DstGapPolicy.SHIFT
    dst_overlap: str = DstOverlapPolicy.FIRST
    either_days: bool = True
    _clock: ZoneClock = field(init=False, repr=False, compare=False)
    _wall: WallCron = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.dst_gap not in tuple(DstGapPolicy):
            raise ScheduleError(f"invalid dst_gap {self.dst_gap!r}: use {_either(DstGapPolicy)}")
        if self.dst_overlap not in tuple(DstOverlapPolicy):
            raise ScheduleError(
                f"invalid dst_overlap {self.dst_overlap!r}: use {_either(DstOverlapPolicy)}"
            )
        clock = ZoneClock(load_zone(self.timezone), self.dst_gap, self.dst_overlap)
        object.__setattr__(self, "_clock", clock)
        object.__setattr__(self, "_wall", WallCron(self.expr, either=self.either_days))

    def next_after(self, t: datetime) -> datetime | None:
        return next(self._stream(aware(t), forward=True), None)

    def prev_at_or_before(self, t: datetime) -> datetime | None:
        return next(self._stream(aware(t), forward=False), None)

    def fire_times(
        self, after: datetime, until: datetime | None = None, limit: int | None = None
    ) -> Iterator[datetime]:
        return bounded(self._stream(aware(after), forward=True), until, limit, forward=True)

    def fire_times_reversed(
        self, at_or_before: datetime, since: datetime | None = None, limit: int | None = None
    ) -> Iterator[datetime]:
        return bounded(
            self._stream(aware(at_or_before), forward=False), since, limit, forward=False
        )

    def count_between(self, start: datetime, end: datetime, cap: int) -> tuple[int, bool]:
        """Count by enumeration: exact up to `cap`, else `(cap, False)`."""
        count = 0
        for _ in self.fire_times(aware(start) - MICROSECOND, until=aware(end)):
            if count == cap:
                return cap, False
            count += 1
        return count, True

    # Streams of fire times. The fast step handles the usual case: the next wall time is
    # unambiguous and no offset change lies between it and `t`. Otherwise a batch walks every
    # wall time near `t` and sorts their instants.

    def _stream(self, t: datetime, *, forward: bool) -> Iterator[datetime]:
        """Fire times after `t` in order (forward), or at or before `t` newest first."""
        clock = self._clock
        walls: Iterator[datetime] | None = None
        offset = timedelta(0)
        while True:
            if walls is None:
                local = clock.wall_of(t)
                walls = (
                    self._wall.forward(local, inclusive=False)
                    if forward
                    else self._wall.backward(local, inclusive=True)
                )
                offset = clock.offset(t)
            wall = next(walls, None)
            instant = None if wall is None else clock.plain(wall, offset)
            if (
                instant is not None
                and abs(instant - t) <= _FAST_SPAN
                and clock.steady(min(t, instant), max(t, instant), offset)
            ):
                yield instant
                t = instant if forward else instant - MICROSECOND
                if not forward and clock.offset(t) != offset:
                    walls = None
                continue
            batch = self._batch(t, forward=forward)
            if not batch:
                return
            yield from batch
            t, walls = (batch[-1] if forward else batch[-1] - MICROSECOND), None

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
            for wall in walk(clamp(self._clock.wall_of(t) - sign * reach), inclusive=True):
                if found and sign * (wall - found[0][0]) > reach + _BATCH:
                    end = wall
                    break
                instants = self._clock.instants(wall, gap_end)
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
        near_t = self._clock.spread(t - _SWING, t + _SWING)
        near_found = self._clock.spread(low - _SWING, high + _SWING)
        return max(_REACH, near_t, near_found)


def _either(choices: type[StrEnum]) -> str:
    """`'a', 'b' or 'c'`, for messages."""
    quoted = [f"'{c}'" for c in choices]
    return f"{', '.join(quoted[:-1])} or {quoted[-1]}"
