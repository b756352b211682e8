"""Dispatch planning: which due firings of one task a dispatch pass queues, and which it skips why.

Pure code: the caller passes the database clock as `now`. The rules (misfire policies, overlap,
the per-pass row bound) are explained for operators in docs/explanation/schedules.md.

The cost of a pass does not grow with the length of an outage: the plan needs only the newest
`2 * MAX_FIRING_ROWS` due firings one by one; everything older is skipped and summarised by
counting (arithmetic for intervals, enumeration up to `COUNT_CAP` for cron).
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import groupby, pairwise

from scheduler_daemon.domain.calendar import Exclusion
from scheduler_daemon.domain.schedule.base import Schedule
from scheduler_daemon.domain.status import (
    LostReason,
    MisfirePolicy,
    OccurrenceStatus,
    OverlapPolicy,
)

# One pass writes at most this many queued rows and this many individual skipped rows; older
# skipped firings are collapsed into one summary row per reason.
MAX_FIRING_ROWS = 100
# A cron summary row counts its firings one by one up to this many; beyond, count_exact is False.
COUNT_CAP = 100_000

_TAIL = 2 * MAX_FIRING_ROWS
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class Firing:
    """One row a pass writes: a queued or skipped firing, or a summary of skipped ones."""

    scheduled_for: datetime
    status: str
    reason: str | None = None
    firing_count: int = 1
    last_scheduled_for: datetime | None = None
    count_exact: bool = True


@dataclass(frozen=True)
class DispatchPlan:
    """What a pass writes for one task, and the task's next due time (None: no more firings)."""

    firings: tuple[Firing, ...]
    next_run_at: datetime | None


@dataclass(frozen=True)
class _Policy:
    now: datetime
    misfire: str
    grace: timedelta
    catchup_limit: int | None
    catchup_window: timedelta | None
    overlap: str
    active: bool

    def missed(self, f: datetime) -> bool:
        return self.now - f > self.grace

    def outside_window(self, f: datetime) -> bool:
        return self.catchup_window is not None and self.now - f > self.catchup_window


@dataclass(frozen=True)
class _Run:
    """Consecutive skipped firings with one reason, counted rather than listed."""

    first: datetime
    last: datetime
    reason: str
    count: int
    exact: bool


def plan_dispatch(
    schedule: Schedule,
    *,
    next_run_at: datetime,
    now: datetime,
    misfire: str,
    misfire_grace: timedelta,
    catchup_limit: int | None,
    catchup_window: timedelta | None,
    overlap: str,
    active: bool,
    exclusion: Exclusion | None = None,
) -> DispatchPlan:
    """Plan the firings due at `now`: `next_run_at` and every fire time after it up to `now`.
    With `exclusion` (the task's calendars, ADR 0025), a due firing on an excluded date is
    recorded `excluded` and never queued; the other firings are decided as if it were not
    there. Consecutive excluded firings are one row; nothing is recorded before it is due
    (the dispatcher extends the row of a run that goes on across passes, so an every-minute
    task over a holiday has one row, not 1,440)."""
    policy = _Policy(now, misfire, misfire_grace, catchup_limit, catchup_window, overlap, active)
    _validate(policy, next_run_at)
    if next_run_at > now:
        return DispatchPlan((), next_run_at)
    tail = list(schedule.fire_times_reversed(now, since=next_run_at, limit=_TAIL))
    complete = len(tail) < _TAIL or tail[-1] == next_run_at
    if complete and (not tail or tail[-1] != next_run_at):
        tail.append(next_run_at)
    tail.reverse()
    head = [] if complete else _head_runs(schedule, policy, next_run_at, tail[0])
    if exclusion is None:
        return DispatchPlan(_rows(head, _decide(tail, policy)), schedule.next_after(now))
    return _excluding(schedule, exclusion, policy, head, tail)


