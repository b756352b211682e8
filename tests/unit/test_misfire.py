"""Dispatch planning: misfire policies, overlap, the row bound and long outages."""

from datetime import UTC, datetime, timedelta
from itertools import groupby

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_daemon.domain import misfire
from scheduler_daemon.domain.misfire import (
    MAX_FIRING_ROWS,
    DispatchPlan,
    Firing,
    plan_dispatch,
)
from scheduler_daemon.domain.schedule.base import Schedule
from scheduler_daemon.domain.schedule.cron import CronSchedule
from scheduler_daemon.domain.schedule.fixed import IntervalSchedule, OneShotSchedule

T0 = datetime(2026, 1, 1, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
EVERY_MINUTE = IntervalSchedule(MINUTE, T0)


def plan(
    schedule: Schedule = EVERY_MINUTE,
    *,
    next_run_at: datetime = T0,
    now: datetime,
    misfire: str = "run_once",
    grace: timedelta = timedelta(seconds=60),
    limit: int | None = None,
    window: timedelta | None = None,
    overlap: str = "queue",
    active: bool = False,
) -> DispatchPlan:
    return plan_dispatch(
        schedule,
        next_run_at=next_run_at,
        now=now,
        misfire=misfire,
        misfire_grace=grace,
        catchup_limit=limit,
        catchup_window=window,
        overlap=overlap,
        active=active,
    )


def minutes(*offsets: int) -> list[datetime]:
    return [T0 + k * MINUTE for k in offsets]


def queued(p: DispatchPlan) -> list[datetime]:
    return [f.scheduled_for for f in p.firings if f.status == "queued"]


def skipped(p: DispatchPlan, reason: str) -> list[datetime]:
    return [f.scheduled_for for f in p.firings if f.reason == reason]


def test_nothing_is_due_before_next_run_at() -> None:
    result = plan(next_run_at=T0, now=T0 - timedelta(seconds=1))
    assert result == DispatchPlan((), T0)


def test_a_firing_within_the_grace_is_queued_and_the_next_one_scheduled() -> None:
    result = plan(now=T0 + timedelta(seconds=30))
    assert result == DispatchPlan((Firing(T0, "queued"),), T0 + MINUTE)


def test_a_firing_exactly_at_the_grace_is_not_missed() -> None:
    result = plan(now=T0 + timedelta(seconds=60), misfire="skip")
    assert queued(result) == minutes(0, 1)


def test_skip_skips_missed_firings_and_queues_the_fresh_one() -> None:
    result = plan(now=T0 + 5 * MINUTE + timedelta(seconds=10), misfire="skip")
    assert skipped(result, "misfired") == minutes(0, 1, 2, 3, 4)
    assert queued(result) == minutes(5)
    assert result.next_run_at == T0 + 6 * MINUTE


def test_run_once_coalesces_missed_firings_into_the_fresh_one() -> None:
    result = plan(now=T0 + 5 * MINUTE + timedelta(seconds=10))
    assert skipped(result, "coalesced") == minutes(0, 1, 2, 3, 4)
    assert queued(result) == minutes(5)


def test_run_once_runs_the_latest_missed_firing_when_none_is_fresh() -> None:
    result = plan(now=T0 + 5 * MINUTE + timedelta(seconds=10), grace=timedelta(seconds=5))
    assert skipped(result, "coalesced") == minutes(0, 1, 2, 3, 4)
    assert queued(result) == minutes(5)
    assert [f.status for f in result.firings] == ["skipped"] * 5 + ["queued"]


def test_run_all_runs_missed_firings_within_the_window_and_the_limit() -> None:
    result = plan(
        now=T0 + 5 * MINUTE + timedelta(seconds=10),
        misfire="run_all",
        grace=timedelta(seconds=5),
        window=3 * MINUTE,
        limit=2,
    )
    assert skipped(result, "catchup_window") == minutes(0, 1, 2)
    assert skipped(result, "catchup_limit") == minutes(3)
    assert queued(result) == minutes(4, 5)


def test_run_all_without_window_or_limit_runs_every_missed_firing() -> None:
    result = plan(now=T0 + 5 * MINUTE, misfire="run_all", grace=timedelta(0))
    assert queued(result) == minutes(0, 1, 2, 3, 4, 5)


def test_run_all_limit_zero_runs_only_fresh_firings() -> None:
    result = plan(now=T0 + 2 * MINUTE, misfire="run_all", grace=timedelta(0), limit=0)
    assert skipped(result, "catchup_limit") == minutes(0, 1)
    assert queued(result) == minutes(2)


def test_forbid_while_idle_queues_the_first_and_skips_the_rest_as_overlap() -> None:
    result = plan(now=T0 + 3 * MINUTE, misfire="skip", grace=timedelta(hours=1), overlap="forbid")
    assert queued(result) == minutes(0)
    assert skipped(result, "overlap") == minutes(1, 2, 3)


def test_forbid_while_a_run_is_active_skips_every_would_be_run_as_overlap() -> None:
    result = plan(
        now=T0 + 3 * MINUTE + timedelta(seconds=10), misfire="skip", overlap="forbid", active=True
    )
    assert skipped(result, "misfired") == minutes(0, 1, 2)
    assert skipped(result, "overlap") == minutes(3)
    assert queued(result) == []


@pytest.mark.parametrize("overlap", ["queue", "allow"])
def test_queue_and_allow_keep_every_run_even_while_active(overlap: str) -> None:
    result = plan(now=T0 + 2 * MINUTE, grace=timedelta(hours=1), overlap=overlap, active=True)
    assert queued(result) == minutes(0, 1, 2)


def test_a_pass_writes_at_most_the_row_bound_of_individual_skipped_rows() -> None:
    result = plan(now=T0 + 150 * MINUTE, misfire="skip", grace=timedelta(seconds=30))
    summary, *rest = result.firings
    assert summary == Firing(T0, "skipped", "misfired", 50, T0 + 49 * MINUTE, count_exact=True)
    assert [f.scheduled_for for f in rest] == minutes(*range(50, 151))
    assert all(f.firing_count == 1 for f in rest)
    assert len(skipped(result, "misfired")) == MAX_FIRING_ROWS + 1


def test_summaries_collapse_only_runs_of_one_reason_oldest_first() -> None:
    result = plan(
        now=T0 + 300 * MINUTE,
        misfire="run_all",
        grace=timedelta(0),
        window=150 * MINUTE,
        limit=5,
    )
    window, limit, *rest = result.firings
    assert window == Firing(T0, "skipped", "catchup_window", 150, T0 + 149 * MINUTE)
    assert limit == Firing(T0 + 150 * MINUTE, "skipped", "catchup_limit", 45, T0 + 194 * MINUTE)
    assert [f.reason for f in rest] == ["catchup_limit"] * 100 + [None] * 6
    assert queued(result) == minutes(295, 296, 297, 298, 299, 300)


def test_a_pass_queues_at_most_the_row_bound_and_skips_older_runs_as_catchup_limit() -> None:
    result = plan(now=T0 + 300 * MINUTE, misfire="skip", grace=250 * MINUTE)
    assert result.firings[0] == Firing(T0, "skipped", "misfired", 50, T0 + 49 * MINUTE)
    assert result.firings[1] == Firing(
        T0 + 50 * MINUTE, "skipped", "catchup_limit", 51, T0 + 100 * MINUTE
    )
    assert queued(result) == minutes(*range(201, 301))
    assert len(result.firings) == 2 + 2 * MAX_FIRING_ROWS


def test_thirty_days_of_a_per_second_interval_plan_in_a_bounded_number_of_rows() -> None:
    every_second = IntervalSchedule(timedelta(seconds=1), T0)
    now = T0 + timedelta(days=30) - timedelta(seconds=1)  # 2_592_000 due firings
    result = plan(every_second, now=now, grace=timedelta(0))
    summary = result.firings[0]
    assert len(result.firings) == MAX_FIRING_ROWS + 2
    assert summary.firing_count == 2_592_000 - (MAX_FIRING_ROWS + 1)
    assert summary.count_exact
    assert summary.last_scheduled_for == now - timedelta(seconds=MAX_FIRING_ROWS + 1)
    assert queued(result) == [now]
    assert sum(f.firing_count for f in result.firings) == 2_592_000
    assert result.next_run_at == now + timedelta(seconds=1)


def test_cron_summaries_count_up_to_the_cap_and_say_when_they_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(misfire, "COUNT_CAP", 1_000)
    every_minute = CronSchedule("* * * * *", "Europe/Berlin")
    result = plan(every_minute, now=T0 + timedelta(days=10), grace=timedelta(0))
    summary = result.firings[0]
    assert summary.reason == "coalesced"
    assert not summary.count_exact
    assert summary.firing_count == 1_000 + MAX_FIRING_ROWS - 1
    assert summary.scheduled_for == T0
    assert len(result.firings) == MAX_FIRING_ROWS + 2


def test_a_cron_outage_across_a_dst_change_counts_exactly() -> None:
    new_york = CronSchedule("*/15 * * * *", "America/New_York")
    start = datetime(2026, 10, 31, 12, tzinfo=UTC)
    result = plan(new_york, next_run_at=start, now=start + timedelta(days=3), grace=timedelta(0))
    # 3 days of quarter hours (288) and the firing at now, less the repeated 01:00-01:45.
    assert sum(f.firing_count for f in result.firings) == 288 + 1 - 4
    assert all(f.count_exact for f in result.firings)


def test_a_one_shot_is_queued_once_and_then_has_no_next_run() -> None:
    at = T0 + timedelta(hours=1)
    result = plan(OneShotSchedule(at), next_run_at=at, now=at + timedelta(seconds=5))
    assert result == DispatchPlan((Firing(at, "queued"),), None)
    late = plan(OneShotSchedule(at), next_run_at=at, now=at + timedelta(days=1), misfire="skip")
    assert late == DispatchPlan((Firing(at, "skipped", "misfired"),), None)


def test_a_stored_next_run_at_is_due_even_if_the_schedule_no_longer_names_it() -> None:
    stored = T0 + timedelta(seconds=30)
    result = plan(next_run_at=stored, now=T0 + 2 * MINUTE + timedelta(seconds=40))
    assert skipped(result, "coalesced") == [stored, T0 + MINUTE]
    assert queued(result) == minutes(2)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"misfire": "later"}, "invalid misfire policy 'later'"),
        ({"overlap": "never"}, "invalid overlap policy 'never'"),
        ({"grace": timedelta(seconds=-1)}, "misfire_grace must not be negative"),
        ({"limit": -1}, "catchup_limit must not be negative"),
        ({"now": datetime(2026, 1, 1)}, "now must be timezone-aware"),
    ],
)
def test_invalid_arguments_are_refused(changes: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"now": T0 + MINUTE, **changes}
    with pytest.raises(ValueError, match=message):
        plan(**arguments)  # type: ignore[arg-type]


