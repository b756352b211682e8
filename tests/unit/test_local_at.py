"""A one-shot's local `--at` (no offset) is read in its zone by its DST policies, as cron reads a
wall time (issue 38 item 4, ADR 0019): in a gap it fires where the gap ends (`shift`) or never
(`skip`, its one firing recorded skipped when the task is written); in an overlap at its first or
second instant; `both` names two instants and is refused. An instant with an offset is kept.

The instants are tzdata's, worked out by hand: America/New_York jumps from 02:00 EST to 03:00 EDT
at 07:00 UTC on 2036-03-09 and falls back from 02:00 EDT to 01:00 EST at 06:00 UTC on 2036-11-02
(the second Sunday of March and first of November); Europe/Berlin jumps from 02:00 CET to 03:00
CEST at 01:00 UTC on 2036-03-30 and falls back from 03:00 CEST to 02:00 CET at 01:00 UTC on
2036-10-26 (the last Sundays of March and October)."""

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_daemon.domain import control
from scheduler_daemon.domain.schedule.base import ScheduleError
from scheduler_daemon.domain.schedule.zone import gap_start, read_wall
from scheduler_daemon.domain.status import LostReason, OccurrenceStatus, TaskStatus
from scheduler_daemon.domain.task import InvalidTask, TaskRecord, TaskSpec
from scheduler_daemon.domain.task_file import exported, parse, render
from tests.support import task_record
from tests.unit.schedule_support import utc

NY, BERLIN = "America/New_York", "Europe/Berlin"
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _at(at: datetime, **policies: Any) -> TaskSpec:
    """One-shot task "a" of `true` at `at` (a wall time or an instant), `policies` set."""
    return TaskSpec(name="a", executor="shell", target="true", at=at, **policies)


@pytest.mark.parametrize(
    ("wall", "zone", "gap", "overlap", "at", "skipped"),
    [
        (datetime(2036, 3, 9, 2, 30), NY, "shift", "first", utc(2036, 3, 9, 7), False),
        (datetime(2036, 3, 9, 2, 30), NY, "skip", "first", utc(2036, 3, 9, 7), True),
        (datetime(2036, 3, 9, 2, 0), NY, "skip", "first", utc(2036, 3, 9, 7), True),
        (datetime(2036, 3, 9, 3, 0), NY, "skip", "first", utc(2036, 3, 9, 7), False),  # exists
        (datetime(2036, 11, 2, 1, 30), NY, "shift", "first", utc(2036, 11, 2, 5, 30), False),
        (datetime(2036, 11, 2, 1, 30), NY, "skip", "second", utc(2036, 11, 2, 6, 30), False),
        (datetime(2036, 3, 30, 2, 15), BERLIN, "shift", "first", utc(2036, 3, 30, 1), False),
        (datetime(2036, 3, 30, 2, 15), BERLIN, "skip", "both", utc(2036, 3, 30, 1), True),
        (datetime(2036, 10, 26, 2, 30), BERLIN, "shift", "first", utc(2036, 10, 26, 0, 30), False),
        (datetime(2036, 10, 26, 2, 30), BERLIN, "shift", "second", utc(2036, 10, 26, 1, 30), False),
        (datetime(2036, 6, 1, 9, 0), BERLIN, "skip", "both", utc(2036, 6, 1, 7), False),
    ],
)
def test_a_wall_time_becomes_the_instant_cron_would_fire_it_at(  # noqa: PLR0917 - the columns
    wall: datetime, zone: str, gap: str, overlap: str, at: datetime, skipped: bool
) -> None:
    found = read_wall(wall, zone, gap, overlap)
    assert (found.at, found.skipped) == (at, skipped)
    spec = _at(wall, timezone=zone, dst_gap=gap, dst_overlap=overlap)
    resolved, skips = spec.resolved()
    assert (resolved.at, skips) == (at, skipped)
    assert resolved.resolved() == (resolved, False)  # an instant is not read again
    # The schedule of the definition as given: none when skipped, else that one instant.
    assert list(spec.schedule().fire_times(NOW)) == ([] if skipped else [at])


def test_both_at_a_time_that_happens_twice_is_refused_in_one_line() -> None:
    with pytest.raises(ScheduleError) as caught:
        read_wall(datetime(2036, 11, 2, 1, 30), NY, "shift", "both")
    assert str(caught.value) == (
        "2036-11-02T01:30:00 happens twice in America/New_York (05:30:00 and 06:30:00 UTC) and "
        "a one-shot fires once: give --dst-overlap first or second, or an offset"
    )
    spec = _at(datetime(2036, 11, 2, 1, 30), timezone=NY, dst_overlap="both")
    with pytest.raises(InvalidTask, match=r"^--at 2036-11-02T01:30:00 happens twice"):
        spec.validate(NOW)


def test_an_instant_with_an_offset_or_a_zone_is_kept_whatever_the_policies() -> None:
    for at in (
        datetime(2036, 3, 9, 2, 30, tzinfo=timezone(timedelta(hours=-5))),
        datetime(2036, 11, 2, 1, 30, tzinfo=UTC),
    ):
        spec = _at(at, timezone=NY, dst_gap="skip", dst_overlap="both")
        spec.validate(NOW)
        assert spec.resolved() == (spec, False)


