"""Owed firings: windows from a task's definition history, coverage by exact and summary rows,
and the gaps reported; including that every row a dispatch plan writes covers what it owes."""

from datetime import UTC, datetime, timedelta

import pytest

from scheduler_daemon.domain.coverage import (
    Coverage,
    DefinitionEvent,
    Pruned,
    gaps,
    missing_firings,
    owed_since,
    owed_windows,
    split_windows,
)
from scheduler_daemon.domain.misfire import plan_dispatch
from scheduler_daemon.domain.schedule.fixed import IntervalSchedule

T0 = datetime(2026, 3, 1, tzinfo=UTC)
SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)


def event(
    ident: int,
    at: datetime,
    *,
    active: bool = True,
    every: timedelta | None = MINUTE,
    cron: str | None = None,
    run_at: datetime | None = None,
    anchor: datetime = T0,
    timezone: str = "UTC",
) -> DefinitionEvent:
    kind = "cron" if cron else "once" if run_at else "interval"
    return DefinitionEvent(
        id=ident,
        task_id=1,
        at=at,
        active=active,
        schedule_kind=kind,
        cron_expr=cron,
        every=every if kind == "interval" else None,
        run_at=run_at,
        anchor_at=anchor,
        timezone=timezone,
        dst_gap="shift",
        dst_overlap="first",
    )


def owed(events: list[DefinitionEvent], cutoff: datetime, since: datetime | None = None) -> list:
    windows = owed_windows(events, since=since, cutoff=cutoff)
    result = missing_firings(windows, Coverage([], []), limit=10_000)
    return sorted(m.at for m in result.missing)


def test_firings_are_owed_after_an_event_and_before_the_next_but_not_while_inactive() -> None:
    events = [
        event(1, T0),  # created: every minute from T0 (T0 itself is the anchor, not a firing)
        event(2, T0 + 3 * MINUTE, active=False),  # paused exactly at a firing
        event(3, T0 + 5 * MINUTE + 30 * SECOND),  # resumed
    ]
    assert owed(events, T0 + 8 * MINUTE) == [
        T0 + MINUTE,
        T0 + 2 * MINUTE,
        T0 + 6 * MINUTE,
        T0 + 7 * MINUTE,
        T0 + 8 * MINUTE,  # the cutoff itself is owed
    ]


def test_since_clips_the_windows_and_a_fire_time_at_since_is_owed() -> None:
    assert owed([event(1, T0)], T0 + 5 * MINUTE, since=T0 + 3 * MINUTE) == [
        T0 + 3 * MINUTE,
        T0 + 4 * MINUTE,
        T0 + 5 * MINUTE,
    ]


def _times(windows: list) -> list:
    return sorted(m.at for m in missing_firings(windows, Coverage([], []), limit=10_000).missing)


@pytest.mark.parametrize("cut", [2, 3, 5, 6, 8, 9])
def test_next_run_at_splits_the_owed_firings_into_passed_and_pending_with_none_lost(
    cut: int,
) -> None:
    """Firings before next_run_at are the dispatcher's to have recorded; the one at it and
    those after are pending. Cut at a firing, at a pause's edge, at the cutoff and past it."""
    events = [event(1, T0), event(2, T0 + 3 * MINUTE, active=False), event(3, T0 + 5 * MINUTE)]
    windows = owed_windows(events, since=None, cutoff=T0 + 8 * MINUTE)
    at = T0 + cut * MINUTE
    before, pending = split_windows(windows, at)
    assert _times(before) == [t for t in _times(windows) if t < at]
    assert _times(pending) == [t for t in _times(windows) if t >= at]
    assert split_windows(windows, None) == (windows, [])  # no next firing: nothing pending


def test_a_pruned_task_owes_firings_after_its_mark_and_its_retention_cutoff_only() -> None:
    mark = T0 + 4 * MINUTE  # the newest firing a prune recorded deleting
    cutoff = T0 + 2 * MINUTE  # now minus the task's retention
    events = [event(1, T0)]

    def owed_after(since: datetime | None, pruned: Pruned | None) -> list[datetime]:
        return owed(events, T0 + 6 * MINUTE, since=owed_since(since, pruned))

    # The retention was lengthened after the prune: the mark still leaves out what it deleted,
    # and the firing at the mark itself.
    assert owed_after(None, Pruned(1, cutoff, mark)) == [T0 + 5 * MINUTE, T0 + 6 * MINUTE]
    # Pruned only by a build before revision 0016 (no mark): the retention cutoff, as before.
    assert owed_after(None, Pruned(1, cutoff, None)) == [T0 + m * MINUTE for m in (2, 3, 4, 5, 6)]
    # The retention cleared after a prune: the mark alone.
    assert owed_after(None, Pruned(1, None, mark)) == [T0 + 5 * MINUTE, T0 + 6 * MINUTE]
    # A later `since` wins; a task the prune cannot have touched owes everything from `since`.
    assert owed_after(T0 + 6 * MINUTE, Pruned(1, cutoff, mark)) == [T0 + 6 * MINUTE]
    assert owed_since(None, None) is None
    assert owed_since(T0, Pruned(1, None, None)) == T0


