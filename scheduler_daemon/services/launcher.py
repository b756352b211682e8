"""Launcher: admits queued occurrences under the fleet budget, launches them, starts their jobs."""

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog
from psycopg_pool import ConnectionPool

from scheduler_daemon import logconfig
from scheduler_daemon.domain.claim import Claim, ClaimRequest, Launched
from scheduler_daemon.domain.held import HeldRun, HeldRuns
from scheduler_daemon.executors.base import Executor, JobContext
from scheduler_daemon.settings import DaemonSettings
from scheduler_daemon.storage import occurrence_store
from scheduler_daemon.storage.database import pooled_single_trip

log = structlog.get_logger()


@dataclass(frozen=True)
class Started:
    """One launched run, as the metrics see it."""

    executor: str
    start_lag_seconds: float  # run start minus the occurrence's scheduled time, database clock
    attempt: int


@dataclass
class LaunchResult:
    claimed: int = 0
    launched: int = 0
    started: list[Started] = field(default_factory=list)
    # The claim did not see the end of the queue (no free slot or budget, or a full batch): a
    # claim may find more without any new wake-up.
    more: bool = False


class Launcher:
    """Admission: in one transaction sent in one round trip, under the budget's
    transaction-scoped advisory lock (one lock per batch, no counter row), count what executes
    fleet-wide and claim at most min(free budget, free local slots), moving them straight to
    running with their runs. Then, after the commit, the jobs start."""

    def __init__(
        self,
        pool: ConnectionPool,
        *,
        instance_id: str,
        settings: DaemonSettings,
        held: HeldRuns,
        executors: Mapping[str, Executor],
    ) -> None:
        self.pool = pool
        self.instance_id = instance_id
        self.settings = settings
        self.held = held
        self.executors = executors

    def run_once(self, now: datetime | None = None) -> LaunchResult:
        """One batch: claim, launch, start. `now` pins the database clock (tests)."""
        request = self.request(now=now)
        if request is None:
            return LaunchResult(more=True)
        return self.launch(request, pooled_single_trip(self.pool, request.statement))

    def request(self, freed: int = 0, now: datetime | None = None) -> ClaimRequest | None:
        """The claim for this instance's free slots; None when no slot is free. `freed` > 0:
        the claim is sent after the successes of that many held runs, in their transaction
        (`Completer.run_once(claimer=...)`), and takes their slots too."""
        free_slots = self.settings.concurrency - len(self.held) + freed
        if free_slots <= 0:
            return None
        statement = occurrence_store.claim_launch_statement(
            owner=self.instance_id,
            slots=free_slots,
            ttl=self.settings.lease_ttl,
            grace=self.settings.lease_grace,
            now=now,
            after_successes=freed > 0,
        )
        return ClaimRequest(statement, time.monotonic())

    def launch(self, request: ClaimRequest, rows: list[dict[str, Any]]) -> LaunchResult:
        """Starts the jobs of the claim `request`, whose statement returned `rows` (committed)."""
        result = LaunchResult()
        limit, launched = occurrence_store.launched(rows)
        result.claimed = result.launched = len(launched)
        result.more = len(launched) >= limit
        deadline = self.settings.trust_deadline(request.made_at)
        for claim, run in launched:
            result.started.append(self._start(claim, run, deadline))
        return result

    def _start(self, claim: Claim, run: Launched, deadline: float) -> Started:
        timeout = claim.run_timeout.total_seconds() if claim.run_timeout else None
        ctx = JobContext(
            task_id=claim.task_id,
            task_name=claim.task_name,
            occurrence_id=claim.id,
            run_id=run.run_id,
            scheduled_for=claim.scheduled_for,
            attempt=run.attempt,
            lease_token=run.lease_token,
            idempotency_key=f"scheduler-daemon-occurrence-{claim.id}",
            timeout=timeout,
            deadline=deadline,
        )
        job = self.executors[claim.executor].start(ctx, claim.payload)
        self.held.add(
            HeldRun(
                run_id=run.run_id,
                token=run.lease_token,
                occurrence_id=claim.id,
                occurrence_seq=claim.occurrence_seq,
                task_id=claim.task_id,
                job=job,
                executor=claim.executor,
                launched_at=time.monotonic(),
            )
        )
        if logconfig.enabled(logging.INFO):
            log.info(
                "run_started",
                run_id=run.run_id,
                attempt=run.attempt,
                lease_token=run.lease_token,
                task_id=claim.task_id,
                occurrence_id=claim.id,
                instance_id=self.instance_id,
            )
        lag = (run.started_at - claim.scheduled_for).total_seconds()
        return Started(claim.executor, lag, run.attempt)
