"""Zone mapping: which names are IANA zones, and how one zone's wall-clock times become instants
and back under the DST policies (a skipped wall time shifts or is skipped, a repeated one fires
at its first instant, its second, or both)."""

import functools
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

from scheduler_daemon.domain.schedule.base import ScheduleError, clamp
from scheduler_daemon.domain.status import DstGapPolicy, DstOverlapPolicy

_MICROSECOND = timedelta(microseconds=1)
# Offsets are probed hourly: in tzdata, changes of a zone's offset are always days apart.
PROBE = timedelta(hours=1)


def load_zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA zone called `name`; ScheduleError for anything else (paths, `localtime`, '')."""
    if not isinstance(name, str) or name == "localtime" or name not in _zone_names():
        raise ScheduleError(f"unknown time zone {name!r}")
    try:
        return zoneinfo.ZoneInfo(name)
    except (ValueError, KeyError, OSError):
        raise ScheduleError(f"unknown time zone {name!r}") from None


@functools.cache
def _zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


class ZoneClock:
    """One zone's wall time <-> instants, with the DST policies a cron schedule was given."""

    def __init__(self, zone: tzinfo, dst_gap: str, dst_overlap: str) -> None:
        self.zone = zone
        self.dst_gap = dst_gap
        self.dst_overlap = dst_overlap

    def wall_of(self, t: datetime) -> datetime:
        return t.astimezone(self.zone).replace(tzinfo=None)

    def offset(self, t: datetime) -> timedelta:
        return t.astimezone(self.zone).utcoffset() or timedelta(0)

    def instants(self, wall: datetime, gap_end: list[datetime]) -> tuple[datetime, ...]:
        """The instants wall time `wall` fires at under the DST policies, in order. `gap_end`
        caches the end of the last gap found, across the calls of one walk."""
        first = wall.replace(tzinfo=self.zone).astimezone(UTC)
        second = wall.replace(tzinfo=self.zone, fold=1).astimezone(UTC)
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
            if self.wall_of(datetime.fromtimestamp(middle, UTC)) > wall:
                high = middle
            else:
                low = middle
        return datetime.fromtimestamp(high, UTC)

    def spread(self, low: datetime, high: datetime) -> timedelta:
        """How far the zone's offset varies over [low, high], probed every `PROBE`."""
        low, high = clamp(low), clamp(high)
        offsets = {self.offset(high)}
        while low < high:
            offsets.add(self.offset(low))
            low += PROBE
        return max(offsets) - min(offsets)

    def steady(self, low: datetime, high: datetime, offset: timedelta) -> bool:
        """Whether the probes strictly inside (low, high) all show `offset`."""
        probe = low + PROBE
        while probe < high:
            if self.offset(probe) != offset:
                return False
            probe += PROBE
        return True

    def plain(self, wall: datetime, offset: timedelta) -> datetime | None:
        """`wall` as an instant if it is unambiguous and has `offset`, else None."""
        local = wall.replace(tzinfo=self.zone)
        if local.utcoffset() != offset or local.replace(fold=1).utcoffset() != offset:
            return None
        return (wall - offset).replace(tzinfo=UTC)


@dataclass(frozen=True)
class WallInstant:
    """Where a one-shot's local wall time fires (`at`, UTC), and whether its one firing is
    skipped instead (`at` is then where the gap that swallowed it ends)."""

    at: datetime
    skipped: bool = False


def read_wall(wall: datetime, timezone: str, dst_gap: str, dst_overlap: str) -> WallInstant:
    """Naive `wall` in `timezone` as a one-shot instant, by the DST policies a cron schedule
    applies to it (ZoneClock.instants): in a gap, the instant the gap ends (`shift`) or a skipped
    firing there (`skip`); in an overlap, its first or second instant. `both` names two instants
    and a one-shot fires once: ScheduleError, one line, as for a wall time out of range."""
    zone = load_zone(timezone)
    clock = ZoneClock(zone, DstGapPolicy.SHIFT, dst_overlap)
    try:
        instants = clock.instants(wall, [])
        gap = wall.replace(tzinfo=zone).astimezone(UTC) > wall.replace(
            tzinfo=zone, fold=1
        ).astimezone(UTC)
    except (OverflowError, ValueError):
        raise ScheduleError(f"{wall.isoformat()} is out of range") from None
    if len(instants) > 1:
        first, second = (i.strftime("%H:%M:%S") for i in instants)
        raise ScheduleError(
            f"{wall.isoformat()} happens twice in {timezone} ({first} and {second} UTC) and a "
            "one-shot fires once: give --dst-overlap first or second, or an offset"
        )
    return WallInstant(instants[0], skipped=gap and dst_gap == DstGapPolicy.SKIP)


def gap_start(at: datetime, timezone: str) -> datetime | None:
    """If instant `at` is where a gap of `timezone` ends (its offset grows there), the gap's
    first wall time (naive), which `read_wall` reads back to `at`; else None."""
    zone = load_zone(timezone)
    try:
        before = (at - _MICROSECOND).astimezone(zone)
        after = at.astimezone(zone)
    except (OverflowError, ValueError):
        return None
    if (after.utcoffset() or timedelta(0)) <= (before.utcoffset() or timedelta(0)):
        return None
    return before.replace(tzinfo=None) + _MICROSECOND
