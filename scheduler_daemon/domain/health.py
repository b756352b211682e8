"""A task's health over a window: each verdict's rule, their order, and the counts `tasks health`
shows, from what the stores read (pure: the database clock is passed in as `now`).

The rules are written for operators in docs/cli.md (`tasks health`); ADR 0012 says why they read
what they read. A rule returns its cause in words, or None when it does not hold; the first rule
of RULES that holds is the verdict, and its rank orders the fleet: unhealthy first.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from scheduler_daemon.domain import limit
from scheduler_daemon.domain.schedule.base import Schedule
from scheduler_daemon.domain.status import (
    ACTIVE,
    MisfirePolicy,
    OccurrenceStatus,
    OverlapPolicy,
    TaskStatus,
    Trigger,
)

FAILING_ATTEMPTS = 3
"""`failing`: this many newest finished attempts all failed or timed out."""
ATTEMPT_SCAN = limit.MAX_FAILING_AFTER
"""The newest finished occurrences read to find those attempts (expired and cancelled ones
before a launch have none); a task with more in a row is `losing firings` first anyway."""
RUN_SAMPLE = 500
"""Queue wait, run time and runs that outlast the interval are read from the runs of the newest
this many firings of the window."""
MAX_WINDOW = limit.MAX_HEALTH_WINDOW
OWED_CAP = 100_000
_MICROSECOND = timedelta(microseconds=1)
"""Owed firings of a cron task are counted one by one up to this many (domain/misfire.py)."""

# Skip reasons written by an operator's change, not by a rule: what the operator asked for
# (`dst_gap`: a one-shot's local `--at` in a DST gap, written with `--dst-gap skip`;
# `excluded`: a firing on a date of the task's own calendars, ADR 0025).
OPERATOR_REASONS = frozenset({"paused", "rescheduled", "deleted", "dst_gap", "excluded"})
# The skip reasons each misfire policy writes by its own rule.
MISFIRE_REASONS = {
    MisfirePolicy.SKIP: frozenset({"misfired"}),
    MisfirePolicy.RUN_ONCE: frozenset({"coalesced"}),
    MisfirePolicy.RUN_ALL: frozenset({"catchup_window", "catchup_limit"}),
}
FAILED = frozenset({OccurrenceStatus.FAILED, OccurrenceStatus.TIMEOUT})
_FAILED_TEXT = frozenset(str(s) for s in FAILED)  # plain strings: judged 10,000 times a page


class Verdict(StrEnum):
    """A task's health, in the order the rules are tried (and the fleet page is sorted)."""

    FAILING = "failing"
    LOSING_FIRINGS = "losing firings"
    LATE = "late"
    PARKED = "parked"
    PAUSED = "paused"
    HEALTHY = "healthy"


RANK = {v: i for i, v in enumerate(Verdict)}


@dataclass(frozen=True)
class Group:
    """Occurrences of one task in the window with the same trigger, status, reason and overlap:
    how many rows, how many firings they stand for, and the newest end among them."""

    trigger: str
    status: str
    reason: str | None
    overlap: str
    rows: int
    firings: int
    last_finished_at: datetime | None = None

    @classmethod
    def from_json(cls, item: Mapping[str, Any], parse: Callable[[str], datetime]) -> "Group":
        finished = item.get("last_finished_at")
        return cls(
            item.get("trigger", Trigger.SCHEDULE),
            item["status"],
            item.get("reason"),
            item["overlap"],
            int(item["rows"]),
            int(item["firings"]),
            parse(finished) if finished else None,
        )


@dataclass(frozen=True)
class Signals:
    """What the verdict of one task is decided from: its row, the window's skipped and expired
    occurrences, its queued ones past their start deadline, its newest finished attempts."""

    now: datetime
    paused: bool
    parked_at: datetime | None
    park_error: str | None
    status: str
    misfire: str
    misfire_grace: timedelta
    next_run_at: datetime | None
    lost: tuple[Group, ...] = ()  # skipped and expired occurrences of the window
    queued_past_deadline: int = 0
    recent_attempts: tuple[str, ...] = ()  # run statuses, newest first
    failing_after: int = FAILING_ATTEMPTS  # N of the `failing` rule

    @property
    def owes(self) -> bool:
        """Whether a firing is due and not dispatched (nothing is owed while paused or parked)."""
        return (
            not self.paused
            and self.parked_at is None
            and self.status in (TaskStatus.ENABLED, TaskStatus.RUNNING)
            and self.next_run_at is not None
            and self.next_run_at <= self.now
        )


