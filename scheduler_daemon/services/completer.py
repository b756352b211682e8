"""Completer: writes the finished jobs' outcomes, a batch per fenced transaction (task,
occurrence, run), one unit per run when a batch meets a locked row or a value it cannot store."""

import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog
from psycopg_pool import ConnectionPool

from scheduler_daemon import logconfig
from scheduler_daemon.domain.held import HeldRun, HeldRuns
from scheduler_daemon.domain.occurrence import Occurrence
from scheduler_daemon.domain.outcome import Decision, decide, settlement
from scheduler_daemon.domain.status import OccurrenceStatus, OutcomeStatus, RunStatus
from scheduler_daemon.domain.storable import storable_error, storable_output
from scheduler_daemon.storage import occurrence_store, run_store, task_store
from scheduler_daemon.storage.database import (
    FIRST_TRY_LIMITS,
    UNIT_LIMITS,
    Conn,
    Limits,
    Statement,
    first_line,
    transaction,
)
from scheduler_daemon.storage.error import (
    LOCK_ERRORS,
    UNSTORABLE_ERRORS,
    DatabaseUnavailable,
    about_the_row,
    sqlstate,
)
from scheduler_daemon.storage.run_store import RunEnd

log = structlog.get_logger()
Completion = Literal["recorded", "retry", "fenced"]
# A completion that could not lock its rows waits this long before it is tried again, so a row
# held for minutes costs the loop one short lock wait every few seconds, not every pass.
DEFER_SECONDS = 2.0


@dataclass(frozen=True)
class Finished:
    """One outcome written, as the metrics see it."""

    status: str  # the run's recorded status: success, failed, timeout, interrupted, cancelled
    executor: str
    duration_seconds: float  # job start to outcome, on this host's monotonic clock


@dataclass
class CompleteResult:
    done: int = 0  # runs that left the held set (written, or dropped as fenced)
    kept: int = 0  # outcomes kept in memory because the database is unreachable
    fenced: int = 0  # completions that found the token moved on
    unstorable: int = 0  # outcomes written without their output, or whose task was parked
    finished: list[Finished] = field(default_factory=list)


@dataclass
class Finishing:
    """What one pass writes, as `gather` sorted it: the successes (one batch, which may carry the
    claim for the slots they free), the other outcomes, and those deferred by a locked row
    earlier (each tried again with the full unit wait after the rest)."""

    successes: list[HeldRun]
    others: list[HeldRun]
    deferred: list[HeldRun]
    result: CompleteResult
    claimed: list[dict[str, Any]] | None = None  # what the claim sent with the successes returned


def storable(outcome: Any) -> Any:
    """A job's Outcome as it may reach SQL: its output and error made storable (NUL and unpaired
    surrogates replaced, sizes capped); None stays None. Idempotent."""
    if outcome is None:
        return None
    output, error = storable_output(outcome.output_tail), storable_error(outcome.error)
    if output is outcome.output_tail and error is outcome.error:
        return outcome  # already storable: no copy on the hot path
    return dataclasses.replace(outcome, output_tail=output, error=error)


def run_end(run: HeldRun, status: RunStatus) -> RunEnd:
    """The row that records a finished held run's outcome as `status` (the one builder of the
    unit, batch and success writes): an empty output is stored as NULL."""
    outcome = run.outcome
    return RunEnd(
        run_id=run.run_id,
        token=run.token,
        occurrence_id=run.occurrence_id,
        task_id=run.task_id,
        status=status,
        exit_code=outcome.exit_code,
        http_status=outcome.http_status,
        output_tail=outcome.output_tail or None,
        error=outcome.error,
    )


class Fenced(Exception):
    """Raised inside the completion transaction to roll it back when the token moved on."""


