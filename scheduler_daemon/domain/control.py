"""What an operator's change does to a task (pure): update, pause, resume, trigger, delete.

Each rule takes the locked task and the database's now and returns a plan; the Client carries it
out in one transaction. A change the task's state refuses comes back as a `Refusal` (the Client
raises it as a Conflict); a change that is malformed raises InvalidTask.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from scheduler_daemon.domain import limit
from scheduler_daemon.domain.instance import Instance
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

# The schema revision that added `task.in_process` (migration 0020_task_in_process): a build
# whose head is before it runs an in-process task in a worker process, or not at all.
IN_PROCESS_SINCE = "0020"
# The schema revision that added notifications (migration 0025_notification_outbox): a build
# whose head is before it records no notification, so a task's or the fleet's notify URL is
# refused while one is registered (ADR 0016, as ADR 0010).
NOTIFY_SINCE = "0025"
# The schema revision that added `task.backoff_max` (migration 0028_exponential_backoff): a build
# whose head is before it retries such a task after the fixed `backoff` every time.
BACKOFF_MAX_SINCE = "0028"
# The schema revision that added `task.spread` (migration 0029_spread): a build whose head is
# before it queues a spread task's firings at their nominal time and expires them by it.
SPREAD_SINCE = "0029"
# The schema revision that added `--overlap replace` (migration 0031_overlap_replace): a build
# whose head is before it would park such a task and claim its firing beside its predecessor.
REPLACE_SINCE = "0031"
# The schema revision from which a cron's `#`, `L5` and `W` beside a restricted other day field
# follow "either day field matches" (migration 0026_either_day_field): a build before it fires
# such an expression as croniter reads it, both fields matching, so it is refused while one is
# registered (ADR 0019, as ADR 0010).
EITHER_DAYS_SINCE = "0026"
# The schema revision that came with the fleet's notify headers (migration
# 0030_notification_headers_and_firings): a build whose head is before it POSTs to the fleet's
# notify-url without them, so `config set notify-headers` is refused while one is registered.
NOTIFY_HEADERS_SINCE = "0030"
# The schema revision that added `task.paused_until` (migration 0033_pause_until): a build whose
# head is before it never reads it, so it would never end such a pause; `tasks pause --until` is
# refused while one is registered (ADR 0024, as ADR 0010).
PAUSE_UNTIL_SINCE = "0033"
# The schema revision that added `occurrence.args` (migration 0034_trigger_args): a build whose
# head is before it claims through sd_claim_launch_v5 and runs the job without them, so a
# trigger with arguments is refused while one is registered (ADR 0024, as ADR 0010).
ARGS_SINCE = "0034"
# The changes that move a task's schedule: its due, undispatched firings are recorded first.
SCHEDULE_FIELDS = frozenset({"cron", "every", "at", "timezone", "dst_gap", "dst_overlap"})


@dataclass(frozen=True)
class Refusal:
    """A change the task's current state does not allow; `message` is one line."""

    message: str


def refuse_beside_older(
    change: str, older: Sequence[Instance], *, since: str, because: str
) -> Refusal | None:
    """A change an older build would misexecute (`change`, e.g. "task 'x' cannot run
    in-process"): refused, naming them, while `older` (the registered instances of builds
    before revision `since`) is not empty; `because` says what they would do (ADR 0010)."""
    if not older:
        return None
    names = ", ".join(
        f"{i.id} (host {i.hostname}, version {i.version}, schema {i.schema_revision})"
        for i in older
    )
    return Refusal(
        f"{change} while instance(s) {names} of builds before schema {since} are registered "
        f"({because}); roll them to this build, or wait until a stopped one's row expires"
    )


def plan_in_process(task_name: str, older: Sequence[Instance]) -> Refusal | None:
    """Whether a task may be made in-process now (ADR 0010)."""
    return refuse_beside_older(
        f"task '{task_name}' cannot run in-process",
        older,
        since=IN_PROCESS_SINCE,
        because="they would run it in a worker process",
    )


