"""Launcher: admits queued occurrences under the fleet budget, launches them, starts their jobs;
names whoever keeps the budget's lock from its claims."""

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
import structlog
from psycopg_pool import ConnectionPool

from scheduler_daemon import logconfig
from scheduler_daemon.domain.claim import Claim, Launched
from scheduler_daemon.domain.held import HeldRun, HeldRuns
from scheduler_daemon.domain.lock_holder import REPORT_EVERY_SECONDS, LockHolder, holder_fields
from scheduler_daemon.domain.status import OutcomeStatus
from scheduler_daemon.domain.trace import RunTrace, RunTracer
from scheduler_daemon.executors.base import Executor, FinishedJob, Job, JobContext, Outcome
from scheduler_daemon.executors.wire import NOT_STARTED_ERROR as NOT_STARTED
from scheduler_daemon.settings import DaemonSettings
from scheduler_daemon.storage import fleet_store, migration, occurrence_store
from scheduler_daemon.storage.database import Statement, first_line, one_trip, transaction
from scheduler_daemon.storage.error import DatabaseUnavailable

log = structlog.get_logger()
IN_PROCESS = "inprocess"  # the executors' key of the in-process one (runtime.root)


@dataclass(frozen=True)
class ClaimRequest:
    """A claim ready to be sent: its named statement and parameters, and when it was made on
    this host's monotonic clock (the leases it takes start no earlier, so its jobs' trust
    deadline counts from then). Sent alone (`run_once`), or after the successes whose slots it
    fills, in their transaction (`runtime.root.Services.write_and_refill`)."""

    statement: Statement
    made_at: float


@dataclass(frozen=True)
class Started:
    """One launched run, as the metrics see it."""

    executor: str
    start_lag_seconds: float  # run start minus the occurrence's spread start, database clock
    attempt: int


@dataclass
class LaunchResult:
    claimed: int = 0
    launched: int = 0
    started: list[Started] = field(default_factory=list)
    # The claim did not see the end of the queue (no free slot or budget, or a full batch): a
    # claim may find more without any new wake-up.
    more: bool = False
    # How long this instance's claims have been failing to take the fleet budget's lock, from
    # the first that failed (0.0: this claim took it); None: no claim was sent.
    budget_blocked_seconds: float | None = None
    budget_lock_timeout: bool = False  # this claim gave up waiting for the budget's lock
    # Launched runs whose job was refused: the trust deadline had passed before it could start.
    not_started: int = 0


