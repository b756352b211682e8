"""`tasks health`'s verdicts (domain/health.py): one test per rule of docs/cli.md, the order in
which they are tried, which skips are the task's own policy, the window's counts, the firings
owed, and the fleet page's cursor."""

from dataclasses import replace
from datetime import timedelta

import pytest

from scheduler_daemon.domain import health
from scheduler_daemon.domain.health import Group, Signals, Verdict
from scheduler_daemon.domain.schedule.fixed import IntervalSchedule
from tests.unit.schedule_support import utc

NOW = utc(2030, 1, 2, 12)
HEALTHY = Signals(
    now=NOW,
    paused=False,
    parked_at=None,
    park_error=None,
    status="enabled",
    misfire="run_once",
    misfire_grace=timedelta(minutes=1),
    next_run_at=NOW + timedelta(seconds=30),
    recent_attempts=("success", "failed", "failed"),
)


def skip(reason: str, overlap: str = "forbid", firings: int = 1) -> Group:
    return Group("schedule", "skipped", reason, overlap, 1, firings)


def test_a_task_no_rule_holds_for_is_healthy() -> None:
    assert health.judge(HEALTHY) == health.Health(Verdict.HEALTHY, "no rule holds")


# -- failing -------------------------------------------------------------------------------------
def test_failing_when_the_last_n_finished_attempts_failed_or_timed_out() -> None:
    s = replace(HEALTHY, recent_attempts=("timeout", "failed", "failed", "success"))
    assert health.judge(s) == health.Health(
        Verdict.FAILING, "the last 3 attempts failed or timed out"
    )


def test_not_failing_when_one_of_the_last_n_succeeded_or_fewer_than_n_finished() -> None:
    assert health.failing(replace(HEALTHY, recent_attempts=("failed", "success", "failed"))) is None
    assert health.failing(replace(HEALTHY, recent_attempts=("failed", "failed"))) is None
    assert (
        health.failing(replace(HEALTHY, recent_attempts=("failed", "cancelled", "failed"))) is None
    )


def test_failing_counts_the_n_it_is_given() -> None:
    s = replace(HEALTHY, recent_attempts=("failed",), failing_after=1)
    assert health.judge(s).verdict == Verdict.FAILING


# -- losing firings ------------------------------------------------------------------------------
def test_losing_firings_when_a_firing_expired_in_the_window() -> None:
    s = replace(HEALTHY, lost=(Group("schedule", "expired", "start_deadline", "forbid", 1, 1),))
    assert health.judge(s) == health.Health(Verdict.LOSING_FIRINGS, "1 expired in the window")


def test_losing_firings_when_a_skip_is_not_the_tasks_own_policy() -> None:
    # misfired is what `--misfire skip` writes; under run_once it is not the task's own rule
    s = replace(HEALTHY, lost=(skip("misfired", firings=40), skip("parked", firings=2)))
    assert health.judge(s) == health.Health(
        Verdict.LOSING_FIRINGS, "40 skipped (misfired), 2 skipped (parked) in the window"
    )


@pytest.mark.parametrize(
    ("reason", "overlap", "misfire"),
    [
        ("overlap", "forbid", "run_once"),
        ("misfired", "forbid", "skip"),
        ("coalesced", "forbid", "run_once"),
        ("catchup_window", "queue", "run_all"),
        ("catchup_limit", "queue", "run_all"),
        ("paused", "forbid", "run_once"),
        ("rescheduled", "forbid", "run_once"),
        ("dst_gap", "forbid", "run_once"),
        ("deleted", "forbid", "run_once"),
        ("replaced", "replace", "run_all"),  # a catch-up pass's older firings, the newest won
    ],
)
def test_a_skip_its_own_policy_or_an_operator_made_loses_nothing(reason, overlap, misfire) -> None:
    s = replace(HEALTHY, misfire=misfire, lost=(skip(reason, overlap),))
    assert health.losing_firings(s) is None


@pytest.mark.parametrize(
    ("reason", "overlap", "misfire"),
    [
        ("overlap", "queue", "run_once"),  # an overlap skip under queue: not its policy
        ("coalesced", "forbid", "skip"),
        ("catchup_limit", "forbid", "run_once"),  # more firings than a pass writes
        ("parked", "forbid", "run_once"),
        ("replaced", "queue", "run_all"),  # written under replace only
    ],
)
def test_a_skip_another_rule_made_is_a_lost_firing(reason, overlap, misfire) -> None:
    s = replace(HEALTHY, misfire=misfire, lost=(skip(reason, overlap),))
    assert health.losing_firings(s) == f"1 skipped ({reason}) in the window"


# -- late ----------------------------------------------------------------------------------------
def test_late_when_a_firing_owed_is_not_dispatched_past_its_misfire_grace() -> None:
    s = replace(HEALTHY, next_run_at=NOW - timedelta(seconds=61))
    assert health.judge(s) == health.Health(
        Verdict.LATE, "a firing due 61s ago is not dispatched (grace 60s)"
    )


