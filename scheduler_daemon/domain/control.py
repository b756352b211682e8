"""What an operator's change does to a task (pure): update, pause, resume, trigger, delete.

Each rule takes the locked task and the database's now and returns a plan; the Client carries it
out in one transaction. A change the task's state refuses comes back as a `Refusal` (the Client
raises it as a Conflict); a change that is malformed raises InvalidTask.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from datetime import datetime, timedelta
from typing import Any

from scheduler_daemon.domain import limit
from scheduler_daemon.domain.misfire import Firing, skip_past_due
from scheduler_daemon.domain.status import (
    LostReason,
    OccurrenceStatus,
    OverlapPolicy,
    ScheduleKind,
    TaskStatus,
)
from scheduler_daemon.domain.task import InvalidTask, TaskRecord, TaskSpec

_MICROSECOND = timedelta(microseconds=1)

# The changes that move a task's schedule: its due, undispatched firings are recorded first.
SCHEDULE_FIELDS = frozenset({"cron", "every", "at", "timezone", "dst_gap", "dst_overlap"})


@dataclass(frozen=True)
class Refusal:
    """A change the task's current state does not allow; `message` is one line."""

    message: str


NEEDS: dict[str, str] = {}
"""The older-build registry (ADR 0029): a feature, by name, and the revision (migration id) of
the expand step that introduced it. A feature is a TaskSpec field (a task whose definition sets
it to other than its default needs a build whose chain has the revision: while an instance of
an older build is registered, the task and its occurrences are marked `needs_build`, which that
build's dispatch, claim and reconciler pass over) or a fleet setting's stored key (`config set`
of it is refused while such an instance is registered: a fleet setting cannot be marked).
Empty: nothing is released, so no build is older than a feature yet. A feature of a later
release registers itself here in the commit that adds its expand step: `"field": "0039"`."""


def needed_revision(features: Iterable[str], chain: Sequence[str]) -> str | None:
    """The newest revision, in the order of `chain` (this build's revisions; one it does not
    list counts as newer), that `features` need by NEEDS; None when none is registered."""
    needed = {NEEDS[feature] for feature in features if feature in NEEDS}
    order = {revision: i for i, revision in enumerate(chain)}
    return max(needed, key=lambda r: (order.get(r, len(chain)), r)) if needed else None


def task_needs(spec: TaskSpec, chain: Sequence[str]) -> str | None:
    """The revision a task's definition needs (ADR 0029): the newest of its registered fields
    set to other than their default; None when any build may run it."""
    used = [
        f.name
        for f in fields(TaskSpec)
        if f.name in NEEDS and (f.default is MISSING or getattr(spec, f.name) != f.default)
    ]
    return needed_revision(used, chain)


def older_build_refusal(feature: str, revision: str, instances: Sequence[str]) -> Refusal:
    """A fleet setting (`feature`) refused while instances of builds before `revision` run."""
    return Refusal(
        f"{feature} needs builds from schema {revision} on, and instance(s) "
        f"{', '.join(instances)} of an older build are registered: roll them to this build "
        "first (or wait until a stopped one's row expires)"
    )


def owed_firings(
    task: TaskRecord, spec: TaskSpec, now: datetime, reason: str
) -> tuple[Firing, ...]:
    """The task's due, undispatched firings, as the skipped rows (`reason`) an operator's change
    records before it moves the task past them, counted with `spec`'s schedule. Nothing is owed
    while paused, by a fired one-shot or by a deleted task."""
    if task.spec.paused or task.status != TaskStatus.ENABLED or task.deleted_at is not None:
        return ()
    return skip_past_due(spec.schedule(), next_run_at=task.next_run_at, now=now, reason=reason)


@dataclass(frozen=True)
class UpdatePlan:
    spec: TaskSpec
    owed: tuple[Firing, ...]  # recorded as skipped before the update
    next_run_at: datetime | None
    status: str
    unpark: bool  # the schedule moved or the task was parked: it is planned afresh
    skipped: Firing | None = None  # a local --at a DST gap swallows: recorded after the update