# The planner decides only the newest firings and counts the rest; a plain reference that decides
# every firing one by one must produce the same rows.


def reference_rows(
    *,
    due: list[datetime],
    now: datetime,
    policy: str,
    grace: timedelta,
    limit: int | None,
    window: timedelta | None,
    overlap: str,
    active: bool,
) -> list[Firing]:
    missed = [f for f in due if now - f > grace]
    reason: dict[datetime, str | None] = dict.fromkeys(due)
    if policy == "skip":
        reason.update(dict.fromkeys(missed, "misfired"))
    elif policy == "run_once":
        reason.update(dict.fromkeys(missed, "coalesced"))
        if len(missed) == len(due):
            reason[missed[-1]] = None
    else:
        late = [f for f in missed if window is not None and now - f > window]
        reason.update(dict.fromkeys(late, "catchup_window"))
        catchable = [f for f in missed if f not in late]
        runs = catchable if limit is None else catchable[max(0, len(catchable) - limit) :]
        reason.update({f: "catchup_limit" for f in catchable if f not in runs})
    runs = [f for f in due if reason[f] is None]
    reason.update(dict.fromkeys(runs[:-MAX_FIRING_ROWS], "catchup_limit"))
    runs = runs[-MAX_FIRING_ROWS:]
    if overlap == "forbid":
        reason.update(dict.fromkeys(runs if active else runs[1:], "overlap"))
    skips = [f for f in due if reason[f] is not None]
    rows = []
    collapsed = skips[: max(0, len(skips) - MAX_FIRING_ROWS)]
    for why, group in groupby(collapsed, key=lambda f: reason[f]):
        fs = list(group)
        last = fs[-1] if len(fs) > 1 else None
        rows.append(Firing(fs[0], "skipped", why, len(fs), last))
    for f in due:
        if f in collapsed:
            continue
        rows.append(Firing(f, "queued") if reason[f] is None else Firing(f, "skipped", reason[f]))
    return rows


