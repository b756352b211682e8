"""Auditor: checks the recorded history against the invariants of docs/guarantees.md and reports
every violation with the rows involved, and as notices what the guarantees allow but no check can
judge (runs after a failover that the lost branch may have run too). It only reads.

Safe on a live database. Each check runs in its own REPEATABLE READ, READ ONLY transaction, so a
check that relates rows sees them at one moment; a check that finds anything runs again in a
fresh snapshot, and only what both snapshots show is reported, so a row a live daemon is changing
at that moment is not reported.

Pruned history: the firing check owes each task's firings only after what the prune may have
deleted of that task (its own retention cutoff, and the newest firing a prune recorded deleting:
domain/coverage.py `owed_since`). The other checks look for rows that break a rule together, and
the prune deletes an occurrence with its runs, so pruning can only take a finding of theirs away:
they read all the history kept.

Cost, with n the rows of the window (`since`; no `since`: the whole history): the SQL checks are
one statement each (the FIFO check joins each started occurrence with the occurrences of its key
or task that finished after it started); the overlap and budget checks sweep the runs of the
window in memory, O(n log n); the firing check enumerates every owed fire time, at most
`firing_limit` per task (see domain/coverage.py). Narrow the window with `since` on a large history.
"""

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

import structlog
from psycopg_pool import ConnectionPool

from scheduler_daemon.domain.audit import (
    CHECK_NAMES,
    DEFAULT_SETTLE,
    NOTICE_IDS_SHOWN,
    AuditReport,
    AuditWindow,
    Findings,
    Incomplete,
    Notice,
    Violation,
)
from scheduler_daemon.domain.outcome import LIFECYCLE
from scheduler_daemon.domain.status import ACTIVE, OccurrenceStatus, TaskStatus, Trigger
from scheduler_daemon.domain.sweep import (
    SettingHistory,
    Span,
    executing_at_starts,
    overlapping_pairs,
)
from scheduler_daemon.services.audit_firing import firing_findings
from scheduler_daemon.storage import audit_store
from scheduler_daemon.storage.database import Limits, Session, Tx, transaction

log = structlog.get_logger()
# A reconcile pass may wait out a lock timeout (5 s) and take a moment itself.
TAKEOVER_SLACK = timedelta(seconds=10)
# Admission reads the budget, then claims: a start may follow a budget change by that long.
BUDGET_SLACK = timedelta(seconds=1)
FIRING_LIMIT = 1_000_000
# Read-only statements over history may take longer than the daemon's; an audit still never
# holds a snapshot open for long between its statements.
LIMITS = Limits(statement_timeout="5min", idle_timeout="5min")

TimeBound = datetime | timedelta  # an instant, or that long before the database's now


class InvalidWindow(ValueError):
    """`since` is not before `until`; the message is one line."""


def _iso(t: datetime | None) -> str:
    return "never" if t is None else t.isoformat()


def _span_text(span: Span) -> str:
    return f"[{span.start.isoformat()}, {'running' if span.end is None else span.end.isoformat()})"


