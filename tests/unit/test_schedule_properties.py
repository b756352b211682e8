"""Properties of cron schedules over random zones, expressions, instants and DST policies.

The reference is deliberately naive: it asks croniter for every wall time around a window and maps
each one through zoneinfo, then sorts. The schedule must produce exactly that, in order.
"""

import zoneinfo
from datetime import UTC, datetime, timedelta
from itertools import pairwise

from croniter import croniter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_daemon.domain.schedule.cron import CronSchedule

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ALL_ZONES = sorted(zoneinfo.available_timezones() - {"localtime"})
DST_ZONES = [
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Asia/Beirut",
    "Antarctica/Vostok",
    "Antarctica/Casey",
    "Pacific/Apia",
    "Pacific/Chatham",
    "Europe/Moscow",
    "America/Havana",
    "Asia/Tehran",
]
# (zone, year) pairs with the largest offset jumps in tzdata: a day skipped or repeated, 7 hours.
EXTREMES = [
    ("Pacific/Kwajalein", 1969),
    ("Pacific/Kwajalein", 1993),
    ("Antarctica/Vostok", 1994),
    ("Pacific/Apia", 2011),
    ("Pacific/Fakaofo", 2011),
    ("Pacific/Kiritimati", 1994),
    ("Antarctica/Casey", 2010),
    ("America/Caracas", 2016),
    ("Asia/Pyongyang", 2018),
    ("Africa/Monrovia", 1972),
]
WINDOW = timedelta(hours=30)
MARGIN = timedelta(hours=27)


def field(low: int, high: int, *, star: bool) -> st.SearchStrategy[str]:
    value = st.integers(low, high)
    parts = [
        value.map(str),
        st.lists(value, min_size=2, max_size=3, unique=True).map(lambda v: ",".join(map(str, v))),
        st.tuples(value, st.integers(1, 10)).map(lambda r: f"{r[0]}-{min(high, r[0] + r[1])}"),
        st.tuples(st.integers(5, 30), st.integers(low, low + 4)).map(
            lambda s: f"{s[1]}-{high}/{s[0]}"
        ),
        st.integers(5, 30).map(lambda step: f"*/{step}"),
    ]
    if star:
        parts.append(st.just("*"))
    return st.one_of(*parts)


@st.composite
def cron_expressions(draw: st.DrawFn) -> str:
    minute = draw(field(0, 59, star=False))
    hour = draw(st.one_of(st.just("*"), field(0, 23, star=True)))
    day = draw(st.one_of(st.just("*"), st.just("*"), field(1, 28, star=True)))
    month = draw(st.one_of(st.just("*"), st.just("*"), st.just("*"), field(1, 12, star=True)))
    weekday = draw(st.one_of(st.just("*"), st.just("*"), field(0, 6, star=True)))
    seconds = draw(st.one_of(st.just([]), st.integers(0, 59).map(lambda s: [str(s)])))
    return " ".join([minute, hour, day, month, weekday, *seconds])


@st.composite
def schedules(draw: st.DrawFn) -> tuple[CronSchedule, datetime]:
    """A schedule and a start instant: from 1970 to 2100, or in a year of an extreme change."""
    zone, year = draw(
        st.one_of(
            st.tuples(st.sampled_from(DST_ZONES), st.integers(1970, 2099)),
            st.tuples(st.sampled_from(ALL_ZONES), st.integers(1970, 2099)),
            st.sampled_from(EXTREMES),
        )
    )
    schedule = CronSchedule(
        draw(cron_expressions()),
        zone,
        draw(st.sampled_from(["shift", "skip"])),
        draw(st.sampled_from(["first", "second", "both"])),
    )
    start = datetime(year, 1, 1, tzinfo=UTC)
    changes = offset_changes(zoneinfo.ZoneInfo(zone), start, start + timedelta(days=366))
    if changes and draw(st.integers(0, 3)):
        near = draw(st.sampled_from(changes))
        return schedule, near + timedelta(minutes=draw(st.integers(-30 * 60, 30 * 60)))
    return schedule, start + timedelta(seconds=draw(st.integers(0, 366 * 86400)))


def offset_changes(zone: zoneinfo.ZoneInfo, low: datetime, high: datetime) -> list[datetime]:
    found, step = [], timedelta(hours=4)
    t = low
    while t < high:
        if t.astimezone(zone).utcoffset() != (t + step).astimezone(zone).utcoffset():
            found.append(t + step / 2)
        t += step
    return found


def wall(t: datetime, zone: zoneinfo.ZoneInfo) -> datetime:
    return t.astimezone(zone).replace(tzinfo=None)


