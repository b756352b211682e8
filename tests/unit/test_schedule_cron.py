"""Cron fire times in exact UTC: without DST changes, and across spring-forward gaps and
fall-back overlaps (New York, Berlin, Lord Howe, Santiago, Beirut, Vostok)."""

from datetime import UTC, datetime, timedelta, timezone

import pytest

from scheduler_daemon.domain.schedule.cron import CronSchedule
from tests.unit.schedule_support import fires, utc

# Cron without DST changes.


def test_cron_in_utc_fires_at_the_next_matching_minute_strictly_after_t() -> None:
    schedule = CronSchedule("*/15 * * * *")
    assert schedule.next_after(utc(2026, 1, 1, 10, 0)) == utc(2026, 1, 1, 10, 15)
    assert schedule.next_after(utc(2026, 1, 1, 10, 0, 0, 1)) == utc(2026, 1, 1, 10, 15)
    assert schedule.prev_at_or_before(utc(2026, 1, 1, 10, 0)) == utc(2026, 1, 1, 10, 0)
    assert schedule.prev_at_or_before(utc(2026, 1, 1, 9, 59, 59)) == utc(2026, 1, 1, 9, 45)


def test_cron_results_are_utc_whatever_zone_t_is_given_in() -> None:
    schedule = CronSchedule("0 9 * * *", "Europe/Berlin")
    t = datetime(2026, 1, 5, 12, tzinfo=timezone(timedelta(hours=5)))
    assert schedule.next_after(t) == utc(2026, 1, 5, 8)
    assert schedule.next_after(t).tzinfo is UTC  # type: ignore[union-attr]


def test_six_fields_put_seconds_last() -> None:
    schedule = CronSchedule("0 0 * * * 30")
    assert fires(schedule, utc(2026, 1, 1), 2) == [
        utc(2026, 1, 1, 0, 0, 30),
        utc(2026, 1, 2, 0, 0, 30),
    ]


def test_every_second_cron_fires_every_second() -> None:
    schedule = CronSchedule("* * * * * *", "Europe/Berlin")
    start = utc(2026, 6, 1, 12)
    assert fires(schedule, start, 3) == [start + timedelta(seconds=k) for k in (1, 2, 3)]


def test_day_of_week_and_last_day_of_month_follow_croniter() -> None:
    assert CronSchedule("0 12 * * 1#2").next_after(utc(2026, 3, 1)) == utc(2026, 3, 9, 12)
    assert CronSchedule("0 0 L 2 *").next_after(utc(2028, 1, 1)) == utc(2028, 2, 29)


def test_fire_times_stop_at_until_inclusive_and_at_limit() -> None:
    schedule = CronSchedule("0 * * * *")
    assert list(schedule.fire_times(utc(2026, 1, 1), until=utc(2026, 1, 1, 3))) == [
        utc(2026, 1, 1, 1),
        utc(2026, 1, 1, 2),
        utc(2026, 1, 1, 3),
    ]
    assert len(list(schedule.fire_times(utc(2026, 1, 1), limit=5))) == 5


def test_fire_times_reversed_go_back_from_at_or_before_to_since() -> None:
    schedule = CronSchedule("0 * * * *")
    assert list(schedule.fire_times_reversed(utc(2026, 1, 1, 3), since=utc(2026, 1, 1, 1))) == [
        utc(2026, 1, 1, 3),
        utc(2026, 1, 1, 2),
        utc(2026, 1, 1, 1),
    ]


def test_cron_count_between_is_inclusive_and_exact_up_to_the_cap() -> None:
    schedule = CronSchedule("*/15 * * * *")
    assert schedule.count_between(utc(2026, 1, 1, 0), utc(2026, 1, 1, 1), cap=10) == (5, True)
    assert schedule.count_between(utc(2026, 1, 1, 0), utc(2026, 1, 1, 1), cap=5) == (5, True)
    assert schedule.count_between(utc(2026, 1, 1, 0), utc(2026, 1, 1, 1), cap=4) == (4, False)


# Spring forward: America/New_York 2026-03-08 02:00 EST -> 03:00 EDT (07:00 UTC).


def test_a_wall_time_in_the_gap_fires_when_the_gap_ends_by_default() -> None:
    schedule = CronSchedule("30 2 * * *", "America/New_York")
    assert fires(schedule, utc(2026, 3, 7), 3) == [
        utc(2026, 3, 7, 7, 30),
        utc(2026, 3, 8, 7, 0),
        utc(2026, 3, 9, 6, 30),
    ]