def _excluding(
    schedule: Schedule,
    exclusion: Exclusion,
    policy: _Policy,
    head: list[_Run],
    tail: list[datetime],
) -> DispatchPlan:
    """plan_dispatch with calendars: the excluded firings of the newest due ones as runs (the
    older ones, counted rather than listed, keep their misfire reason: they never run either)."""
    excluded = [exclusion.excludes(f) for f in tail]
    rows = list(
        _rows(head, _decide([f for f, x in zip(tail, excluded, strict=True) if not x], policy))
    )
    for is_excluded, run in groupby(zip(tail, excluded, strict=True), key=lambda fx: fx[1]):
        if is_excluded:
            firings = [f for f, _ in run]
            rows.append(_excluded_row(firings[0], firings[-1], len(firings)))
    rows.sort(key=lambda row: row.scheduled_for)
    return DispatchPlan(tuple(rows), schedule.next_after(policy.now))


def _excluded_row(first: datetime, last: datetime, count: int) -> Firing:
    if count == 1:
        return Firing(first, OccurrenceStatus.SKIPPED, LostReason.EXCLUDED)
    return Firing(first, OccurrenceStatus.SKIPPED, LostReason.EXCLUDED, count, last)


def _validate(policy: _Policy, next_run_at: datetime) -> None:
    if policy.misfire not in tuple(MisfirePolicy):
        raise ValueError(
            f"invalid misfire policy {policy.misfire!r}: use {', '.join(MisfirePolicy)}"
        )
    if policy.overlap not in tuple(OverlapPolicy):
        raise ValueError(
            f"invalid overlap policy {policy.overlap!r}: use {', '.join(OverlapPolicy)}"
        )
    if policy.grace < timedelta(0):
        raise ValueError("misfire_grace must not be negative")
    if policy.catchup_limit is not None and policy.catchup_limit < 0:
        raise ValueError("catchup_limit must not be negative")
    if policy.catchup_window is not None and policy.catchup_window < timedelta(0):
        raise ValueError("catchup_window must not be negative")
    for name, t in (("now", policy.now), ("next_run_at", next_run_at)):
        if t.tzinfo is None or t.utcoffset() is None:
            raise ValueError(f"{name} must be timezone-aware")


def _decide(due: list[datetime], policy: _Policy) -> list[tuple[datetime, str | None]]:
    """(firing, skip reason or None for queued) for the newest due firings, oldest first.

    Every rule looks only at newer firings, except `forbid`'s "the first one runs", and every
    queued firing is among the newest MAX_FIRING_ROWS; so deciding the newest firings alone
    gives the same answer as deciding them all.
    """
    reasons: list[str | None] = [None] * len(due)
    missed = [policy.missed(f) for f in due]
    fresh = not all(missed)
    in_window = 0
    for i in reversed(range(len(due))):
        if not missed[i]:
            continue
        if policy.misfire == MisfirePolicy.SKIP:
            reasons[i] = LostReason.MISFIRED
        elif policy.misfire == MisfirePolicy.RUN_ONCE:
            newest_missed = i == len(due) - 1 or not missed[i + 1]
            reasons[i] = LostReason.COALESCED if fresh or not newest_missed else None
        elif policy.outside_window(due[i]):
            reasons[i] = LostReason.CATCHUP_WINDOW
        else:
            limit = policy.catchup_limit
            reasons[i] = (
                LostReason.CATCHUP_LIMIT if limit is not None and in_window >= limit else None
            )
            in_window += 1
    queued = [i for i, reason in enumerate(reasons) if reason is None]
    for i in queued[:-MAX_FIRING_ROWS]:
        reasons[i] = LostReason.CATCHUP_LIMIT
    queued = queued[-MAX_FIRING_ROWS:]
    if policy.overlap == OverlapPolicy.FORBID:
        for i in queued if policy.active else queued[1:]:
            reasons[i] = LostReason.OVERLAP
    elif policy.overlap == OverlapPolicy.REPLACE:  # the newest wins; it replaces the others
        for i in queued[:-1]:
            reasons[i] = LostReason.REPLACED
    return list(zip(due, reasons, strict=True))