def test_not_late_within_the_grace_nor_while_paused_or_parked() -> None:
    due = replace(HEALTHY, next_run_at=NOW - timedelta(seconds=60))
    assert health.late(due) is None
    behind = replace(HEALTHY, next_run_at=NOW - timedelta(hours=1))
    assert health.late(replace(behind, paused=True)) is None
    assert health.late(replace(behind, parked_at=NOW, park_error="x")) is None


def test_late_when_an_occurrence_is_queued_past_its_start_deadline() -> None:
    s = replace(HEALTHY, queued_past_deadline=2)
    assert health.judge(s) == health.Health(Verdict.LATE, "2 queued past the start deadline")


# -- parked, paused ------------------------------------------------------------------------------
def test_parked_when_the_dispatcher_parked_it() -> None:
    s = replace(HEALTHY, parked_at=NOW, park_error="bad zone")
    assert health.judge(s) == health.Health(Verdict.PARKED, "parked: bad zone")


def test_paused_when_an_operator_paused_it() -> None:
    s = replace(HEALTHY, paused=True, next_run_at=NOW - timedelta(hours=1))
    assert health.judge(s) == health.Health(Verdict.PAUSED, "paused")


def test_the_rules_are_tried_in_order_and_the_first_that_holds_decides() -> None:
    everything = replace(
        HEALTHY,
        recent_attempts=("failed",) * 3,
        lost=(skip("parked"),),
        queued_past_deadline=1,
        parked_at=NOW,
        park_error="x",
        paused=True,
    )
    seen = []
    s = everything
    for verdict in Verdict:
        seen.append(health.judge(s).verdict)
        s = replace(
            s,
            **{
                Verdict.FAILING: {"recent_attempts": ()},
                Verdict.LOSING_FIRINGS: {"lost": ()},
                Verdict.LATE: {"queued_past_deadline": 0},
                Verdict.PARKED: {"parked_at": None, "park_error": None},
                Verdict.PAUSED: {"paused": False},
                Verdict.HEALTHY: {},
            }[verdict],
        )
    assert seen == list(Verdict)
    assert [health.RANK[v] for v in seen] == sorted(health.RANK.values())


# -- counts, owed, cursor ------------------------------------------------------------------------
def test_the_counts_take_each_firing_of_a_summary_row_and_outcomes_of_every_trigger() -> None:
    counts = health.count(
        [
            Group("schedule", "success", None, "forbid", 5, 5, NOW - timedelta(minutes=3)),
            Group("manual", "success", None, "forbid", 1, 1, NOW - timedelta(minutes=1)),
            Group("schedule", "failed", None, "forbid", 2, 2, NOW - timedelta(minutes=2)),
            Group("schedule", "timeout", None, "forbid", 1, 1, NOW - timedelta(minutes=9)),
            Group("schedule", "skipped", "misfired", "forbid", 1, 100),
            Group("schedule", "expired", "start_deadline", "forbid", 1, 1),
            Group("schedule", "queued", None, "forbid", 1, 1),
        ]
    )
    assert (counts.firings, counts.ran, counts.succeeded, counts.failed, counts.timed_out) == (
        110,
        9,
        6,
        2,
        1,
    )
    assert counts.skipped == {"misfired": 100}
    assert counts.expired == {"start_deadline": 1}
    assert counts.active == 1
    assert counts.last_success_at == NOW - timedelta(minutes=1)
    assert counts.last_failure_at == NOW - timedelta(minutes=2)


def test_firings_owed_are_counted_from_next_run_at_clipped_to_the_window() -> None:
    every_second = IntervalSchedule(every=timedelta(seconds=1), anchor=utc(2030, 1, 1))
    behind = replace(HEALTHY, next_run_at=NOW - timedelta(hours=30))
    assert health.owed_firings(every_second, behind, NOW - timedelta(hours=24)) == (86_400, True)
    owed = replace(HEALTHY, next_run_at=NOW - timedelta(seconds=9))
    assert health.owed_firings(every_second, owed, NOW - timedelta(hours=24)) == (10, True)
    assert health.owed_firings(every_second, HEALTHY, NOW - timedelta(hours=24)) == (0, True)
    assert health.owed_firings(every_second, replace(owed, paused=True), NOW) == (0, True)


def test_a_cursor_names_the_rank_and_name_and_anything_else_is_refused() -> None:
    late = health.Health(Verdict.LATE, "x")
    assert health.after_cursor(health.cursor(late, "a:b")) == (2, "a:b")
    for text in ("", "zz", "9:x", "x:y", "٣:x"):
        with pytest.raises(ValueError, match="not a cursor"):
            health.after_cursor(text)
