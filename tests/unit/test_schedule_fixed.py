"""Fixed intervals and one-shots: plain UTC arithmetic, exact counts, both directions."""

from datetime import datetime, timedelta, timezone

import pytest

from scheduler_daemon.domain.schedule.base import ScheduleError
from scheduler_daemon.domain.schedule.fixed import IntervalSchedule, OneShotSchedule
from scheduler_daemon.domain.schedule.zone import load_zone
from tests.unit.schedule_support import fires, utc

# Intervals and one-shots.


def test_interval_fires_at_anchor_plus_positive_multiples_of_every() -> None:
    # The anchor itself (k = 0) is not a firing: the dispatcher never fired it and `audit`
    # never owed it, but backfill queued it (issue 29).
    schedule = IntervalSchedule(timedelta(minutes=10), utc(2026, 1, 1, 0, 3))
    assert schedule.next_after(utc(2025, 1, 1)) == utc(2026, 1, 1, 0, 13)
    assert schedule.next_after(utc(2026, 1, 1, 0, 3)) == utc(2026, 1, 1, 0, 13)
    assert schedule.next_after(utc(2026, 1, 1, 0, 12, 59)) == utc(2026, 1, 1, 0, 13)
    assert schedule.prev_at_or_before(utc(2026, 1, 1, 0, 13)) == utc(2026, 1, 1, 0, 13)
    assert schedule.prev_at_or_before(utc(2026, 1, 1, 0, 12, 59)) is None
    assert schedule.prev_at_or_before(utc(2026, 1, 1, 0, 3)) is None
    assert schedule.prev_at_or_before(utc(2026, 1, 1, 0, 2)) is None


def test_interval_ignores_dst_because_it_is_utc_arithmetic() -> None:
    anchor = datetime(2026, 3, 8, 1, 0, tzinfo=load_zone("America/New_York"))
    schedule = IntervalSchedule(timedelta(hours=1), anchor)
    assert schedule.anchor == utc(2026, 3, 8, 6)
    assert fires(schedule, anchor, 2) == [utc(2026, 3, 8, 7), utc(2026, 3, 8, 8)]


def test_interval_counts_arithmetically_and_exactly_whatever_the_cap() -> None:
    schedule = IntervalSchedule(timedelta(seconds=1), utc(2026, 1, 1))
    assert schedule.count_between(utc(2026, 1, 1), utc(2026, 1, 31), cap=10) == (2_592_000, True)
    assert schedule.count_between(utc(2025, 1, 1), utc(2026, 1, 1), cap=10) == (0, True)
    assert schedule.count_between(utc(2025, 1, 1), utc(2026, 1, 1, 0, 0, 1), cap=10) == (1, True)
    assert schedule.count_between(utc(2026, 1, 2), utc(2026, 1, 1), cap=10) == (0, True)


def test_interval_fire_times_go_both_ways() -> None:
    schedule = IntervalSchedule(timedelta(milliseconds=500), utc(2026, 1, 1))
    assert fires(schedule, utc(2026, 1, 1), 2) == [
        utc(2026, 1, 1, 0, 0, 0, 500_000),
        utc(2026, 1, 1, 0, 0, 1),
    ]
    assert list(schedule.fire_times_reversed(utc(2026, 1, 1, 0, 0, 1), limit=5)) == [
        utc(2026, 1, 1, 0, 0, 1),
        utc(2026, 1, 1, 0, 0, 0, 500_000),
    ]


def test_interval_refuses_non_positive_periods_and_naive_anchors() -> None:
    with pytest.raises(ScheduleError, match="interval must be positive"):
        IntervalSchedule(timedelta(0), utc(2026, 1, 1))
    with pytest.raises(ScheduleError, match="timezone-aware"):
        IntervalSchedule(timedelta(1), datetime(2026, 1, 1))


def test_one_shot_fires_once_and_then_never() -> None:
    schedule = OneShotSchedule(datetime(2026, 5, 1, 12, tzinfo=timezone(timedelta(hours=2))))
    assert schedule.next_after(utc(2026, 1, 1)) == utc(2026, 5, 1, 10)
    assert schedule.next_after(utc(2026, 5, 1, 10)) is None
    assert schedule.prev_at_or_before(utc(2026, 5, 1, 9)) is None
    assert schedule.prev_at_or_before(utc(2026, 5, 1, 10)) == utc(2026, 5, 1, 10)
    assert list(schedule.fire_times(utc(2026, 1, 1))) == [utc(2026, 5, 1, 10)]
    assert schedule.count_between(utc(2026, 5, 1, 10), utc(2026, 5, 1, 10), cap=0) == (1, True)
    assert schedule.count_between(utc(2026, 5, 2), utc(2026, 6, 1), cap=5) == (0, True)
