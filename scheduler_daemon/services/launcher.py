"""Launcher: admits queued occurrences under the fleet budget, launches them, starts their jobs."""

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog
from psycopg_pool import ConnectionPool

from scheduler_daemon.domain.held import HeldRun, HeldRuns
from scheduler_daemon.executors.base import Executor, JobContext
from scheduler_daemon.settings import DaemonSettings
from scheduler_daemon.storage import fleet_store, occurrence_store, run_store
from scheduler_daemon.storage.database import pooled_transaction

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
    fenced: int = 0
    started: list[Started] = field(default_factory=list)


class Launcher:
    """Admission: under the budget's transaction-scoped advisory lock, count what executes
    fleet-wide and claim at most min(free budget, free local slots). Launch: per claim, one
    transaction creates the run and marks the occurrence running; then the job starts."""

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

    def run_once(self) -> LaunchResult:
        result = LaunchResult()
        free_slots = self.settings.concurrency - len(self.held)
        if free_slots <= 0:
            return result
        with pooled_transaction(self.pool) as conn:
            fleet_store.lock_budget(conn)  # its own statement: the count below sees every claim
            free_budget = fleet_store.budget(conn) - occurrence_store.executing_count(conn)
            claims = occurrence_store.claim(
                conn,
                owner=self.instance_id,
                limit=min(free_budget, free_slots),
                claim_ttl=self.settings.claim_ttl,
            )
        result.claimed = len(claims)
        for claim in claims:
            log.info(
                "occurrence_claimed",
                task_id=claim["task_id"],
                occurrence_id=claim["id"],
                instance_id=self.instance_id,
                lease_token=claim["lease_token"],
            )
            started = self._launch(claim)
            if started is not None:
                result.launched += 1
                result.started.append(started)
            else:
                result.fenced += 1
        return result

    def _launch(self, claim: dict[str, Any]) -> Started | None:
        ids = {
            "task_id": claim["task_id"],
            "occurrence_id": claim["id"],
            "instance_id": self.instance_id,
        }
        token = claim["lease_token"]
        sent = time.monotonic()  # the lease starts no earlier than this on the database clock
        with pooled_transaction(self.pool) as conn:
            occ = occurrence_store.launch(conn, claim["id"], owner=self.instance_id, token=token)
            if occ is None:
                log.warning("launch_fenced", **ids)
                return None
            run = run_store.insert(
                conn,
                occurrence_id=claim["id"],
                attempt=occ["attempts"],
                owner=self.instance_id,
                token=token,
                ttl=self.settings.lease_ttl,
                grace=self.settings.lease_grace,
            )
        timeout = claim["run_timeout"].total_seconds() if claim["run_timeout"] else None
        ctx = JobContext(
            task_id=claim["task_id"],
            task_name=claim["task_name"],
            occurrence_id=claim["id"],
            run_id=run["id"],
            scheduled_for=claim["scheduled_for"],
            attempt=occ["attempts"],
            lease_token=token,
            idempotency_key=f"scheduler-daemon-occurrence-{claim['id']}",
            timeout=timeout,
            deadline=self.settings.trust_deadline(sent),
        )
        job = self.executors[claim["executor"]].start(ctx, claim["payload"])
        self.held.add(
            HeldRun(
                run_id=run["id"],
                token=token,
                occurrence_id=claim["id"],
                occurrence_seq=claim["occurrence_seq"],
                task_id=claim["task_id"],
                job=job,
                executor=claim["executor"],
                launched_at=time.monotonic(),
            )
        )
        log.info("run_started", run_id=run["id"], attempt=occ["attempts"], **ids)
        lag = (run["started_at"] - claim["scheduled_for"]).total_seconds()
        return Started(claim["executor"], lag, occ["attempts"])
