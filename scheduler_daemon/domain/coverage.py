"""Which fire times a task's definition history owes, and which of them no recorded row covers
(pure).

A task's history is its `task_event` rows in id order. Event i's definition (schedule and active
state) applies after event i's `at` and before event i+1's `at`; the last one applies up to the
audit's cutoff. Only windows with `active` owe firings, and none that the prune may have deleted
(`owed_since`: before the task's own retention cutoff, or at or before the newest firing a prune
recorded deleting of it). A firing is covered by an occurrence scheduled for exactly that
instant, or by a summary row (skipped, firing_count > 1) whose [scheduled_for,
last_scheduled_for] range contains it.

Cost: the owed firings are enumerated one by one with the same Schedule objects the dispatcher
uses, newest first, at most `limit` per task; each is a set lookup or a bisect. A per-second task
for a day is 86,400 firings: under a second for an interval, about two seconds for cron.
"""

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler_daemon.domain.schedule import make_schedule
from scheduler_daemon.domain.schedule.base import Schedule, ScheduleError
from scheduler_daemon.domain.status import ScheduleKind

_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class DefinitionEvent:
    """One `task_event` row: a task's schedule and active state from `at` on."""

    id: int
    task_id: int
    at: datetime
    active: bool
    schedule_kind: str
    cron_expr: str | None
    every: timedelta | None
    run_at: datetime | None
    anchor_at: datetime
    timezone: str
    dst_gap: str
    dst_overlap: str
    # False: written before revision 0026, fired by builds that read `#`, `L5` and `W` beside a
    # restricted other day field as croniter does (CronSchedule.either_days).
    either_days: bool = True

    def schedule(self) -> Schedule:
        """The schedule these columns describe, built as TaskSpec.schedule() builds it (with
        the day reading the firings of its time were made by)."""
        return make_schedule(
            cron=self.cron_expr if self.schedule_kind == ScheduleKind.CRON else None,
            every=self.every if self.schedule_kind == ScheduleKind.INTERVAL else None,
            at=self.run_at if self.schedule_kind == ScheduleKind.ONCE else None,
            timezone=self.timezone,
            dst_gap=self.dst_gap,
            dst_overlap=self.dst_overlap,
            anchor=self.anchor_at,
            either_days=self.either_days,
        )


@dataclass(frozen=True)
class OwedWindow:
    """Firings of `event`'s schedule after `after` and up to `until` (`until` itself only when
    `closed`) are owed."""

    event: DefinitionEvent
    after: datetime
    until: datetime
    closed: bool

    def owes(self, t: datetime) -> bool:
        return self.after < t < self.until or (self.closed and t == self.until)


@dataclass(frozen=True)
class Pruned:
    """What of one task's history the prune may have deleted: every firing before
    `retained_from` (now minus its retention, its own or the fleet's; None: no retention in
    force), and every firing at or before `pruned_through` (the newest scheduled firing a prune
    recorded deleting; None: none recorded, or pruned only by builds before revision 0016)."""

    task_id: int
    retained_from: datetime | None
    pruned_through: datetime | None


def owed_since(since: datetime | None, pruned: Pruned | None) -> datetime | None:
    """The instant from which one task's firings are owed: the audit's `since`, but none the
    prune may have deleted. A retention lengthened after a prune still leaves out what that
    prune deleted (its mark), and one task's short retention leaves out only its own history."""
    bounds = [since]
    if pruned is not None:
        bounds.append(pruned.retained_from)
        if pruned.pruned_through is not None:
            bounds.append(pruned.pruned_through + _MICROSECOND)  # owed: strictly after the mark
    known = [b for b in bounds if b is not None]
    return max(known) if known else None


def owed_windows(
    events: Sequence[DefinitionEvent], *, since: datetime | None, cutoff: datetime
) -> list[OwedWindow]:
    """The active windows of one task's events (in id order), clipped to [since, cutoff]."""
    windows = []
    for i, event in enumerate(events):
        if not event.active:
            continue
        after = event.at if since is None else max(event.at, since - _MICROSECOND)
        following = events[i + 1].at if i + 1 < len(events) else None
        if following is not None and following <= cutoff:
            until, closed = following, False
        else:
            until, closed = cutoff, True
        if after < until:
            windows.append(OwedWindow(event, after, until, closed))
    return windows