def test_a_wall_time_in_the_gap_does_not_fire_with_skip() -> None:
    schedule = CronSchedule("30 2 * * *", "America/New_York", dst_gap="skip")
    assert fires(schedule, utc(2026, 3, 7), 2) == [utc(2026, 3, 7, 7, 30), utc(2026, 3, 9, 6, 30)]


def test_firings_shifted_onto_the_same_instant_merge_into_one() -> None:
    schedule = CronSchedule("*/15 * * * *", "America/New_York")
    assert fires(schedule, utc(2026, 3, 8, 6, 30), 3) == [
        utc(2026, 3, 8, 6, 45),
        utc(2026, 3, 8, 7, 0),
        utc(2026, 3, 8, 7, 15),
    ]


def test_prev_at_or_before_sees_the_shifted_firing() -> None:
    schedule = CronSchedule("*/15 * * * *", "America/New_York")
    assert schedule.prev_at_or_before(utc(2026, 3, 8, 7, 14)) == utc(2026, 3, 8, 7, 0)
    assert schedule.prev_at_or_before(utc(2026, 3, 8, 6, 59)) == utc(2026, 3, 8, 6, 45)


# Fall back: America/New_York 2026-11-01 02:00 EDT -> 01:00 EST (06:00 UTC).


@pytest.mark.parametrize(
    ("overlap", "expected"),
    [
        ("first", [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]),
        ("second", [utc(2026, 11, 1, 6, 30), utc(2026, 11, 2, 6, 30)]),
        ("both", [utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 30), utc(2026, 11, 2, 6, 30)]),
    ],
)
def test_a_repeated_wall_time_fires_per_the_overlap_policy(
    overlap: str, expected: list[datetime]
) -> None:
    schedule = CronSchedule("30 1 * * *", "America/New_York", dst_overlap=overlap)
    assert fires(schedule, utc(2026, 11, 1), len(expected)) == expected
    newest_first = list(schedule.fire_times_reversed(expected[-1], limit=len(expected)))
    assert newest_first == expected[::-1]


def test_both_passes_of_an_overlap_fire_in_instant_order() -> None:
    schedule = CronSchedule("*/15 * * * *", "America/New_York", dst_overlap="both")
    start = utc(2026, 11, 1, 4, 45)
    assert fires(schedule, start, 9) == [start + timedelta(minutes=15 * k) for k in range(1, 10)]


def test_second_pass_only_leaves_a_silent_hour() -> None:
    schedule = CronSchedule("*/30 * * * *", "America/New_York", dst_overlap="second")
    assert fires(schedule, utc(2026, 11, 1, 4, 15), 4) == [
        utc(2026, 11, 1, 4, 30),
        utc(2026, 11, 1, 6, 0),
        utc(2026, 11, 1, 6, 30),
        utc(2026, 11, 1, 7, 0),
    ]


def test_next_after_inside_the_second_pass_of_an_overlap() -> None:
    first = CronSchedule("*/30 * * * *", "America/New_York")
    assert first.next_after(utc(2026, 11, 1, 6, 10)) == utc(2026, 11, 1, 7, 0)
    both = CronSchedule("*/30 * * * *", "America/New_York", dst_overlap="both")
    assert both.next_after(utc(2026, 11, 1, 6, 10)) == utc(2026, 11, 1, 6, 30)
    assert both.prev_at_or_before(utc(2026, 11, 1, 6, 10)) == utc(2026, 11, 1, 6, 0)


# Europe/Berlin: 2026-03-29 02:00 CET -> 03:00 CEST and 2026-10-25 03:00 CEST -> 02:00 CET.


def test_berlin_spring_gap_shifts_to_the_transition_at_one_utc() -> None:
    schedule = CronSchedule("30 2 * * *", "Europe/Berlin")
    assert schedule.next_after(utc(2026, 3, 28, 12)) == utc(2026, 3, 29, 1, 0)
    assert schedule.next_after(utc(2026, 3, 29, 1, 0)) == utc(2026, 3, 30, 0, 30)


def test_berlin_fall_overlap_fires_once_at_the_first_instant_by_default() -> None:
    schedule = CronSchedule("30 2 * * *", "Europe/Berlin")
    assert fires(schedule, utc(2026, 10, 24, 12), 2) == [
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 26, 1, 30),
    ]


# Australia/Lord_Howe shifts by 30 minutes: 2026-04-05 02:00 -> 01:30 (+11 -> +10:30, 15:00 UTC)
# and 2026-10-04 02:00 -> 02:30 (+10:30 -> +11, 15:30 UTC).


