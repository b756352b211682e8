"""The operator rules the Client carries out (domain/control.py): pure plans from a locked task."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from scheduler_daemon.domain import control
from scheduler_daemon.domain.argument import (
    InvalidArgument,
    at_least_one,
    fleet_setting,
    status_filter,
)
from scheduler_daemon.domain.status import OccurrenceStatus, OverlapPolicy, TaskStatus
from scheduler_daemon.domain.task import InvalidTask, TaskRecord, TaskSpec
from tests.support import task_record

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _task(*, status: str = TaskStatus.ENABLED, next_run_at: datetime | None = None, **spec: object):
    definition = TaskSpec(
        **{"name": "t", "executor": "shell", "target": "true", "cron": "*/5 * * * *", **spec}  # type: ignore[arg-type]
    )
    return task_record(definition, status=status, next_run_at=next_run_at, created_at=NOW)


def _once(status: str) -> TaskRecord:
    return _task(status=status, cron=None, at=NOW + timedelta(hours=1))


def test_an_update_of_name_anchor_or_an_unknown_field_is_refused_before_any_read() -> None:
    for changes in ({"name": "x"}, {"anchor": NOW}, {"colour": "red"}):
        with pytest.raises(InvalidTask, match="cannot update"):
            control.check_update(changes)
    control.check_update({"paused": True, "cron": "* * * * *"})


def test_a_new_instant_for_a_fired_one_shot_is_a_refusal_not_an_update() -> None:
    plan = control.plan_update(_once(TaskStatus.COMPLETED), {"at": NOW + timedelta(days=1)}, NOW)
    assert plan == control.Refusal("task 't' already fired (completed); add a new task")


def test_a_reschedule_records_the_old_schedules_due_firings_and_plans_from_now() -> None:
    task = _task(next_run_at=NOW - timedelta(minutes=10))  # 10:50, 10:55, 11:00 are owed
    plan = control.plan_update(task, {"cron": "0 * * * *"}, NOW)
    assert isinstance(plan, control.UpdatePlan)
    (owed,) = plan.owed
    assert (owed.reason, owed.firing_count, owed.status) == ("rescheduled", 3, "skipped")
    assert plan.next_run_at == NOW + timedelta(hours=1)
    assert plan.unpark


def test_an_update_that_keeps_the_schedule_keeps_the_next_firing() -> None:
    task = _task(next_run_at=NOW - timedelta(minutes=10))
    plan = control.plan_update(task, {"max_attempts": 3}, NOW)
    assert isinstance(plan, control.UpdatePlan)
    assert (plan.owed, plan.next_run_at, plan.unpark) == ((), task.next_run_at, False)
    assert plan.spec.max_attempts == 3


def test_a_parked_task_is_planned_afresh_and_its_firings_counted_by_the_new_schedule() -> None:
    task = replace(_task(next_run_at=NOW - timedelta(minutes=10)), parked_at=NOW)
    plan = control.plan_update(task, {"max_attempts": 2, "cron": "*/10 * * * *"}, NOW)
    assert isinstance(plan, control.UpdatePlan)
    assert [(f.reason, f.firing_count) for f in plan.owed] == [("parked", 2)]
    assert plan.unpark


def test_a_new_every_is_anchored_at_the_database_now() -> None:
    plan = control.plan_update(_task(), {"every": timedelta(minutes=7)}, NOW)
    assert isinstance(plan, control.UpdatePlan)
    assert plan.spec.anchor == NOW
    assert plan.next_run_at == NOW + timedelta(minutes=7)


def test_pause_skips_what_is_due_and_cancels_a_one_shot_whose_firing_it_skipped() -> None:
    due = _task(next_run_at=NOW - timedelta(minutes=1))
    plan = control.plan_pause(due, NOW)
    assert [f.reason for f in plan.owed] == ["paused"]
    assert (plan.next_run_at, plan.status) == (NOW + timedelta(minutes=5), TaskStatus.ENABLED)
    once = replace(_once(TaskStatus.ENABLED), next_run_at=NOW - timedelta(minutes=1))
    once = replace(once, spec=replace(once.spec, at=NOW - timedelta(minutes=1)))
    assert control.plan_pause(once, NOW).status == TaskStatus.CANCELLED
    not_due = _task(next_run_at=NOW + timedelta(minutes=1))
    assert control.plan_pause(not_due, NOW) == control.PausePlan((), not_due.next_run_at, "enabled")


def test_nothing_is_owed_by_a_paused_a_fired_or_a_deleted_task() -> None:
    due = NOW - timedelta(minutes=1)
    for task in (
        _task(next_run_at=due, paused=True),
        _task(next_run_at=due, status=TaskStatus.RUNNING),
        replace(_task(next_run_at=due), deleted_at=NOW),
    ):
        assert control.owed_firings(task, task.spec, NOW, "paused") == ()


def test_resume_plans_from_now_and_cancels_a_one_shot_whose_instant_passed() -> None:
    assert control.plan_resume(_task(), NOW) is None  # not paused: left as it is
    plan = control.plan_resume(_task(paused=True, next_run_at=NOW - timedelta(hours=1)), NOW)
    assert plan == control.ResumePlan(NOW + timedelta(minutes=5), TaskStatus.ENABLED)
    passed = _once(TaskStatus.ENABLED)
    passed = replace(passed, spec=replace(passed.spec, paused=True, at=NOW - timedelta(hours=1)))
    assert control.plan_resume(passed, NOW) == control.ResumePlan(
        None, TaskStatus.CANCELLED, "its instant passed while the task was paused"
    )


def test_a_trigger_follows_the_overlap_policy() -> None:
    # A finished one-shot queues like any task: its status is its firings' to decide (issue 31).
    assert control.plan_trigger(_task(), active=1) == control.TriggerPlan(
        OccurrenceStatus.SKIPPED, "overlap"
    )
    allow = _task(overlap=OverlapPolicy.ALLOW)
    assert control.plan_trigger(allow, active=1).status == OccurrenceStatus.QUEUED
    assert control.plan_trigger(_once(TaskStatus.FAILED), active=0) == control.TriggerPlan(
        OccurrenceStatus.QUEUED, None
    )


def test_delete_is_refused_while_active_unless_forced_and_records_what_is_owed() -> None:
    task = _task(next_run_at=NOW - timedelta(minutes=1))
    refused = control.plan_delete(task, NOW, active=2, force=False)
    assert refused == control.Refusal("task 't' has 2 active occurrence(s); --force cancels them")
    plan = control.plan_delete(task, NOW, active=2, force=True)
    assert isinstance(plan, control.DeletePlan)
    assert [f.reason for f in plan.owed] == ["deleted"]
    assert control.plan_delete(replace(task, parked_at=NOW), NOW, active=0, force=False) == (
        control.DeletePlan(())
    )


def test_arguments_that_are_not_about_a_task_raise_invalid_argument() -> None:
    with pytest.raises(InvalidArgument, match=r"^--limit must be at least 1$"):
        at_least_one(0, "--limit")
    with pytest.raises(InvalidArgument, match="unknown status 'done'"):
        status_filter("done")
    assert status_filter("skipped") == "skipped"
    with pytest.raises(InvalidArgument, match="unknown setting 'x'"):
        fleet_setting("x", "1")
    with pytest.raises(InvalidArgument, match="whole number of at least 1, got '0'"):
        fleet_setting("max-concurrent-runs", "0")
    assert fleet_setting("max-concurrent-runs", "4") == ("max_concurrent_runs", 4)
    assert not issubclass(InvalidArgument, InvalidTask)