def plan_notify(subject: str, older: Sequence[Instance]) -> Refusal | None:
    """Whether `subject` (a task, or the fleet's defaults) may be given notifications now
    (ADR 0016)."""
    return refuse_beside_older(
        f"{subject} cannot have notifications",
        older,
        since=NOTIFY_SINCE,
        because="they would record none",
    )


# Task fields a build before the revision that added them would misexecute: the option, that
# revision, and what such a build would do (ADR 0010's refusal, `plan_new_field`).
NEW_FIELDS = {
    "backoff_max": (
        "--backoff-max",
        BACKOFF_MAX_SINCE,
        "they would retry it after the fixed --backoff every time",
    ),
    "spread": ("--spread", SPREAD_SINCE, "they would start its firings at their nominal time"),
}


# Values of existing task fields that a build before the revision that added them would
# misexecute, keyed "field=value": refused as NEW_FIELDS are (`new_settings`, ADR 0022).
NEW_VALUES = {
    f"overlap={OverlapPolicy.REPLACE}": (
        "--overlap replace",
        REPLACE_SINCE,
        "their dispatch would park it and their claim start a firing beside its predecessor",
    ),
}


def new_settings(given: Mapping[str, Any]) -> list[str]:
    """The keys of NEW_FIELDS that `given` (a spec's fields, or an update's changes) sets, and
    of NEW_VALUES whose value it sets; clearing a field (None) is never refused."""
    fields = [field for field in NEW_FIELDS if given.get(field) is not None]
    values = [key for key in NEW_VALUES if str(given.get(key.split("=")[0])) == key.split("=")[1]]
    return fields + values


def setting_since(key: str) -> str:
    """The revision that added a key of NEW_FIELDS or NEW_VALUES."""
    return {**NEW_FIELDS, **NEW_VALUES}[key][1]


def plan_new_field(field: str, task_name: str, older: Sequence[Instance]) -> Refusal | None:
    """Whether a task may be given `field` (a key of NEW_FIELDS or NEW_VALUES) now, with `older`
    the registered instances of builds before the revision that added it."""
    option, since, because = {**NEW_FIELDS, **NEW_VALUES}[field]
    return refuse_beside_older(
        f"task '{task_name}' cannot have {option}", older, since=since, because=because
    )


def plan_either_days(task_name: str, cron: str, older: Sequence[Instance]) -> Refusal | None:
    """Whether a task may be given `cron`, which restricts both day fields with `#`, `L5` or
    `W` in one of them (cron_syntax.splits_day_fields), now (ADR 0019)."""
    return refuse_beside_older(
        f"task '{task_name}' cannot have --cron {cron!r}",
        older,
        since=EITHER_DAYS_SINCE,
        because="they fire it only on days both day fields match, or never: "
        "not on a day either one matches",
    )


def plan_fleet_notify_headers(older: Sequence[Instance]) -> Refusal | None:
    """Whether the fleet may be given notify headers now (ADR 0016)."""
    return refuse_beside_older(
        "the fleet cannot have notify-headers",
        older,
        since=NOTIFY_HEADERS_SINCE,
        because="they would POST to its notify-url without them",
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


def plan_pause_until(task_name: str, older: Sequence[Instance]) -> Refusal | None:
    """Whether a task may be paused until an instant now (ADR 0024)."""
    return refuse_beside_older(
        f"task '{task_name}' cannot be paused --until an instant",
        older,
        since=PAUSE_UNTIL_SINCE,
        because="they would never resume it",
    )


def plan_trigger_args(task_name: str, older: Sequence[Instance]) -> Refusal | None:
    """Whether task `task_name` may be triggered with arguments now (ADR 0024)."""
    return refuse_beside_older(
        f"task '{task_name}' cannot be triggered with arguments",
        older,
        since=ARGS_SINCE,
        because="they would run it without them",
    )


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