def test_a_local_at_is_held_to_the_clock_and_the_range_once_read() -> None:
    past = _at(datetime(2026, 3, 8, 2, 30))
    with pytest.raises(InvalidTask, match="is in the past"):
        past.validate(NOW)
    far = past.with_changes(at=datetime(9999, 12, 31, 23, 0), timezone=BERLIN)
    with pytest.raises(InvalidTask, match=r"out of range|too far ahead"):
        far.validate(NOW)


def _once(status: str, at: datetime, **spec: object) -> TaskRecord:
    definition = _at(at, **spec)
    due = at if status == TaskStatus.ENABLED else None
    return task_record(definition, status=status, next_run_at=due, created_at=NOW)


def test_an_update_reads_a_local_at_by_the_policies_after_it_and_plans_a_skipped_firing() -> None:
    task = _once(TaskStatus.ENABLED, utc(2036, 1, 1, 14), timezone=NY, dst_overlap="second")
    moved = control.plan_update(task, {"at": datetime(2036, 11, 2, 1, 30)}, NOW)
    assert isinstance(moved, control.UpdatePlan)
    assert (moved.spec.at, moved.next_run_at, moved.skipped) == (
        utc(2036, 11, 2, 6, 30),
        utc(2036, 11, 2, 6, 30),
        None,
    )
    skipped = control.plan_update(task, {"at": datetime(2036, 3, 9, 2, 30), "dst_gap": "skip"}, NOW)
    assert isinstance(skipped, control.UpdatePlan)
    assert (skipped.spec.at, skipped.next_run_at) == (utc(2036, 3, 9, 7), None)
    assert skipped.skipped == control.skipped_one_shot(skipped.spec)
    assert (skipped.skipped.status, skipped.skipped.reason) == (
        OccurrenceStatus.SKIPPED,
        LostReason.DST_GAP,
    )


def test_a_one_shot_whose_firing_was_skipped_plans_no_firing_on_update_or_resume() -> None:
    task = _once(TaskStatus.CANCELLED, utc(2036, 3, 9, 7), timezone=NY, dst_gap="skip")
    plan = control.plan_update(task, {"dst_gap": "shift"}, NOW)
    assert isinstance(plan, control.UpdatePlan)
    assert (plan.next_run_at, plan.status) == (None, TaskStatus.CANCELLED)
    paused = _once(TaskStatus.CANCELLED, utc(2036, 3, 9, 7), paused=True)
    assert control.plan_resume(paused, NOW) == control.ResumePlan(None, TaskStatus.CANCELLED)


def test_export_writes_a_skipped_one_shot_as_a_wall_time_its_file_reads_back_skipped() -> None:
    skipped = _once(TaskStatus.CANCELLED, utc(2036, 3, 9, 7), timezone=NY, dst_gap="skip")
    written = render([exported(skipped)])
    assert "at = 2036-03-09T02:00:00\n" in written
    spec = parse(written, {})["a"]
    assert spec.resolved() == (skipped.spec, True)
    # The same instant, given as 03:00 and still to fire, is written as its instant.
    enabled = _once(TaskStatus.ENABLED, utc(2036, 3, 9, 7), timezone=NY, dst_gap="skip")
    assert exported(enabled) == enabled.spec
    shifted = _once(TaskStatus.CANCELLED, utc(2036, 3, 9, 7), timezone=NY, dst_gap="shift")
    assert exported(shifted) == shifted.spec
    # An instant where no gap ends is its instant, whatever the status.
    other = _once(TaskStatus.CANCELLED, utc(2036, 3, 9, 8), timezone=NY, dst_gap="skip")
    assert exported(other) == other.spec
    assert gap_start(utc(2036, 3, 9, 8), NY) is None
    assert gap_start(utc(2036, 11, 2, 6), NY) is None  # an overlap starts there: no gap


ZONES = [NY, BERLIN, "Australia/Lord_Howe", "America/Santiago", "Pacific/Apia", "Asia/Tehran"]


@settings(max_examples=200, deadline=None)
@given(
    zone=st.sampled_from(ZONES),
    wall=st.datetimes(datetime(2000, 1, 1), datetime(2040, 1, 1)),
    gap=st.sampled_from(["shift", "skip"]),
    overlap=st.sampled_from(["first", "second"]),
)
def test_a_local_at_fires_where_the_same_wall_time_in_cron_fires(
    zone: str, wall: datetime, gap: str, overlap: str
) -> None:
    """The one-shot's instant is the firing a cron naming exactly that wall time makes (its
    minute, hour, day and month; seconds and microseconds dropped), or none when skipped."""
    from scheduler_daemon.domain.schedule.cron import CronSchedule

    wall = wall.replace(second=0, microsecond=0)
    found = read_wall(wall, zone, gap, overlap)
    cron = CronSchedule(f"{wall.minute} {wall.hour} {wall.day} {wall.month} *", zone, gap, overlap)
    window = (found.at - timedelta(days=2), found.at + timedelta(days=2))
    fired = list(cron.fire_times(window[0], until=window[1]))
    if found.skipped:
        assert fired == []
        assert read_wall(wall, zone, "shift", overlap).at == found.at  # where the gap ends
        assert read_wall(gap_start(found.at, zone), zone, "skip", overlap) == found  # type: ignore[arg-type]
    else:
        assert fired == [found.at]