def skipped_one_shot(spec: TaskSpec) -> Firing:
    """The one firing of a one-shot whose local `--at` a DST gap swallows under `--dst-gap
    skip` (`TaskSpec.resolved`), recorded skipped when the task is written: it never fires, and
    it ends `cancelled` as a one-shot whose firing was skipped does (ADR 0006, ADR 0019). At the
    gap's end, the instant the task holds, so `audit` finds its row."""
    assert spec.at is not None
    assert spec.at.tzinfo is not None
    return Firing(spec.at, OccurrenceStatus.SKIPPED, LostReason.DST_GAP)


def check_update(changes: Mapping[str, Any]) -> None:
    """The fields `tasks update` may change (raises InvalidTask), before any database read."""
    unknown = set(changes) - set(TaskSpec.__dataclass_fields__) - {"paused"}
    if unknown or "name" in changes or "anchor" in changes:
        raise InvalidTask(f"cannot update {', '.join(sorted(unknown | {'name'} & set(changes)))}")


def plan_update(
    task: TaskRecord, changes: Mapping[str, Any], now: datetime
) -> UpdatePlan | Refusal:
    """A definition change, effective from the next firing. A new `every` is anchored at now.
    Rescheduling (or editing a parked task) records the firings the old definition owed,
    counted by the old schedule (by the new one for a parked task: its old one could not be
    planned), and plans the next firing from now."""
    if (
        "at" in changes
        and task.spec.schedule_kind == ScheduleKind.ONCE
        and task.status != TaskStatus.ENABLED
    ):
        return Refusal(f"task '{task.name}' already fired ({task.status}); add a new task")
    spec = task.spec.with_changes(**changes)
    if changes.get("every") is not None:
        spec = spec.with_changes(anchor=now)
    spec.validate(now, new_instant="at" in changes)
    # A local `--at` is read in the zone and by the policies the task has after the change.
    spec, skips = spec.resolved()
    rescheduled = bool(SCHEDULE_FIELDS & set(changes))
    owed: tuple[Firing, ...] = ()
    next_run_at = task.next_run_at
    if rescheduled or task.parked_at is not None:
        if task.parked_at is not None:
            owed = owed_firings(task, spec, now, LostReason.PARKED)
        else:
            owed = owed_firings(task, task.spec, now, LostReason.RESCHEDULED)
        next_run_at = None if skips else spec.schedule().next_after(now)
    status = TaskStatus.ENABLED if spec.schedule_kind != ScheduleKind.ONCE else task.status
    if status != TaskStatus.ENABLED:
        next_run_at = None  # a one-shot that fired (or whose firing was skipped) fires no more
    return UpdatePlan(
        spec,
        owed,
        next_run_at,
        status,
        rescheduled or task.parked_at is not None,
        skipped_one_shot(spec) if skips else None,
    )


@dataclass(frozen=True)
class PausePlan:
    owed: tuple[Firing, ...]  # recorded as skipped (`paused`): nothing is owed while paused
    next_run_at: datetime | None
    status: str
    until: datetime | None = None  # the instant the pause ends by itself; None: by an operator


def pause_end(until: datetime | timedelta, now: datetime) -> datetime:
    """`--until` as an instant on the database clock: a duration from `now`, or an instant with
    an offset; refused (InvalidTask, one line) unless it is after `now`, and at most
    limit.MAX_DURATION after it (what a duration option takes; PostgreSQL and Python hold it)."""
    if isinstance(until, timedelta):
        if until > limit.MAX_DURATION:
            raise InvalidTask(f"--until {until} is longer than {limit.MAX_DURATION.days} days")
        end = now + until
    elif until.tzinfo is None:
        raise InvalidTask(f"--until {until.isoformat()} needs an offset (Z, +02:00) or a duration")
    else:
        end = until
    if end <= now:
        raise InvalidTask(
            f"--until {end.isoformat()} is not after now ({now.isoformat()}, database clock)"
        )
    if end - now > limit.MAX_DURATION:
        raise InvalidTask(
            f"--until {end.isoformat()} is more than {limit.MAX_DURATION.days} days after now"
        )
    return end