def split_windows(
    windows: Sequence[OwedWindow], at: datetime | None
) -> tuple[list[OwedWindow], list[OwedWindow]]:
    """`windows` cut at `at` (a task's `next_run_at`): the firings before it, which the
    dispatcher has passed and must have recorded, and those at or after it, which it has not
    reached yet (owed, not missing). `at` None: the task fires no more, nothing is pending."""
    if at is None:
        return list(windows), []
    before, pending = [], []
    for w in windows:
        if w.after < at:
            if at < w.until or (at == w.until and w.closed):
                before.append(OwedWindow(w.event, w.after, at, closed=False))
            else:
                before.append(w)
        if w.until >= at and (w.until > at or w.closed):
            pending.append(OwedWindow(w.event, max(w.after, at - _MICROSECOND), w.until, w.closed))
    return before, pending


class Coverage:
    """The instants one task's recorded rows account for."""

    def __init__(
        self, exact: Iterable[datetime], ranges: Iterable[tuple[datetime, datetime]]
    ) -> None:
        self.exact = set(exact)
        merged: list[tuple[datetime, datetime]] = []
        for first, last in sorted(ranges):
            if merged and first <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], last))
            else:
                merged.append((first, last))
        self._starts = [first for first, _ in merged]
        self._ranges = merged

    def covers(self, t: datetime) -> bool:
        if t in self.exact:
            return True
        i = bisect_right(self._starts, t) - 1
        return i >= 0 and self._ranges[i][1] >= t


@dataclass(frozen=True)
class MissingFiring:
    """An owed firing no row covers; `ordinal` counts owed firings of its task, newest first
    (consecutive ordinals: nothing owed lies between)."""

    event: DefinitionEvent
    at: datetime
    ordinal: int


@dataclass(frozen=True)
class Unplannable:
    event: DefinitionEvent
    error: str


@dataclass(frozen=True)
class CoverageResult:
    missing: tuple[MissingFiring, ...]
    examined: int
    unplannable: tuple[Unplannable, ...] = ()
    checked_from: datetime | None = None  # set when `limit` stopped the walk: older not checked


def missing_firings(
    windows: Sequence[OwedWindow], coverage: Coverage, *, limit: int
) -> CoverageResult:
    """The owed firings of one task's windows that `coverage` does not cover, newest first,
    examining at most `limit` owed firings."""
    missing: list[MissingFiring] = []
    unplannable: list[Unplannable] = []
    examined = 0
    for window in reversed(windows):
        try:
            schedule = window.event.schedule()
            times = schedule.fire_times_reversed(window.until, since=window.after + _MICROSECOND)
            for t in times:
                if not window.owes(t):
                    continue
                if examined == limit:
                    return CoverageResult(tuple(missing), examined, tuple(unplannable), t)
                if not coverage.covers(t):
                    missing.append(MissingFiring(window.event, t, examined))
                examined += 1
        except (ScheduleError, OverflowError) as exc:
            unplannable.append(Unplannable(window.event, str(exc).splitlines()[0]))
    return CoverageResult(tuple(missing), examined, tuple(unplannable))


@dataclass(frozen=True)
class Gap:
    """Consecutive owed firings of one definition, all missing: from `first` to `last`."""

    event: DefinitionEvent
    first: datetime
    last: datetime
    count: int


def gaps(missing: Iterable[MissingFiring]) -> list[Gap]:
    """Missing firings (of one task) grouped into runs with nothing owed and covered between,
    oldest first."""
    result: list[Gap] = []
    previous: MissingFiring | None = None
    for m in sorted(missing, key=lambda m: m.ordinal):
        if (
            previous is not None
            and m.ordinal == previous.ordinal + 1
            and m.event.id == previous.event.id
        ):
            gap = result[-1]
            result[-1] = Gap(gap.event, m.at, gap.last, gap.count + 1)
        else:
            result.append(Gap(m.event, m.at, m.at, 1))
        previous = m
    return sorted(result, key=lambda g: g.first)