@settings(max_examples=200, deadline=None)
@given(
    count=st.integers(1, 450),
    every=st.sampled_from([timedelta(seconds=1), MINUTE, timedelta(hours=1)]),
    slack=st.floats(0, 0.99),
    policy=st.sampled_from(["skip", "run_once", "run_all"]),
    grace_steps=st.integers(0, 460),
    limit=st.one_of(st.none(), st.integers(0, 150)),
    window_steps=st.one_of(st.none(), st.integers(0, 460)),
    overlap=st.sampled_from(["forbid", "queue", "allow"]),
    active=st.booleans(),
    off_grid=st.booleans(),
)
def test_planning_the_newest_firings_equals_deciding_every_firing(
    *,
    count: int,
    every: timedelta,
    slack: float,
    policy: str,
    grace_steps: int,
    limit: int | None,
    window_steps: int | None,
    overlap: str,
    active: bool,
    off_grid: bool,
) -> None:
    schedule = IntervalSchedule(every, T0 - every)  # fires at T0 + k * every, k >= 0
    next_run_at = T0 - every / 2 if off_grid else T0
    now = T0 + (count - 1) * every + slack * every
    due = [*([next_run_at] if off_grid else []), *(T0 + k * every for k in range(count))]
    grace = grace_steps * every / 3
    window = None if window_steps is None else window_steps * every / 3
    result = plan(
        schedule,
        next_run_at=next_run_at,
        now=now,
        misfire=policy,
        grace=grace,
        limit=limit,
        window=window,
        overlap=overlap,
        active=active,
    )
    expected = reference_rows(
        due=due,
        now=now,
        policy=policy,
        grace=grace,
        limit=limit,
        window=window,
        overlap=overlap,
        active=active,
    )
    assert list(result.firings) == expected
    assert result.next_run_at == T0 + count * every