def plan_pause(task: TaskRecord, now: datetime, until: datetime | None = None) -> PausePlan:
    """Stops firing. Firings already due are recorded as skipped and the next firing is planned
    from now; a one-shot whose one firing was skipped is cancelled, as the dispatcher does.
    `until` (after `now`, `pause_end`): the pause ends by itself then; None clears a pending
    end."""
    owed = (
        () if task.parked_at is not None else owed_firings(task, task.spec, now, LostReason.PAUSED)
    )
    if not owed:
        return PausePlan(owed, task.next_run_at, task.status, until)
    once = task.spec.schedule_kind == ScheduleKind.ONCE
    status = TaskStatus.CANCELLED if once else task.status
    return PausePlan(owed, task.spec.schedule().next_after(now), status, until)


@dataclass(frozen=True)
class ResumePlan:
    next_run_at: datetime | None
    status: str
    error: str | None = None  # shown on the task when resuming ends it


def plan_resume(task: TaskRecord, now: datetime, *, pending: bool = False) -> ResumePlan | None:
    """Unpauses, the next firing from now (paused firings are not owed; a pending resume's
    from its instant); a one-shot whose instant passed meanwhile is cancelled. None: the task
    is not paused, nothing changes (its due firings are still owed). `pending`: the resume a
    `--until` pause is owed at its instant, None unless that instant has passed on the
    database clock (the reconciler re-checks what its scan saw, so an operator's resume or
    pause in between wins)."""
    if not task.spec.paused:
        return None
    if pending and (task.paused_until is None or task.paused_until > now):
        return None
    if task.status != TaskStatus.ENABLED:  # a one-shot past its firing: nothing to plan
        return ResumePlan(None, task.status)
    # A pending resume plans from its instant, not from the pass that carries it out (a poll
    # later): the pause covers the time before it, and a firing at it or after it is owed,
    # left to the misfire policy as any due firing is.
    start = task.paused_until - _MICROSECOND if pending and task.paused_until else now
    next_run_at = task.spec.schedule().next_after(start)
    if (
        task.spec.schedule_kind == ScheduleKind.ONCE
        and task.status == TaskStatus.ENABLED
        and next_run_at is None
    ):
        return ResumePlan(
            None, TaskStatus.CANCELLED, "its instant passed while the task was paused"
        )
    return ResumePlan(next_run_at, task.status)


@dataclass(frozen=True)
class TriggerPlan:
    status: OccurrenceStatus  # of the manual occurrence: queued, or skipped for `reason`
    reason: str | None


def plan_trigger(task: TaskRecord, *, active: int) -> TriggerPlan:
    """A manual occurrence now, by the task's overlap policy (`active`: its active occurrences);
    it runs even while the task is paused."""
    if task.spec.overlap == OverlapPolicy.FORBID and active:
        return TriggerPlan(OccurrenceStatus.SKIPPED, LostReason.OVERLAP)
    return TriggerPlan(OccurrenceStatus.QUEUED, None)


def plan_trigger_many(task: TaskRecord, count: int) -> TriggerPlan | Refusal:
    """`count` manual occurrences queued at once: refused for a `forbid` task, where all but one
    would be skipped."""
    if task.spec.overlap in (OverlapPolicy.FORBID, OverlapPolicy.REPLACE):
        lost = "skip" if task.spec.overlap == OverlapPolicy.FORBID else "replace"
        return Refusal(
            f"task '{task.name}' has --overlap {task.spec.overlap} (one active occurrence at a "
            f"time): --count {count} would {lost} all but one; use --overlap queue or allow"
        )
    return plan_trigger(task, active=0)


@dataclass(frozen=True)
class DeletePlan:
    owed: tuple[Firing, ...]  # recorded as skipped (`deleted`)


def plan_delete(
    task: TaskRecord, now: datetime, *, active: int, force: bool
) -> DeletePlan | Refusal:
    """Refused while the task has active occurrences unless `force` (which cancels them)."""
    if active and not force:
        return Refusal(
            f"task '{task.name}' has {active} active occurrence(s); --force cancels them"
        )
    owed = (
        () if task.parked_at is not None else owed_firings(task, task.spec, now, LostReason.DELETED)
    )
    return DeletePlan(owed)