def test_lord_howe_half_hour_overlap_keeps_the_first_pass() -> None:
    schedule = CronSchedule("*/15 * * * *", "Australia/Lord_Howe")
    assert fires(schedule, utc(2026, 4, 4, 14, 0), 4) == [
        utc(2026, 4, 4, 14, 15),
        utc(2026, 4, 4, 14, 30),
        utc(2026, 4, 4, 14, 45),
        utc(2026, 4, 4, 15, 30),
    ]


def test_lord_howe_half_hour_overlap_with_both_fires_every_quarter_hour() -> None:
    schedule = CronSchedule("*/15 * * * *", "Australia/Lord_Howe", dst_overlap="both")
    start = utc(2026, 4, 4, 14, 0)
    assert fires(schedule, start, 8) == [start + timedelta(minutes=15 * k) for k in range(1, 9)]


def test_lord_howe_half_hour_gap_merges_into_the_transition() -> None:
    schedule = CronSchedule("*/15 * * * *", "Australia/Lord_Howe")
    assert fires(schedule, utc(2026, 10, 3, 15, 0), 3) == [
        utc(2026, 10, 3, 15, 15),
        utc(2026, 10, 3, 15, 30),
        utc(2026, 10, 3, 15, 45),
    ]


# Transitions at midnight: America/Santiago 2026 and Asia/Beirut 2020.


def test_santiago_midnight_in_the_spring_gap_fires_at_one_am() -> None:
    shift = CronSchedule("0 0 * * *", "America/Santiago")
    assert fires(shift, utc(2026, 9, 5, 12), 2) == [utc(2026, 9, 6, 4), utc(2026, 9, 7, 3)]
    skip = CronSchedule("0 0 * * *", "America/Santiago", dst_gap="skip")
    assert skip.next_after(utc(2026, 9, 5, 12)) == utc(2026, 9, 7, 3)


def test_santiago_repeated_hour_before_midnight_fires_both_with_both() -> None:
    schedule = CronSchedule("30 23 * * *", "America/Santiago", dst_overlap="both")
    assert fires(schedule, utc(2026, 4, 4, 12), 2) == [
        utc(2026, 4, 5, 2, 30),
        utc(2026, 4, 5, 3, 30),
    ]


def test_beirut_midnight_transitions_of_2020() -> None:
    midnight = CronSchedule("0 0 * * *", "Asia/Beirut")
    assert midnight.next_after(utc(2020, 3, 28, 12)) == utc(2020, 3, 28, 22)
    late = CronSchedule("30 23 * * *", "Asia/Beirut", dst_overlap="second")
    assert late.next_after(utc(2020, 10, 24, 12)) == utc(2020, 10, 24, 21, 30)


# Antarctica/Vostok 1994: +07 -> +00 (a 7-hour overlap) and back (a 7-hour gap).


def test_a_seven_hour_backward_jump_is_walked_in_full() -> None:
    first = CronSchedule("0 * * * *", "Antarctica/Vostok")
    assert first.next_after(utc(1994, 1, 31, 16)) == utc(1994, 2, 1, 0)
    both = CronSchedule("0 * * * *", "Antarctica/Vostok", dst_overlap="both")
    start = utc(1994, 1, 31, 12)
    assert fires(both, start, 14) == [start + timedelta(hours=k) for k in range(1, 15)]
    assert both.prev_at_or_before(utc(1994, 2, 1, 0, 30)) == utc(1994, 2, 1, 0)


def test_late_in_a_seven_hour_overlap_the_second_pass_is_still_ahead() -> None:
    both = CronSchedule("0 * * * *", "Antarctica/Vostok", dst_overlap="both")
    assert both.next_after(utc(1994, 1, 31, 16, 30)) == utc(1994, 1, 31, 17)
    second = CronSchedule("0 * * * *", "Antarctica/Vostok", dst_overlap="second")
    assert second.next_after(utc(1994, 1, 31, 9, 30)) == utc(1994, 1, 31, 17)
    assert second.prev_at_or_before(utc(1994, 1, 31, 16, 59)) == utc(1994, 1, 31, 9)
    daily = CronSchedule("0 20 * * *", "Antarctica/Vostok", dst_overlap="both")
    assert daily.next_after(utc(1994, 1, 31, 16, 30)) == utc(1994, 1, 31, 20)


def test_a_seven_hour_gap_collapses_into_one_firing() -> None:
    schedule = CronSchedule("0 * * * *", "Antarctica/Vostok")
    assert fires(schedule, utc(1994, 10, 31, 22), 3) == [
        utc(1994, 10, 31, 23),
        utc(1994, 11, 1, 0),
        utc(1994, 11, 1, 1),
    ]
