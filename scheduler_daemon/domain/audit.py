"""The vocabulary of `scheduler-daemon audit`: the checks and notices by name, a violation, a
notice, the report (pure).

The names are stable: they appear in `--json` output and in docs/cli.md, and scripts match on them.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

# Check name → the invariant it checks, one line, in the order the checks run.
CHECKS: dict[str, str] = {
    "firing_recorded_twice": "a firing has at most one scheduled and one backfill occurrence",
    "firing_missing": "every firing the schedule called for while the task was active has a row",
    "forbid_active_twice": "a `forbid` task never has two active occurrences",
    "runs_overlap": (
        "runs of one `forbid` or `replace` task, or of one concurrency key, never overlap in time"
    ),
    "fifo_order": "no run starts while an older occurrence of its key (or `queue` task) waits",
    "budget_exceeded": "executing runs never exceed the fleet budget in force",
    "success_twice": "an occurrence has at most one successful run",
    "takeover_overdue": "no run stays running past its takeover point while a peer is alive",
    "one_shot_status": "a one-shot task's status matches its newest occurrence",
    "lease_token_order": "the runs of an occurrence carry unique tokens, increasing with start",
    "cancelled_run_still_running": "no cancelled occurrence has a run still running",
    "started_before_spread": "no run starts before its occurrence's spread start",
}
CHECK_NAMES = tuple(CHECKS)
# How many ids a notice names; its count covers them all.
NOTICE_IDS_SHOWN = 10
# Firings newer than `until` minus this are not owed yet: the dispatcher may not have reached them.
DEFAULT_SETTLE = timedelta(seconds=30)

# A value in a violation's rows: ids, instants, counts, or a tuple of ids.
Value = int | float | str | bool | datetime | timedelta | tuple[int, ...] | tuple[str, ...] | None


@dataclass(frozen=True)
class Violation:
    """One broken invariant and the rows involved (ids by column name, and the facts that break
    it). `identity` names the same violation in another snapshot; it is not printed."""

    check: str
    message: str
    rows: Mapping[str, Value]
    identity: tuple[object, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Incomplete:
    """Part of a check that could not be carried out (work bound reached, unplannable schedule)."""

    check: str
    message: str


@dataclass(frozen=True)
class Notice:
    """What the guarantees allow but an operator should know, with how many and a few ids; it
    never changes the exit code. The notices (stable names): `epoch_change_rerun`, occurrences
    created before a failover and run after it, which may have run on the lost branch too (a
    repeat no check can see); `owed`, a task's firings at or after its `next_run_at` that no
    daemon has dispatched yet (a stopped fleet owes them; none is lost)."""

    name: str
    message: str
    rows: Mapping[str, Value]


@dataclass
class Findings:
    """What one check found in one snapshot. `condense` turns the violations both snapshots
    showed into the ones reported (the firing check groups consecutive missing firings)."""

    violations: list[Violation]
    incomplete: list[Incomplete] = field(default_factory=list)
    condense: Callable[[list[Violation]], list[Violation]] | None = None
    notices: list[Notice] = field(default_factory=list)


@dataclass(frozen=True)
class AuditWindow:
    """The history examined, with both ends on the database clock. Firings after `cutoff`
    (`until` minus `settle`) are not owed yet."""

    since: datetime | None
    until: datetime
    settle: timedelta

    @property
    def cutoff(self) -> datetime:
        return self.until - self.settle


@dataclass(frozen=True)
class AuditReport:
    window: AuditWindow
    checked: tuple[str, ...]
    violations: tuple[Violation, ...]
    incomplete: tuple[Incomplete, ...] = ()
    notices: tuple[Notice, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.violations