def _head_reason(f: datetime, policy: _Policy) -> str:
    """The reason of a firing older than the newest 2 * MAX_FIRING_ROWS; such firings never run."""
    if not policy.missed(f):
        return LostReason.CATCHUP_LIMIT
    if policy.misfire == MisfirePolicy.SKIP:
        return LostReason.MISFIRED
    if policy.misfire == MisfirePolicy.RUN_ONCE:
        return LostReason.COALESCED
    return LostReason.CATCHUP_WINDOW if policy.outside_window(f) else LostReason.CATCHUP_LIMIT


def _head_runs(
    schedule: Schedule, policy: _Policy, next_run_at: datetime, tail_start: datetime
) -> list[_Run]:
    """Count the due firings in [next_run_at, tail_start), split where their reason changes."""
    cuts = [policy.now - policy.grace]
    if policy.catchup_window is not None:
        cuts.append(policy.now - policy.catchup_window)
    bounds = [next_run_at, *sorted(c for c in cuts if next_run_at < c < tail_start), tail_start]
    runs: list[_Run] = []
    for low, high in pairwise(bounds):
        end = high - _MICROSECOND
        count, exact = schedule.count_between(low, end, COUNT_CAP)
        first = schedule.next_after(low - _MICROSECOND)
        if low == next_run_at and first != next_run_at:
            count, first = count + 1, next_run_at  # next_run_at is due even if not a fire time
        last = schedule.prev_at_or_before(end)
        if count == 0 or first is None:
            continue
        last = first if last is None or last < first else last
        runs.append(_Run(first, last, _head_reason(low, policy), count, exact))
    return runs


def _rows(head: list[_Run], decided: list[tuple[datetime, str | None]]) -> tuple[Firing, ...]:
    """Queued rows, the newest MAX_FIRING_ROWS skipped rows, and summaries of older skipped ones."""
    skipped = [(f, reason) for f, reason in decided if reason is not None]
    kept = {f for f, _ in skipped[-MAX_FIRING_ROWS:]}
    older = [*head, *(_Run(f, f, r, 1, True) for f, r in skipped[:-MAX_FIRING_ROWS])]
    rows = list(_summaries(older))
    for f, reason in decided:
        if reason is None:
            rows.append(Firing(f, OccurrenceStatus.QUEUED))
        elif f in kept:
            rows.append(Firing(f, OccurrenceStatus.SKIPPED, reason))
    return tuple(rows)


def _summaries(runs: Iterable[_Run]) -> Iterable[Firing]:
    merged: list[_Run] = []
    for run in runs:
        if merged and merged[-1].reason == run.reason:
            prev = merged[-1]
            count, exact = prev.count + run.count, prev.exact and run.exact
            merged[-1] = _Run(prev.first, run.last, run.reason, count, exact)
        else:
            merged.append(run)
    for run in merged:
        if run.count == 1:
            yield Firing(run.first, OccurrenceStatus.SKIPPED, run.reason)
        else:
            yield Firing(
                run.first,
                OccurrenceStatus.SKIPPED,
                run.reason,
                run.count,
                run.last,
                count_exact=run.exact,
            )


def skip_past_due(
    schedule: Schedule, *, next_run_at: datetime | None, now: datetime, reason: str
) -> tuple[Firing, ...]:
    """The rows that record a task's due, undispatched firings (`next_run_at` up to `now`) as
    skipped for `reason`, when an operator's change (pause, reschedule, unpark, delete) moves
    the task past them: one row, or one summary row with their count and range."""
    if next_run_at is None or next_run_at > now:
        return ()
    count, exact = schedule.count_between(next_run_at, now, COUNT_CAP)
    if schedule.next_after(next_run_at - _MICROSECOND) != next_run_at:
        count += 1  # next_run_at is due even if the (new) schedule does not fire then
    last = schedule.prev_at_or_before(now)
    if count <= 1 or last is None or last <= next_run_at:
        return (Firing(next_run_at, OccurrenceStatus.SKIPPED, reason),)
    return (Firing(next_run_at, OccurrenceStatus.SKIPPED, reason, count, last, count_exact=exact),)