def gap_end(zone: zoneinfo.ZoneInfo, wall_time: datetime, before: datetime) -> datetime:
    """Scan forward (minutes, then seconds) for the first instant whose wall time passed it."""
    t = before
    while wall(t + timedelta(minutes=1), zone) <= wall_time:
        t += timedelta(minutes=1)
    while wall(t, zone) <= wall_time:
        t += timedelta(seconds=1)
    return t


def reference(schedule: CronSchedule, after: datetime, until: datetime) -> list[datetime]:
    zone = zoneinfo.ZoneInfo(schedule.timezone)
    found = set()
    it = croniter(schedule.expr, wall(after, zone) - MARGIN - timedelta(seconds=1))
    last = wall(until, zone) + MARGIN
    while (candidate := it.get_next(datetime)) <= last:
        first = candidate.replace(tzinfo=zone).astimezone(UTC)
        second = candidate.replace(tzinfo=zone, fold=1).astimezone(UTC)
        if first == second:
            found.add(first)
        elif first < second:
            if schedule.dst_overlap in ("first", "both"):
                found.add(first)
            if schedule.dst_overlap in ("second", "both"):
                found.add(second)
        elif schedule.dst_gap == "shift":
            found.add(gap_end(zone, candidate, second))
    return sorted(f for f in found if after < f <= until)


@SETTINGS
@given(st.data())
def test_fire_times_equal_a_brute_force_walk_over_every_wall_time(data: st.DataObject) -> None:
    schedule, after = data.draw(schedules())
    until = after + WINDOW
    expected = reference(schedule, after, until)
    assert list(schedule.fire_times(after, until=until)) == expected
    assert (
        list(schedule.fire_times_reversed(until, since=after + timedelta(microseconds=1)))
        == (expected[::-1])
    )


@SETTINGS
@given(st.data())
def test_fire_times_strictly_increase_and_each_matches_the_expression_or_ends_a_gap(
    data: st.DataObject,
) -> None:
    schedule, after = data.draw(schedules())
    zone = zoneinfo.ZoneInfo(schedule.timezone)
    times = list(schedule.fire_times(after, limit=40))
    assert all(a < b for a, b in zip([after, *times], times, strict=False))
    for f in times:
        local = wall(f, zone)
        first = local.replace(tzinfo=zone).astimezone(UTC)
        second = local.replace(tzinfo=zone, fold=1).astimezone(UTC)
        if croniter.match(schedule.expr, local) and (f in (first, second)):
            assert (
                first == second
                or {
                    "first": f == first,
                    "second": f == second,
                    "both": True,
                }[schedule.dst_overlap]
            )
            continue
        before = f - timedelta(microseconds=1)
        assert schedule.dst_gap == "shift", f"{f} matches nothing"
        assert before.astimezone(zone).utcoffset() < f.astimezone(zone).utcoffset()  # type: ignore[operator]
        skipped = croniter(schedule.expr, wall(before, zone)).get_next(datetime)
        assert skipped < local, f"{f} ends a gap that held no firing"


@SETTINGS
@given(st.data())
def test_between_firings_with_no_offset_change_the_sequence_agrees_with_croniter(
    data: st.DataObject,
) -> None:
    schedule, after = data.draw(schedules())
    zone = zoneinfo.ZoneInfo(schedule.timezone)
    times = list(schedule.fire_times(after, limit=40))
    for a, b in pairwise(times):
        if b - a > timedelta(days=3) or offset_changes(zone, a - MARGIN, b + MARGIN):
            continue
        assert croniter(schedule.expr, wall(a, zone)).get_next(datetime) == wall(b, zone)


@SETTINGS
@given(st.data())
def test_next_after_and_prev_at_or_before_agree_with_each_other(data: st.DataObject) -> None:
    schedule, t = data.draw(schedules())
    prev, nxt = schedule.prev_at_or_before(t), schedule.next_after(t)
    assert prev is not None
    assert nxt is not None
    assert prev <= t < nxt
    assert schedule.next_after(prev) == nxt
    assert schedule.prev_at_or_before(nxt - timedelta(microseconds=1)) == prev
    assert schedule.prev_at_or_before(nxt) == nxt


@settings(max_examples=100, deadline=None)
@given(cron_expressions(), st.datetimes(datetime(1970, 1, 1), datetime(2100, 1, 1)))
def test_in_utc_every_firing_is_the_croniter_sequence(expr: str, start: datetime) -> None:
    expected, it = [], croniter(expr, start)
    for _ in range(30):
        expected.append(it.get_next(datetime).replace(tzinfo=UTC))
    actual = list(CronSchedule(expr).fire_times(start.replace(tzinfo=UTC), limit=30))
    assert actual == expected