class Launcher:
    """Admission: in one transaction sent in one round trip, under the budget's
    transaction-scoped advisory lock (one lock per batch, no counter row), count what executes
    fleet-wide and claim at most min(free budget, free local slots), moving them straight to
    running with their runs. Then, after the commit, the jobs start.

    A claim that waited its whole lock wait for the budget's lock is a normal outcome, not a
    failed pass: any role can hold that lock (it needs no privilege), and only a look at who
    holds it tells an operator what to end. The launcher looks, logs `budget_lock_held` naming
    the holder at most once a minute while its claims stay blocked, and reports how long they
    have been (`LaunchResult.budget_blocked_seconds`, a metric)."""

    def __init__(
        self,
        pool: ConnectionPool,
        *,
        instance_id: str,
        settings: DaemonSettings,
        held: HeldRuns,
        executors: Mapping[str, Executor],
        tracer: RunTracer | None = None,
        known: Sequence[str] | None = None,
    ) -> None:
        self.pool = pool
        self.tracer = tracer  # None: tracing off (--otel), nothing spent per run
        # The revisions whose marked occurrences it may claim (ADR 0029): its own chain's.
        self.known = list(known) if known is not None else migration.known_revisions()
        self.instance_id = instance_id
        self.settings = settings
        self.held = held
        self.executors = executors
        self._blocked_since: float | None = None  # monotonic: the first claim that was blocked
        self._reported_at: float | None = None  # monotonic: the last `budget_lock_held` line

    def run_once(self, now: datetime | None = None) -> LaunchResult:
        """One batch: claim, launch, start. `now` pins the database clock (tests)."""
        request = self.request(now=now)
        if request is None:
            return LaunchResult(more=True)
        try:
            (rows,) = one_trip(self.pool, request.statement)
        except psycopg.errors.LockNotAvailable as exc:
            if not fleet_store.is_budget_lock_wait(exc):
                raise
            return self._blocked(request)
        return self.launch(request, rows)

    def request(self, freed: int = 0, now: datetime | None = None) -> ClaimRequest | None:
        """The claim for this instance's free slots; None when no slot is free. `freed` > 0:
        the claim is sent after the successes of that many held runs, in their transaction
        (`runtime.root.Services.write_and_refill`), and takes their slots too."""
        free_slots = self.settings.concurrency - len(self.held) + freed
        if free_slots <= 0:
            return None
        if freed and self._blocked_since is not None:
            # The budget's lock is held: a claim sent with the successes would hold them back
            # for its whole wait and then undo them. They go alone; the loop claims on its own.
            return None
        statement = occurrence_store.claim_launch_statement(
            owner=self.instance_id,
            slots=free_slots,
            ttl=self.settings.lease_ttl,
            grace=self.settings.lease_grace,
            known=self.known,
            now=now,
            after_successes=freed > 0,
        )
        return ClaimRequest(statement, time.monotonic())

    def launch(self, request: ClaimRequest, rows: list[dict[str, Any]]) -> LaunchResult:
        """Starts the jobs of the claim `request`, whose statement returned `rows` (committed)."""
        result = LaunchResult(budget_blocked_seconds=0.0)
        self._unblocked()
        limit, launched = occurrence_store.launched(rows)
        result.claimed = result.launched = len(launched)
        result.more = len(launched) >= limit
        deadline = self.settings.trust_deadline(request.made_at)
        for claim, run in launched:
            started = self._start(claim, run, deadline, request.made_at)
            if started is None:
                result.not_started += 1
            else:
                result.started.append(started)
        return result

    def _blocked(self, request: ClaimRequest) -> LaunchResult:
        """The claim `request` gave up waiting for the budget's lock (nothing was claimed):
        look up who holds it, and say so at most once a minute."""
        now = time.monotonic()
        if self._blocked_since is None:
            self._blocked_since = request.made_at
        blocked = now - self._blocked_since
        if self._reported_at is None or now - self._reported_at >= REPORT_EVERY_SECONDS:
            self._reported_at = now
            self._report(blocked)
        return LaunchResult(budget_blocked_seconds=blocked, budget_lock_timeout=True)

    def _report(self, blocked: float) -> None:
        """One `budget_lock_held` line: the oldest holder, and how many there are."""
        holders: list[LockHolder] = []
        error = None
        try:
            with transaction(self.pool) as tx:
                holders = fleet_store.budget_lock_holders(tx.conn)
        except (psycopg.Error, DatabaseUnavailable) as exc:
            error = first_line(exc)
        log.warning(
            "budget_lock_held",
            **holder_fields(holders[0] if holders else None),
            holders=len(holders),
            blocked_seconds=round(blocked, 3),
            lookup_error=error,
            instance_id=self.instance_id,
        )

    def _unblocked(self) -> None:
        """A claim took the budget's lock: a blocked spell that was reported ends with a line."""
        if self._blocked_since is not None and self._reported_at is not None:
            log.info(
                "budget_lock_released",
                blocked_seconds=round(time.monotonic() - self._blocked_since, 3),
                instance_id=self.instance_id,
            )
        self._blocked_since = self._reported_at = None

    def _executor(self, claim: Claim) -> Executor:
        """The executor of a claim's job: the in-process one for a task marked so, else its
        executor's."""
        return self.executors[IN_PROCESS if claim.in_process else claim.executor]

    def _start(
        self, claim: Claim, run: Launched, deadline: float, made_at: float
    ) -> Started | None:
        """Starts `run`'s job, unless its trust deadline passed since the claim was sent (this
        process froze between them; a peer may have taken the run over and started it again):
        then the executor is never called (None), and the run is held with a job over before it
        began, `stopped` with NOT_STARTED_ERROR, which the completer records `interrupted`,
        fenced on owner and token, its occurrence queued again with its attempt given back.
        With tracing on, the run's span starts here and its context goes to the job."""
        trace = None if self.tracer is None else self._trace(claim, run, made_at)
        refused = time.monotonic() >= deadline
        if refused:
            job: Job = FinishedJob(run.run_id, Outcome(OutcomeStatus.STOPPED, error=NOT_STARTED))
        else:
            job = self._job(claim, run, deadline, trace)
        self.held.add(
            HeldRun(
                run_id=run.run_id,
                token=claim.lease_token,
                occurrence_id=claim.id,
                task_id=claim.task_id,
                job=job,
                executor=claim.executor,
                launched_at=time.monotonic(),
                trace=trace,
            )
        )
        if refused:
            log.warning(
                "run_not_started",
                error=NOT_STARTED,
                late_seconds=round(time.monotonic() - deadline, 3),
                run_id=run.run_id,
                lease_token=claim.lease_token,
                task_id=claim.task_id,
                occurrence_id=claim.id,
                instance_id=self.instance_id,
            )
            return None
        # A job over before it began (a payload it cannot run, `run_start_failed`) never started.
        if logconfig.enabled(logging.INFO) and not isinstance(job, FinishedJob):
            log.info(
                "run_started",
                run_id=run.run_id,
                attempt=run.attempt,
                lease_token=claim.lease_token,
                task_id=claim.task_id,
                occurrence_id=claim.id,
                instance_id=self.instance_id,
            )
        lag = (run.started_at - claim.spread_start).total_seconds()
        return Started(claim.executor, lag, run.attempt)

    def _job(self, claim: Claim, run: Launched, deadline: float, trace: RunTrace | None) -> Job:
        """`run`'s job, started by its executor; a job over before it began, `failed` with the
        error, when its claimed row could not be read or the executor's start raised (a value
        written behind the checks at entry): held like any other, its outcome written by the
        completer, fenced on owner and token, in a transaction after the claim's. One row's
        failure is that run's outcome; the other rows of the batch launch."""
        error = claim.unreadable
        if error is None:
            try:
                return self._executor(claim).start(
                    _context(claim, run, deadline, trace), claim.payload
                )
            except Exception as exc:  # a value of this row the executor cannot take
                error = f"start failed: {first_line(exc)}"  # capped as any error (completer)
        log.error(
            "run_start_failed",
            error=error,
            run_id=run.run_id,
            task_id=claim.task_id,
            occurrence_id=claim.id,
            instance_id=self.instance_id,
        )
        return FinishedJob.failed(run.run_id, error)

    def _trace(self, claim: Claim, run: Launched, made_at: float) -> RunTrace | None:
        """The run's span (tracer set), its `claim` event dated when the claim was sent."""
        assert self.tracer is not None
        claimed_at_ns = time.time_ns() - int((time.monotonic() - made_at) * 1e9)
        return self.tracer.run_started(
            {
                "scheduler.task.name": claim.task_name,
                "scheduler.task.id": claim.task_id,
                "scheduler.occurrence.id": claim.id,
                "scheduler.run.id": run.run_id,
                "scheduler.run.uuid": str(run.run_uuid),
                "scheduler.attempt": run.attempt,
                "scheduler.lease_token": claim.lease_token,
                "scheduler.idempotency_key": claim.idempotency_key,
                "scheduler.executor": IN_PROCESS if claim.in_process else claim.executor,
                "scheduler.instance_id": self.instance_id,
            },
            claimed_at_ns,
        )


def _context(claim: Claim, run: Launched, deadline: float, trace: RunTrace | None) -> JobContext:
    """What the job of `run` is given."""
    return JobContext(
        task_id=claim.task_id,
        task_name=claim.task_name,
        occurrence_id=claim.id,
        run_id=run.run_id,
        scheduled_for=claim.scheduled_for,
        attempt=run.attempt,
        lease_token=claim.lease_token,
        idempotency_key=claim.idempotency_key,
        timeout=claim.run_timeout.total_seconds() if claim.run_timeout else None,
        deadline=deadline,
        run_uuid=str(run.run_uuid),
        traceparent=None if trace is None else trace.traceparent,
        args=claim.args,
    )
