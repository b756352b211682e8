"""The soak's verdict on calendars (tests/chaos/soak_calendars.py) on planted rows, and its choice
of zones at every time of day: a green soak must mean no excluded firing was queued and every one
was recorded."""

import random
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from tests.chaos.soak_calendars import CHANGED, FREE, HELD, Plan, Verdict, local_date

T0 = datetime(2030, 6, 1, 10, 0, tzinfo=UTC)
S = timedelta(seconds=1)
HERE, THERE = date(2030, 6, 1), date(2030, 5, 31)  # UTC's date and Etc/GMT+12's at T0


def _plan(**changes: Any) -> Plan:
    plan = Plan("UTC", "Etc/GMT+12", HERE, THERE, first_firing=T0)
    plan.change_before, plan.change_after = T0 + 20 * S, T0 + 21 * S
    for key, value in changes.items():
        setattr(plan, key, value)
    return plan


def _row(task: str, occ: int, at: datetime, **fields: Any) -> dict[str, Any]:
    zone = "UTC" if task == HELD else "Etc/GMT+12"
    return {
        "task": task, "timezone": zone, "id": occ, "scheduled_for": at,
        "last_scheduled_for": None, "firing_count": 1, "status": "success", "reason": None,
        "trigger": "schedule", "created_at": at, "runs": 1,
    } | fields  # fmt: skip


def _excluded(task: str, occ: int, first: datetime, last: datetime, **fields: Any) -> dict:
    count = round((last - first) / S) + 1
    return _row(task, occ, first, last_scheduled_for=last, firing_count=count,
                status="skipped", reason="excluded", runs=0, **fields)  # fmt: skip


def _green() -> list[dict[str, Any]]:
    """A soak's rows as they should be: stopped at T0 + 60 s."""
    return [
        _excluded(HELD, 1, T0, T0 + timedelta(hours=13, seconds=59 * 60 + 59)),
        *[_row(FREE, 10 + i, T0 + 2 * i * S) for i in range(5)],
        *[_row(CHANGED, 20 + i, T0 + 2 * i * S) for i in range(10)],  # to T0 + 18 s
        _excluded(CHANGED, 40, T0 + 22 * S, T0 + 3600 * S, created_at=T0 + 22 * S),
    ]


STOP = T0 + 60 * S


def test_the_rows_a_soak_should_leave_are_green() -> None:
    verdict = Verdict(_plan(), _green(), STOP)
    assert verdict.problems == []
    assert verdict.windows() == {
        "excluded_firings_recorded": 61,
        "calendar_other_zone_ran": 5,
        "calendar_change_applied": 1,
    }


def test_a_queued_firing_on_an_excluded_date_is_a_problem() -> None:
    # Fails on a verdict that judged runs only by count: the dispatcher queued a held firing.
    rows = [*_green(), _row(HELD, 2, T0 + 30 * S, runs=0, status="queued")]
    (problem, *others) = Verdict(_plan(), rows, STOP).problems
    assert "cal-held occurrence 2 (queued, 0 run(s))" in problem
    assert "an excluded date" in problem
    assert any("not excluded" in p for p in others)


def test_the_change_applies_from_the_dispatch_after_it_and_not_before() -> None:
    after = [*_green(), _row(CHANGED, 41, T0 + 25 * S, created_at=T0 + 22 * S)]
    problems = Verdict(_plan(), after, STOP).problems
    assert any("cal-changed occurrence 41" in p and "excluded date" in p for p in problems)
    # Dispatched while the change's call was in flight: either version may have been read.
    during = [*_green(), _row(CHANGED, 41, T0 + 19 * S, created_at=T0 + 20.5 * S)]
    assert Verdict(_plan(), during, STOP).problems == []
    # An excluded row dispatched before the change began: no version in force held that date.
    early = _excluded(CHANGED, 42, T0 - 10 * S, T0 - 10 * S, created_at=T0 - 10 * S)
    problems = Verdict(_plan(), [*_green(), early], STOP).problems
    assert any("cal-changed occurrence 42 excluded" in p for p in problems)


def test_a_gap_a_wrong_count_or_a_short_run_of_the_held_tasks_rows_is_a_problem() -> None:
    first, second = T0 + 9 * S, T0 + 11 * S  # the firing at T0 + 10 s has no row
    gap = [_excluded(HELD, 1, T0, first), _excluded(HELD, 2, second, STOP + 5 * S)]
    rows = [*gap, *_green()[1:]]
    assert Verdict(_plan(), rows, STOP).problems == [
        f"cal-held occurrence 2 ({second}..{STOP + 5 * S}) does not start at the next firing,"
        f" {T0 + 10 * S}"
    ]
    miscounted = _excluded(HELD, 1, T0, STOP) | {"firing_count": 60}
    assert any(
        "counts 60 firings, not 61" in p for p in Verdict(_plan(), [miscounted], STOP).problems
    )
    # Rows to the settle bound are enough (the last pass may be a second behind the stop).
    settled = [_excluded(HELD, 1, T0, STOP - 5 * S), *_green()[1:]]
    assert Verdict(_plan(), settled, STOP).problems == []
    short = [_excluded(HELD, 1, T0, STOP - 6 * S), *_green()[1:]]
    assert Verdict(_plan(), short, STOP).problems == [
        f"cal-held's firings from {STOP - 5 * S} to the stop have no row"
    ]


def test_the_free_task_not_running_the_change_failing_or_midnight_are_problems() -> None:
    idle = [r for r in _green() if r["task"] != FREE]
    assert Verdict(_plan(), idle, STOP).problems == [
        "cal-free never ran: no date of its zone was excluded"
    ]
    never = _plan(change_after=None, change_failures=["error: could not connect"])
    assert Verdict(never, _green(), STOP).problems == [
        "the calendar change never succeeded: ['error: could not connect']"
    ]
    late = datetime(2030, 6, 2, 0, 0, 1, tzinfo=UTC)  # past UTC's midnight
    assert any("crossed midnight in UTC" in p for p in Verdict(_plan(), _green(), late).problems)


@pytest.mark.parametrize("minute", range(0, 24 * 60, 10))
def test_two_zones_on_steady_different_dates_are_found_at_every_time_of_day(minute) -> None:
    start = datetime(2030, 3, 30, tzinfo=UTC) + timedelta(minutes=minute)  # a DST weekend too
    plan = Plan.pick(start, 110, random.Random(minute))
    assert plan.here != plan.there
    for zone, day in ((plan.held_zone, plan.here), (plan.free_zone, plan.there)):
        for at in (start - timedelta(minutes=2), start + timedelta(seconds=3 * 110 + 900)):
            assert local_date(at, zone) == day
