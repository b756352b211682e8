"""`--overlap replace` in the pure rules: a dispatch pass keeps only its newest queued firing (the
others skipped, `replaced`) whatever is active; `tasks trigger --count` is refused for it."""

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from scheduler_daemon.domain import control
from scheduler_daemon.domain.misfire import plan_dispatch
from scheduler_daemon.domain.schedule.fixed import IntervalSchedule
from tests.unit.test_control import _task

T0 = datetime(2026, 1, 1, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def _plan(late: int, *, misfire: str, active: bool):
    return plan_dispatch(
        IntervalSchedule(MINUTE, T0),
        next_run_at=T0,
        now=T0 + late * MINUTE,
        misfire=misfire,
        misfire_grace=timedelta(seconds=60),
        catchup_limit=None,
        catchup_window=None,
        overlap="replace",
        active=active,
    )


@given(
    late=st.integers(0, 400),
    misfire=st.sampled_from(["skip", "run_once", "run_all"]),
    active=st.booleans(),
)
def test_a_replace_pass_queues_at_most_its_newest_firing(late, misfire, active) -> None:
    plan = _plan(late, misfire=misfire, active=active)
    queued = [f for f in plan.firings if f.status == "queued"]
    assert len(queued) == 1  # a fresh firing is always due: it is the one queued
    assert queued[0].scheduled_for == max(f.scheduled_for for f in plan.firings)
    # Under run_all every older firing was queued before: each is now replaced, not lost else.
    if misfire == "run_all":
        assert {f.reason for f in plan.firings if f.status != "queued"} <= {
            "replaced",
            "catchup_limit",
        }


def test_run_all_with_replace_records_the_older_firings_replaced() -> None:
    plan = _plan(3, misfire="run_all", active=True)
    assert [(f.status, f.reason) for f in plan.firings] == [
        ("skipped", "replaced"),
        ("skipped", "replaced"),
        ("skipped", "replaced"),
        ("queued", None),
    ]


def test_trigger_count_is_refused_for_a_replace_task() -> None:
    task = _task(overlap="replace")
    refusal = control.plan_trigger_many(task, 3)
    assert isinstance(refusal, control.Refusal)
    assert "--overlap replace" in refusal.message
    assert "would replace all but one" in refusal.message