class Auditor:
    """One audit over `source`: a pool (the CLI's own one-connection pool), or a Client's
    reused Session (the console's: its audit takes turns with its pages on one connection)."""

    def __init__(
        self,
        source: ConnectionPool | Session,
        *,
        settle: timedelta = DEFAULT_SETTLE,
        checks: Iterable[str] = CHECK_NAMES,
        takeover_slack: timedelta = TAKEOVER_SLACK,
        firing_limit: int = FIRING_LIMIT,
        between_snapshots: Callable[[str], None] | None = None,
        now: datetime | None = None,
    ) -> None:
        self.source = source
        self.settle = settle
        self.checks = tuple(c for c in CHECK_NAMES if c in set(checks))
        self.takeover_slack = takeover_slack
        self.firing_limit = firing_limit
        self.between_snapshots = between_snapshots  # a test hook: called before a re-check
        self.now = now  # a test's pinned clock (None: the database's)
        self._checks: dict[str, Callable[[audit_store.Conn, AuditWindow], Findings]] = {
            "firing_recorded_twice": self._firing_recorded_twice,
            "firing_missing": self._firing_missing,
            "forbid_active_twice": self._forbid_active_twice,
            "runs_overlap": self._runs_overlap,
            "fifo_order": self._fifo_order,
            "budget_exceeded": self._budget_exceeded,
            "success_twice": self._success_twice,
            "takeover_overdue": self._takeover_overdue,
            "one_shot_status": self._one_shot_status,
            "lease_token_order": self._lease_token_order,
            "cancelled_run_still_running": self._cancelled_run_still_running,
            "started_before_spread": self._started_before_spread,
        }

    @contextmanager
    def _snapshot(self) -> Iterator[Tx]:
        """One REPEATABLE READ, READ ONLY transaction on the source."""
        if isinstance(self.source, Session):
            with self.source.transaction(LIMITS, snapshot=True) as tx:
                yield tx
        else:
            with transaction(self.source, LIMITS, snapshot=True) as tx:
                yield tx

    def run_once(
        self, since: TimeBound | None = None, until: TimeBound | None = None
    ) -> AuditReport:
        window = self._window(since, until)
        violations: list[Violation] = []
        incomplete: list[Incomplete] = []
        notices: list[Notice] = []
        for name in self.checks:
            found = self._confirmed(name, window)
            violations += found.violations
            incomplete += found.incomplete
            notices += found.notices
        with self._snapshot() as tx:
            notices += self._epoch_change_reruns(tx.conn, window)
        log.debug(
            "audit_finished",
            violations=len(violations),
            incomplete=len(incomplete),
            notices=len(notices),
        )
        return AuditReport(
            window, self.checks, tuple(violations), tuple(incomplete), tuple(notices)
        )

    def _window(self, since: TimeBound | None, until: TimeBound | None) -> AuditWindow:
        with self._snapshot() as tx:
            now = audit_store.clock(tx.conn, self.now)

        def resolve(bound: TimeBound) -> datetime:
            return now - bound if isinstance(bound, timedelta) else bound

        since_at = None if since is None else resolve(since)
        until_at = now if until is None else min(resolve(until), now)
        if since_at is not None and since_at >= until_at:
            raise InvalidWindow(
                f"--since {since_at.isoformat()} is not before --until {until_at.isoformat()}"
            )
        return AuditWindow(since_at, until_at, self.settle)

    def _confirmed(self, name: str, window: AuditWindow) -> Findings:
        """Runs check `name`; any violation it finds is looked for again in a fresh snapshot,
        and only those both showed are kept (condensed); notes and notices are the last
        snapshot's."""
        check = self._checks[name]
        with self._snapshot() as tx:
            first = check(tx.conn, window)
        if not first.violations:
            return first
        if self.between_snapshots is not None:
            self.between_snapshots(name)
        with self._snapshot() as tx:
            second = check(tx.conn, window)
        seen = {v.identity for v in first.violations}
        kept = [v for v in second.violations if v.identity in seen]
        log.debug("audit_rechecked", check=name, first=len(first.violations), confirmed=len(kept))
        condensed = second.condense(kept) if second.condense else kept
        return Findings(condensed, second.incomplete, notices=second.notices)

    def _epoch_change_reruns(self, conn: audit_store.Conn, window: AuditWindow) -> list[Notice]:
        """Per failover the fleet saw, the occurrences created before it and run after it: a run
        of theirs on the lost branch is gone from this database, so no check can tell whether
        they ran twice; a notice, not a violation."""
        return [
            Notice(
                "epoch_change_rerun",
                f"{r.occurrence_count} occurrence(s) created before the failover to timeline "
                f"{r.timeline} (first seen {r.first_seen_at.isoformat()}) have a run started "
                f"after it and may have run twice: {list(r.occurrence_ids)}"
                + (" …" if r.occurrence_count > len(r.occurrence_ids) else ""),
                {
                    "timeline": r.timeline,
                    "failover_seen_at": r.first_seen_at,
                    "occurrence_count": r.occurrence_count,
                    "occurrence_ids": r.occurrence_ids,
                },
            )
            for r in audit_store.epoch_change_reruns(conn, window.since, NOTICE_IDS_SHOWN)
        ]

    # -- the checks, in CHECKS order: each reads one snapshot --------------------------------------
    def _firing_recorded_twice(self, conn: audit_store.Conn, window: AuditWindow) -> Findings:
        return Findings(
            [
                Violation(
                    "firing_recorded_twice",
                    f"task {r.task_id}: firing {r.scheduled_for.isoformat()} has "
                    f"{len(r.occurrence_ids)} "
                    f"{'scheduled' if r.trigger == Trigger.SCHEDULE else r.trigger} "
                    f"occurrences {list(r.occurrence_ids)}",
                    {
                        "task_id": r.task_id,
                        "scheduled_for": r.scheduled_for,
                        "trigger": r.trigger,
                        "occurrence_ids": r.occurrence_ids,
                    },
                    identity=(r.task_id, r.scheduled_for, r.trigger, r.occurrence_ids),
                )
                for r in audit_store.recorded_twice(conn, window.since)
            ]
        )

    def _firing_missing(self, conn: audit_store.Conn, window: AuditWindow) -> Findings:
        return firing_findings(conn, window, limit=self.firing_limit)

    def _forbid_active_twice(self, conn: audit_store.Conn, window: AuditWindow) -> Findings:
        return Findings(
            [
                Violation(
                    "forbid_active_twice",
                    f"forbid task {r.task_id} has {len(r.occurrence_ids)} active occurrences "
                    f"{list(r.occurrence_ids)}",
                    {"task_id": r.task_id, "occurrence_ids": r.occurrence_ids},
                    identity=(r.task_id, r.occurrence_ids),
                )
                for r in audit_store.active_twice(conn)
            ]
        )

    def _runs_overlap(self, conn: audit_store.Conn, window: AuditWindow) -> Findings:
        groups: dict[tuple[str, str], list[Span]] = defaultdict(list)
        for run in audit_store.exclusive_runs(conn, window.since):
            groups[(run.scope, run.group_key)].append(run.span)
        violations = []
        for (scope, key), spans in groups.items():
            column, value = ("task_id", int(key)) if scope == "task" else ("concurrency_key", key)
            what = f"exclusive task {key}" if scope == "task" else f"concurrency key {key!r}"
            for a, b in overlapping_pairs(spans):
                violations.append(
                    Violation(
                        "runs_overlap",
                        f"runs {a.ident} {_span_text(a)} and {b.ident} {_span_text(b)} of "
                        f"{what} overlap",
                        {"scope": scope, column: value, "run_ids": (a.ident, b.ident)},
                        identity=(scope, key, a.ident, b.ident),
                    )
                )
        return Findings(violations)

    def _fifo_order(self, conn: audit_store.Conn, window: AuditWindow) -> Findings:
        violations = []
        for r in audit_store.out_of_order(conn, window.since):
            keyed = r.scope == "concurrency_key"
            column, value = (
                ("concurrency_key", r.group_key) if keyed else ("task_id", int(r.group_key))
            )
            what = f"concurrency key {r.group_key!r}" if keyed else f"queue task {r.group_key}"
            violations.append(
                Violation(
                    "fifo_order",
                    f"run {r.run_id} of occurrence {r.occurrence_id} started at "
                    f"{r.started_at.isoformat()} while the older occurrence {r.waiting_id} of "
                    f"{what} waited (its first run: {_iso(r.waiting_first_started_at)})",
                    {
                        "scope": r.scope,
                        column: value,
                        "occurrence_id": r.occurrence_id,
                        "run_id": r.run_id,
                        "started_at": r.started_at,
                        "waiting_occurrence_id": r.waiting_id,
                        "waiting_first_started_at": r.waiting_first_started_at,
                    },
                    identity=(r.scope, r.group_key, r.occurrence_id, r.run_id, r.waiting_id),
                )
            )
        return Findings(violations)

    def _budget_exceeded(self, conn: audit_store.Conn, window: AuditWindow) -> Findings:
        budget = SettingHistory(audit_store.budget_changes(conn))
        violations = []
        for run, executing in executing_at_starts(audit_store.budget_runs(conn, window.since)):
            if window.since is not None and run.start < window.since:
                continue
            allowed = budget.largest_in_force(run.start - BUDGET_SLACK, run.start)
            if allowed is None or len(executing) <= allowed:
                continue
            ids = tuple(s.ident for s in executing)
            violations.append(
                Violation(
                    "budget_exceeded",
                    f"run {run.ident} started at {run.start.isoformat()} with {len(ids)} runs "
                    f"executing {list(ids)}; the budget in force was {allowed}",
                    {
                        "run_id": run.ident,
                        "started_at": run.start,
                        "executing_run_ids": ids,
                        "budget": allowed,
                    },
                    identity=(run.ident, ids),
                )
            )
        return Findings(violations)

    def _success_twice(self, conn: audit_store.Conn, window: AuditWindow) -> Findings:
        return Findings(
            [
                Violation(
                    "success_twice",
                    f"occurrence {r.occurrence_id} has {len(r.run_ids)} successful runs "
                    f"{list(r.run_ids)}",
                    {"occurrence_id": r.occurrence_id, "run_ids": r.run_ids},
                    identity=(r.occurrence_id, r.run_ids),
                )
                for r in audit_store.succeeded_twice(conn, window.since)
            ]
        )

    def _takeover_overdue(self, conn: audit_store.Conn, window: AuditWindow) -> Findings:
        return Findings(
            [
                Violation(
                    "takeover_overdue",
                    f"run {r.run_id} of occurrence {r.occurrence_id} (owner {r.owner}) is "
                    f"running {(r.checked_at - r.takeover_at).total_seconds():.1f}s past its "
                    f"takeover point {r.takeover_at.isoformat()} while "
                    f"{', '.join(r.live_instance_ids)} are alive",
                    {
                        "run_id": r.run_id,
                        "occurrence_id": r.occurrence_id,
                        "owner": r.owner,
                        "takeover_at": r.takeover_at,
                        "live_instance_ids": r.live_instance_ids,
                    },
                    identity=(r.run_id, r.takeover_at),
                )
                for r in audit_store.overdue_runs(conn, self.takeover_slack, self.now)
            ]
        )

    def _one_shot_status(self, conn: audit_store.Conn, window: AuditWindow) -> Findings:
        violations = []
        for r in audit_store.one_shots(conn):
            if r.status == TaskStatus.RUNNING:
                wrong = r.occurrence_status not in ACTIVE
                expected = "an active newest occurrence"
            elif r.occurrence_status is None:
                continue  # finished without ever firing (e.g. its instant passed while paused)
            else:
                wrong = LIFECYCLE.get(OccurrenceStatus(r.occurrence_status)) != r.status
                expected = "a newest occurrence that ended " + " or ".join(
                    repr(s.value) for s, task in LIFECYCLE.items() if task == r.status
                )
            if not wrong:
                continue
            newest = (
                "it has no occurrence"
                if r.occurrence_id is None
                else f"its newest occurrence {r.occurrence_id} (seq {r.occurrence_seq}) is "
                f"{r.occurrence_status}"
            )
            violations.append(
                Violation(
                    "one_shot_status",
                    f"one-shot task {r.task_id} is {r.status}, which needs {expected}, but "
                    f"{newest}",
                    {
                        "task_id": r.task_id,
                        "status": r.status,
                        "occurrence_id": r.occurrence_id,
                        "occurrence_status": r.occurrence_status,
                    },
                    identity=(r.task_id, r.status, r.occurrence_id, r.occurrence_status),
                )
            )
        return Findings(violations)

    def _lease_token_order(self, conn: audit_store.Conn, window: AuditWindow) -> Findings:
        return Findings(
            [
                Violation(
                    "lease_token_order",
                    f"run {r.run_id} of occurrence {r.occurrence_id} holds lease token "
                    f"{r.lease_token}, not above token {r.previous_token} of run {r.previous_id} "
                    "that started before it",
                    {
                        "occurrence_id": r.occurrence_id,
                        "run_ids": (r.previous_id, r.run_id),
                        "lease_tokens": (r.previous_token, r.lease_token),
                    },
                    identity=(r.occurrence_id, r.previous_id, r.run_id),
                )
                for r in audit_store.tokens_out_of_order(conn, window.since)
            ]
        )

    def _cancelled_run_still_running(self, conn: audit_store.Conn, window: AuditWindow) -> Findings:
        return Findings(
            [
                Violation(
                    "cancelled_run_still_running",
                    f"occurrence {r.occurrence_id} of task {r.task_id} is cancelled while its "
                    f"run(s) {list(r.run_ids)} are still running",
                    {"occurrence_id": r.occurrence_id, "task_id": r.task_id, "run_ids": r.run_ids},
                    identity=(r.occurrence_id, r.run_ids),
                )
                for r in audit_store.cancelled_running(conn)
            ]
        )

    def _started_before_spread(self, conn: audit_store.Conn, window: AuditWindow) -> Findings:
        return Findings(
            [
                Violation(
                    "started_before_spread",
                    f"run {r.run_id} of occurrence {r.occurrence_id} (task {r.task_id}) started "
                    f"{(r.spread_start - r.started_at).total_seconds():.3f}s before its spread "
                    f"start {r.spread_start.isoformat()}",
                    {
                        "run_id": r.run_id,
                        "occurrence_id": r.occurrence_id,
                        "task_id": r.task_id,
                        "started_at": r.started_at,
                        "spread_start": r.spread_start,
                    },
                    identity=(r.run_id,),
                )
                for r in audit_store.started_before_spread(conn, window.since)
            ]
        )