def is_policy_skip(reason: str | None, overlap: str, misfire: str) -> bool:
    """A skip the task's own policy made (or an operator's change asked for): not a lost firing.
    `overlap` is the occurrence's (the policy it was written under), `misfire` the task's."""
    if reason == "overlap":
        return overlap == OverlapPolicy.FORBID
    if reason == "replaced":  # a catch-up pass's older firings, a newer one won
        return overlap == OverlapPolicy.REPLACE
    if reason in OPERATOR_REASONS:
        return True
    return reason in MISFIRE_REASONS.get(MisfirePolicy(misfire), frozenset())


def failing(s: Signals) -> str | None:
    """The newest N (`failing_after`) finished attempts all failed or timed out."""
    attempts = s.failing_after
    recent = s.recent_attempts[:attempts]
    if len(recent) < attempts or not _FAILED_TEXT.issuperset(recent):
        return None
    return f"the last {attempts} attempts failed or timed out"


def losing_firings(s: Signals) -> str | None:
    """An expired firing in the window, or a skip whose reason is not the task's own policy."""
    if not s.lost:
        return None
    expired = sum(g.firings for g in s.lost if g.status == OccurrenceStatus.EXPIRED)
    lost: dict[str, int] = {}
    for g in s.lost:
        if g.status == OccurrenceStatus.SKIPPED and not is_policy_skip(
            g.reason, g.overlap, s.misfire
        ):
            lost[g.reason or "?"] = lost.get(g.reason or "?", 0) + g.firings
    causes = [f"{expired} expired"] if expired else []
    causes += [f"{n} skipped ({reason})" for reason, n in sorted(lost.items())]
    return ", ".join(causes) + " in the window" if causes else None


def late(s: Signals) -> str | None:
    """A firing owed and undispatched past its misfire grace, or one queued past its start
    deadline."""
    causes = []
    if s.owes and s.next_run_at is not None and s.now - s.next_run_at > s.misfire_grace:
        behind = int((s.now - s.next_run_at).total_seconds())
        causes.append(f"a firing due {behind}s ago is not dispatched (grace {_secs(s)})")
    if s.queued_past_deadline:
        causes.append(f"{s.queued_past_deadline} queued past the start deadline")
    return "; ".join(causes) or None


def parked(s: Signals) -> str | None:
    """The dispatcher parked it: its schedule could not be planned."""
    return f"parked: {s.park_error}" if s.parked_at is not None else None


def paused(s: Signals) -> str | None:
    """An operator paused it."""
    return "paused" if s.paused else None


RULES: tuple[tuple[Verdict, Callable[[Signals], str | None]], ...] = (
    (Verdict.FAILING, failing),
    (Verdict.LOSING_FIRINGS, losing_firings),
    (Verdict.LATE, late),
    (Verdict.PARKED, parked),
    (Verdict.PAUSED, paused),
)


@dataclass(frozen=True)
class Health:
    verdict: Verdict
    cause: str

    @property
    def rank(self) -> int:
        return RANK[self.verdict]


def judge(s: Signals) -> Health:
    """The first rule that holds, with its cause; `healthy` when none does."""
    for verdict, rule in RULES:
        cause = rule(s)
        if cause is not None:
            return Health(verdict, cause)
    return Health(Verdict.HEALTHY, "no rule holds")


def _secs(s: Signals) -> str:
    return f"{int(s.misfire_grace.total_seconds())}s"