class Completer:
    """Finished jobs' outcomes are kept in memory until written, so a database outage loses none;
    writing is idempotent and fenced on (owner, token): a late writer changes nothing."""

    def __init__(
        self, pool: ConnectionPool, *, instance_id: str, held: HeldRuns, max_interruptions: int
    ) -> None:
        self.pool = pool
        self.instance_id = instance_id
        self.held = held
        self.max_interruptions = max_interruptions

    def run_once(self, *, wake_peers: bool = True) -> CompleteResult:
        """Writes every finished job's outcome; `done` counts the runs that left the held set.
        `wake_peers=False` when this loop claims right after (its freed slots take what the
        outcomes unblock): the successes then wake no other daemon. A loop pass does it in
        three steps, its claim sent with the successes (`Services.write_and_refill`)."""
        finishing = self.gather()
        self.write_successes(finishing, wake_peers=wake_peers)
        return self.write_rest(finishing)

    def gather(self) -> Finishing:
        """Polls the held jobs and sorts the finished ones for this pass; a fenced one leaves
        the held set here."""
        finishing = Finishing([], [], [], CompleteResult())
        ready: list[HeldRun] = []
        for run in self.held:
            if run.outcome is None:
                run.outcome = storable(run.job.poll())
                if run.outcome is not None:
                    run.finished_after = time.monotonic() - run.launched_at
            if run.outcome is None or run.retry_at > time.monotonic():
                continue
            if run.fenced:
                self.held.remove(run.run_id)
                if run.trace is not None:  # the renewal found it fenced (and said so on it)
                    run.trace.end("fenced", "fenced: the lease was taken over or cancelled")
                finishing.result.done += 1
                continue
            # A deferred one waits its full unit wait after the others.
            (finishing.deferred if run.retry_at > 0 else ready).append(run)
        for run in ready:
            success = run.outcome is not None and run.outcome.status == OutcomeStatus.SUCCESS
            (finishing.successes if success else finishing.others).append(run)
        return finishing

    def write_successes(
        self, finishing: Finishing, *, wake_peers: bool, then: Statement | None = None
    ) -> list[dict[str, Any]] | None:
        """Writes the successes in one transaction sent in one round trip, and `then` (the
        claim for the slots they free) after them in it: both commit, or neither. Returns the
        rows `then` returned once committed; None when it was not (no successes, the database
        unreachable, or a locked row or a value it cannot store: then the successes join the
        others, each written on its own, so such a row delays or mends only its own)."""
        if not finishing.successes:
            return None
        write = functools.partial(self._write_successes, finishing, wake_peers, then)
        if not self._attempt_batch(finishing.successes, finishing.result, write):
            finishing.others += finishing.successes
        return finishing.claimed

    def write_rest(self, finishing: Finishing) -> CompleteResult:
        """Writes the other outcomes: together, under a short lock wait; one unit per run when
        the batch meets a locked row or a value it cannot store (each unit's first try waits
        briefly; the ones still locked, and those deferred earlier, are tried again with the
        full unit wait, and deferred again, kept for DEFER_SECONDS, if still locked)."""
        others, result = finishing.others, finishing.result
        locked = list(finishing.deferred)
        if len(others) < 2 or not self._attempt_batch(others, result, self._write_batch):
            for run in others:
                if not self._attempt(run, FIRST_TRY_LIMITS, result):
                    locked.append(run)
        for run in locked:
            self._attempt(run, UNIT_LIMITS, result)
        return result

    def _attempt_batch(
        self,
        runs: list[HeldRun],
        result: CompleteResult,
        write: Callable[[list[HeldRun]], dict[int, Completion]],
    ) -> bool:
        """One try at writing every run of `runs` in one transaction (`write`); False when some
        row was locked past FIRST_TRY_LIMITS or some value could not be stored (nothing was
        written: the caller goes unit by unit)."""
        for run in runs:
            run.completing = True  # the lease keeper neither renews nor fences them meanwhile
        try:
            completions = write(runs)
        except DatabaseUnavailable as exc:
            self._keep(runs, exc, result)
            return True
        except LOCK_ERRORS + UNSTORABLE_ERRORS:
            return False
        except Exception as exc:  # about one row (`about_the_row`): each unit on its own
            if not about_the_row(exc):
                raise
            return False
        finally:
            for run in runs:
                run.completing = False
        for run in runs:
            completion = completions[run.run_id]
            self.held.remove(run.run_id)
            result.done += 1
            self._log(run, completion)
            if completion == "fenced":
                result.fenced += 1
            else:
                result.finished.append(
                    Finished(run.recorded_status, run.executor, run.finished_after)
                )
        return True

    def _write_successes(
        self, finishing: Finishing, wake_peers: bool, then: Statement | None, runs: list[HeldRun]
    ) -> dict[int, Completion]:
        """Successes need no decision from the locked rows (success is final whatever the
        attempts or a cancel request): the whole batch in one round trip, with `then`, whose
        rows are kept in `finishing.claimed`."""
        written, finishing.claimed = run_store.succeed_many(
            self.pool,
            [run_end(run, RunStatus.SUCCESS) for run in runs],
            owner=self.instance_id,
            limits=FIRST_TRY_LIMITS,
            wake_peers=wake_peers,
            then=then,
        )
        completions: dict[int, Completion] = {}
        for run in runs:
            if run.run_id in written:
                run.recorded_status = RunStatus.SUCCESS
                completions[run.run_id] = "recorded"
            else:
                completions[run.run_id] = "fenced"
        return completions

    def _write_batch(self, runs: list[HeldRun]) -> dict[int, Completion]:
        with transaction(self.pool, FIRST_TRY_LIMITS) as tx:
            return self._write_locked(tx.conn, runs)

    def _write_locked(self, conn: Conn, runs: list[HeldRun]) -> dict[int, Completion]:
        """Locks task → occurrence → run for the whole batch (each table in id order), decides
        each outcome, and writes them with one fenced statement per table."""
        tasks = task_store.lock_many(conn, [run.task_id for run in runs])
        occurrences = occurrence_store.lock_many(conn, [run.occurrence_id for run in runs])
        completions: dict[int, Completion] = {}
        decided: list[tuple[HeldRun, Occurrence, Decision]] = []
        for run in runs:
            task, occ = tasks.get(run.task_id), occurrences.get(run.occurrence_id)
            if (
                task is None
                or occ is None
                or occ.lease_token != run.token
                or occ.status != OccurrenceStatus.RUNNING
            ):
                completions[run.run_id] = "fenced"
                continue
            decided.append((run, occ, self._decide(run, occ, task.spec)))
        written = run_store.finish_many(
            conn,
            [run_end(run, decision.run_status) for run, _, decision in decided],
            owner=self.instance_id,
        )
        settled: list[tuple[Occurrence, int, Any]] = []
        for run, occ, decision in decided:
            if run.run_id not in written:  # the run row moved on: write nothing for it
                completions[run.run_id] = "fenced"
                continue
            run.recorded_status = decision.run_status
            settled.append((occ, run.token, settlement(occ, decision, run.outcome.error)))
            completions[run.run_id] = "recorded" if decision.final else "retry"
        occurrence_store.settle_many(conn, settled)
        return completions

    def _decide(self, run: HeldRun, occ: Occurrence, spec: Any) -> Decision:
        assert run.outcome is not None  # only finished runs are written
        return decide(
            run.outcome.status,
            attempts=occ.attempts,
            max_attempts=spec.max_attempts,
            interruptions=occ.interruptions,
            max_interruptions=self.max_interruptions,
            backoff=spec.backoff,
            backoff_max=spec.backoff_max,
            cancel_reason=occ.cancel_reason,
            requeue_delay=run.requeue_delay,
        )

    def _log(self, run: HeldRun, completion: Completion) -> None:
        """The completion's log line, and the end of the run's span (tracing on)."""
        if run.trace is not None:
            self._end_trace(run, completion)
        ids = {
            "run_id": run.run_id,
            "occurrence_id": run.occurrence_id,
            "task_id": run.task_id,
            "instance_id": self.instance_id,
        }
        if completion == "fenced":
            log.warning("run_fenced", stage="completion", **ids)
            return
        if not logconfig.enabled(logging.INFO):
            return
        outcome = run.outcome
        log.info(
            "run_finished",
            status=outcome.status,
            exit_code=outcome.exit_code,
            http_status=outcome.http_status,
            error=outcome.error,
            result=completion,
            **ids,
        )

    @staticmethod
    def _end_trace(run: HeldRun, completion: Completion) -> None:
        assert run.trace is not None
        assert run.outcome is not None
        if completion == "fenced":
            run.trace.event("fenced", {"stage": "completion"})
            run.trace.end("fenced", "fenced: the token moved on before the outcome was written")
        else:
            run.trace.end(run.recorded_status, run.outcome.error)

    def _keep(self, runs: list[HeldRun], exc: Exception, result: CompleteResult) -> None:
        """The database is unreachable: the outcomes stay held (their leases renewed) and are
        written on a later pass."""
        for run in runs:
            log.warning(
                "outcome_kept_for_later",
                run_id=run.run_id,
                error=str(exc),
                occurrence_id=run.occurrence_id,
                instance_id=self.instance_id,
            )
        result.kept += len(runs)

    def _attempt(self, run: HeldRun, limits: Limits, result: CompleteResult) -> bool:
        """One try at writing `run`'s outcome; False when its rows were locked past `limits`."""
        try:
            completion = self._complete_storable(run, limits, result)
        except DatabaseUnavailable as exc:
            self._keep([run], exc, result)
            return True
        except LOCK_ERRORS as exc:
            if limits is FIRST_TRY_LIMITS:
                return False
            run.retry_at = time.monotonic() + DEFER_SECONDS
            log.warning(
                "outcome_deferred",
                run_id=run.run_id,
                occurrence_id=run.occurrence_id,
                task_id=run.task_id,
                error=first_line(exc),
                retry_in_seconds=DEFER_SECONDS,
                instance_id=self.instance_id,
            )
            result.kept += 1
            return True
        result.done += 1
        if completion == "fenced":
            result.fenced += 1
        elif completion != "parked":
            result.finished.append(Finished(run.recorded_status, run.executor, run.finished_after))
        return True

    def _complete_storable(
        self, run: HeldRun, limits: Limits, result: CompleteResult
    ) -> Completion | Literal["parked"]:
        """`complete`, isolating a poison row: an outcome the database refuses to store (a data
        or constraint error) is written again without its output and with its error replaced
        by `outcome not storable: SQLSTATE <code>`; if even that is refused, or the completion
        raised about its row's values (`about_the_row`: `outcome not recordable: <error>`), its
        task is parked with that error (as the dispatcher parks a task it cannot plan), the run
        leaves the held set and is left to the takeover. Either way the pass goes on, and
        supervision never counts it."""
        try:
            return self.complete(run, limits)
        except UNSTORABLE_ERRORS as exc:
            error = f"outcome not storable: SQLSTATE {sqlstate(exc)}"
            self._log_unstorable(run, "outcome_not_storable", error, exc)
        except Exception as exc:
            if not about_the_row(exc):
                raise
            error = f"outcome not recordable: {first_line(exc)}"
            self._log_unstorable(run, "task_parked", error, exc)
            result.unstorable += 1
            return self._park(run, error, limits)
        result.unstorable += 1
        assert run.outcome is not None
        run.outcome = dataclasses.replace(run.outcome, output_tail="", error=error)
        try:
            return self.complete(run, limits)
        except UNSTORABLE_ERRORS as exc:
            self._log_unstorable(run, "task_parked", error, exc)
        return self._park(run, error, limits)

    def _park(self, run: HeldRun, error: str, limits: Limits) -> Literal["parked"]:
        """Parks `run`'s task with `error` and drops the run, left to the takeover."""
        with transaction(self.pool, limits) as tx:
            task_store.park(tx.conn, run.task_id, error=error, now=task_store.clock(tx.conn))
        run.job.stop(error)  # over already; stop() is safe on a finished job
        if run.trace is not None:
            run.trace.end("parked", error)
        self.held.remove(run.run_id)
        return "parked"

    def _log_unstorable(self, run: HeldRun, event: str, error: str, exc: Exception) -> None:
        log.error(  # one line per poison row: the SQLSTATE says what it was
            event,
            error=error,
            cause=first_line(exc),
            run_id=run.run_id,
            occurrence_id=run.occurrence_id,
            task_id=run.task_id,
            instance_id=self.instance_id,
        )

    def complete(self, run: HeldRun, limits: Limits = UNIT_LIMITS) -> Completion:
        """Writes one finished run's outcome and drops it from the held set (unless the database
        is unreachable: then it stays held, its lease renewed, and is written later)."""
        run.completing = True  # the lease keeper neither renews nor fences it meanwhile
        run.outcome = storable(run.outcome)
        try:
            result = self._complete(run, limits)
            self.held.remove(run.run_id)
            return result
        finally:
            run.completing = False

    def _complete(self, run: HeldRun, limits: Limits) -> Completion:
        try:
            with transaction(self.pool, limits) as tx:
                result = self._write(tx.conn, run)
        except Fenced:
            self._log(run, "fenced")
            return "fenced"
        self._log(run, result)
        return result

    def _write(self, conn: Conn, run: HeldRun) -> Completion:
        task = task_store.lock_row(conn, run.task_id)  # parent first: task → occurrence → run
        occ = occurrence_store.lock(conn, run.occurrence_id)
        row = run_store.lock(conn, run.run_id)
        if (
            task is None
            or occ is None
            or row is None
            or occ.lease_token != run.token
            or occ.status != OccurrenceStatus.RUNNING
        ):
            raise Fenced
        decision = self._decide(run, occ, task.spec)
        if not run_store.finish(conn, run_end(run, decision.run_status), owner=self.instance_id):
            raise Fenced
        run.recorded_status = decision.run_status
        return occurrence_store.settle(
            conn, occ, token=run.token, settlement=settlement(occ, decision, run.outcome.error)
        )
