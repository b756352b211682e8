"""Which zones and cron expressions a schedule accepts, the one-line refusals, and the
schedule value itself (immutable, picklable, refusing naive datetimes)."""

import pickle
from datetime import datetime

import pytest

from scheduler_daemon.domain.schedule.base import ScheduleError
from scheduler_daemon.domain.schedule.cron import CronSchedule
from scheduler_daemon.domain.schedule.cron_syntax import validate_cron
from scheduler_daemon.domain.schedule.zone import load_zone

# Zones and expressions.


def test_load_zone_returns_the_iana_zone() -> None:
    assert load_zone("Europe/Berlin").key == "Europe/Berlin"


@pytest.mark.parametrize(
    "name", ["Mars/Olympus", "", "../etc", "/etc/passwd", "America", "localtime", "a\x00b"]
)
def test_load_zone_refuses_anything_but_an_iana_zone_in_one_line(name: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        load_zone(name)
    assert str(caught.value) == f"unknown time zone {name!r}"


def test_unknown_zone_message_quotes_the_name() -> None:
    with pytest.raises(ScheduleError, match=r"^unknown time zone 'Mars/Olympus'$"):
        CronSchedule("* * * * *", "Mars/Olympus")


@pytest.mark.parametrize(
    "expr",
    ["* * * * *", "*/15 9-17 * * mon-fri", "0 0 L * *", "0 0 * * 1#2", "0 0 * * * 30", "@hourly"],
)
def test_validate_cron_accepts_standard_and_seconds_expressions(expr: str) -> None:
    validate_cron(expr)


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("61 * * * *", "minute '61' is not valid (allowed: 0-59)"),
        ("* 24 * * *", "hour '24' is not valid (allowed: 0-23)"),
        ("* * * * * 60", "second '60' is not valid (allowed: 0-59)"),
        ("* * * *", "expected 5 fields (minute hour day month weekday) or 6, got 4"),
        ("* * * * * * *", "expected 5 fields (minute hour day month weekday) or 6, got 7"),
        ("@reboot", "@reboot has no fire times; use a one-shot schedule"),
        ("R * * * *", "minute 'R': H and R are not supported"),
        ("0 H * * *", "hour 'H': H and R are not supported"),
        ("0 0 30 2 *", "it never fires"),
    ],
)
def test_validate_cron_refuses_with_a_short_reason(expr: str, reason: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        validate_cron(expr)
    assert str(caught.value) == f"invalid cron expression {expr!r}: {reason}"
    assert "\n" not in str(caught.value)


def test_cron_schedule_refuses_unknown_dst_policies() -> None:
    with pytest.raises(ScheduleError, match=r"^invalid dst_gap 'later': use 'shift' or 'skip'$"):
        CronSchedule("* * * * *", dst_gap="later")
    with pytest.raises(ScheduleError, match=r"^invalid dst_overlap 'all'"):
        CronSchedule("* * * * *", dst_overlap="all")


def test_cron_schedule_is_an_immutable_value_that_pickles() -> None:
    schedule = CronSchedule("0 3 * * *", "Europe/Berlin")
    assert schedule == CronSchedule("0 3 * * *", "Europe/Berlin")
    assert hash(schedule) == hash(CronSchedule("0 3 * * *", "Europe/Berlin"))
    assert pickle.loads(pickle.dumps(schedule)) == schedule
    with pytest.raises(AttributeError):
        schedule.expr = "* * * * *"  # type: ignore[misc]


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        CronSchedule("* * * * *").next_after(datetime(2026, 1, 1))