def owed_firings(
    schedule: Schedule, s: Signals, since: datetime, cap: int = OWED_CAP
) -> tuple[int, bool]:
    """How many firings are due and not dispatched in the window (since, now]: the owed range
    `next_run_at` .. now, clipped to it; and whether that is exact (arithmetic for an
    interval, counted one by one up to `cap` for cron)."""
    if not s.owes or s.next_run_at is None:
        return 0, True
    clipped = s.next_run_at <= since  # the window is (since, now]
    start = since + _MICROSECOND if clipped else s.next_run_at
    count, exact = schedule.count_between(start, s.now, cap)
    if not clipped and schedule.next_after(start - _MICROSECOND) != start:
        count += 1  # next_run_at is due even when the schedule does not fire then
    return count, exact


@dataclass(frozen=True)
class Counts:
    """The window's occurrences, counted: firings (schedule rows, summaries by their count),
    and outcomes of every occurrence (manual and backfill ones too)."""

    firings: int = 0
    succeeded: int = 0
    failed: int = 0
    timed_out: int = 0
    interrupted: int = 0
    cancelled: int = 0
    active: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    expired: dict[str, int] = field(default_factory=dict)
    last_success_at: datetime | None = None
    last_failure_at: datetime | None = None

    @property
    def ran(self) -> int:
        return self.succeeded + self.failed + self.timed_out + self.interrupted


def count(groups: Iterable[Group]) -> Counts:
    """The window's counts from its groups of occurrences."""
    by: dict[str, int] = {}
    skipped: dict[str, int] = {}
    expired: dict[str, int] = {}
    firings = 0
    last: dict[str, datetime] = {}
    for g in groups:
        if g.trigger == Trigger.SCHEDULE:
            firings += g.firings
        by[g.status] = by.get(g.status, 0) + g.firings
        reason = g.reason or "?"
        if g.status == OccurrenceStatus.SKIPPED:
            skipped[reason] = skipped.get(reason, 0) + g.firings
        elif g.status == OccurrenceStatus.EXPIRED:
            expired[reason] = expired.get(reason, 0) + g.firings
        kind = "success" if g.status == OccurrenceStatus.SUCCESS else "failure"
        ended = g.last_finished_at
        if ended is not None and (g.status in FAILED or kind == "success"):
            last[kind] = max(ended, last.get(kind, ended))
    return Counts(
        firings=firings,
        succeeded=by.get(OccurrenceStatus.SUCCESS, 0),
        failed=by.get(OccurrenceStatus.FAILED, 0),
        timed_out=by.get(OccurrenceStatus.TIMEOUT, 0),
        interrupted=by.get(OccurrenceStatus.INTERRUPTED, 0),
        cancelled=by.get(OccurrenceStatus.CANCELLED, 0),
        active=sum(by.get(s, 0) for s in ACTIVE),
        skipped=dict(sorted(skipped.items())),
        expired=dict(sorted(expired.items())),
        last_success_at=last.get("success"),
        last_failure_at=last.get("failure"),
    )


@dataclass(frozen=True)
class RunFigures:
    """A window's sampled runs: how many, how many outlasted it, and the p50 and p99 of their
    queue wait and run time (seconds; None without runs)."""

    runs: int
    outlasting: int
    wait_p50: float | None
    wait_p99: float | None
    run_p50: float | None
    run_p99: float | None


@dataclass(frozen=True)
class Report:
    """What `tasks health` shows of one task: its verdict and the window's figures."""

    task_id: int
    name: str
    health: Health
    window: timedelta
    counts: Counts
    owed: int
    owed_exact: bool
    figures: RunFigures
    next_run_at: datetime | None

    @property
    def expected(self) -> int:
        """Firings the schedule called for in the window: its rows' firings and those owed."""
        return self.counts.firings + self.owed


def cursor(health: Health, name: str) -> str:
    """The fleet page's cursor after a task: its verdict's rank and its name."""
    return f"{health.rank}:{name}"


def after_cursor(text: str) -> tuple[int, str]:
    """(rank, name) a cursor names; ValueError for text no page printed."""
    rank, colon, name = text.partition(":")
    if not colon or not rank.isascii() or not rank.isdigit() or int(rank) >= len(RANK):
        raise ValueError(f"--after {text!r} is not a cursor `tasks health` printed")
    return int(rank), name