def test_a_changed_schedule_owes_the_new_fire_times_from_the_change() -> None:
    events = [event(1, T0), event(2, T0 + 150 * SECOND, cron="*/5 * * * *")]
    assert owed(events, T0 + 12 * MINUTE) == [
        T0 + MINUTE,
        T0 + 2 * MINUTE,
        T0 + 5 * MINUTE,
        T0 + 10 * MINUTE,
    ]


def test_a_one_shot_owes_its_instant_only_when_active_then() -> None:
    run_at = T0 + 2 * MINUTE
    assert owed([event(1, T0, run_at=run_at)], T0 + 9 * MINUTE) == [run_at]
    paused = [event(1, T0, run_at=run_at), event(2, T0 + MINUTE, active=False, run_at=run_at)]
    assert owed(paused, T0 + 9 * MINUTE) == []


def test_exact_rows_and_summary_ranges_cover_firings() -> None:
    coverage = Coverage([T0, T0 + 9 * MINUTE], [(T0 + 2 * MINUTE, T0 + 4 * MINUTE)])
    assert [coverage.covers(T0 + k * MINUTE) for k in range(6)] == [
        True,
        False,
        True,
        True,
        True,
        False,
    ]
    assert coverage.covers(T0 + 9 * MINUTE)


def test_missing_firings_are_grouped_into_consecutive_gaps_oldest_first() -> None:
    windows = owed_windows([event(1, T0)], since=None, cutoff=T0 + 10 * MINUTE)
    present = [T0 + k * MINUTE for k in (1, 4, 5, 9)]
    result = missing_firings(windows, Coverage(present, []), limit=100)
    assert [(g.first, g.last, g.count) for g in gaps(result.missing)] == [
        (T0 + 2 * MINUTE, T0 + 3 * MINUTE, 2),
        (T0 + 6 * MINUTE, T0 + 8 * MINUTE, 3),
        (T0 + 10 * MINUTE, T0 + 10 * MINUTE, 1),
    ]


def test_the_limit_checks_the_newest_firings_and_says_where_it_stopped() -> None:
    windows = owed_windows([event(1, T0)], since=None, cutoff=T0 + 10 * MINUTE)
    result = missing_firings(windows, Coverage([], []), limit=3)
    assert [m.at for m in result.missing] == [T0 + k * MINUTE for k in (10, 9, 8)]
    assert result.checked_from == T0 + 7 * MINUTE


def test_an_unplannable_definition_is_reported_not_raised() -> None:
    windows = owed_windows(
        [event(1, T0, cron="0 * * * *", timezone="Mars/Olympus")], since=None, cutoff=T0 + MINUTE
    )
    result = missing_firings(windows, Coverage([], []), limit=10)
    assert result.missing == ()
    assert "Mars/Olympus" in result.unplannable[0].error


@pytest.mark.parametrize(
    ("misfire", "outage"),
    [("skip", 2), ("run_once", 2), ("run_all", 2)],
)
def test_every_row_a_dispatch_plan_writes_covers_every_firing_it_owes(
    misfire: str, outage: int
) -> None:
    """After an outage of `outage` hours of a per-second task, the rows one dispatch pass writes
    (queued, skipped, summaries) cover every owed firing: the audit agrees with the dispatcher."""
    schedule = IntervalSchedule(SECOND, T0)
    now = T0 + outage * timedelta(hours=1) + 300 * timedelta(milliseconds=1)
    plan = plan_dispatch(
        schedule,
        next_run_at=T0 + SECOND,
        now=now,
        misfire=misfire,
        misfire_grace=MINUTE,
        catchup_limit=None,
        catchup_window=None,
        overlap="allow",
        active=False,
    )
    exact = [f.scheduled_for for f in plan.firings if f.last_scheduled_for is None]
    ranges = [
        (f.scheduled_for, f.last_scheduled_for)
        for f in plan.firings
        if f.last_scheduled_for is not None
    ]
    windows = owed_windows([event(1, T0, every=SECOND)], since=None, cutoff=now)
    result = missing_firings(windows, Coverage(exact, ranges), limit=10_000_000)
    assert result.examined == outage * 3600
    assert result.missing == ()
