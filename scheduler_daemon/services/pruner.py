"""Pruner: deletes finished history older than its retention, a bounded batch at a time.

The retention is the fleet setting `history-retention`, or a task's own `history_retention`;
with neither, nothing is deleted. A pass runs at most `batches` batches, each one short
transaction that deletes at most `batch` terminal occurrences (with their runs) among the at
most `scan` oldest finished ones after its cursor (occurrence_finished_idx), so a pass is bounded
however large the backlog, and holds no lock for long: rows another transaction holds are
skipped, not waited for. The cursor lives in memory and goes round: a row kept (a task's latest
outcome, a longer retention) is passed over once per sweep, not once per pass. A deleted task
keeps nothing: all its finished occurrences go after the retention (its task row and definition
history stay, a few bytes, as a tombstone). Called from the daemon's reconcile step, and by
`scheduler-daemon prune`.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog
from psycopg_pool import ConnectionPool

from scheduler_daemon.storage import fleet_store, retention_store
from scheduler_daemon.storage.database import UNIT_LIMITS, first_line, pooled_transaction
from scheduler_daemon.storage.error import LOCK_ERRORS

log = structlog.get_logger()
BATCH = 500  # occurrences deleted per transaction at most
BATCHES = 4  # transactions per daemon pass at most
SCAN_FACTOR = 4  # rows scanned per batch at most, as a multiple of BATCH


@dataclass
class PruneReport:
    dry_run: bool = False
    occurrences: int = 0
    runs: int = 0
    batches: int = 0
    swept: bool = False  # the cursor reached the end of the history
    retention: timedelta | None = None


class Pruner:
    def __init__(
        self,
        pool: ConnectionPool,
        *,
        instance_id: str,
        batch: int = BATCH,
        batches: int = BATCHES,
        scan_factor: int = SCAN_FACTOR,
    ) -> None:
        self.pool = pool
        self.batch = batch
        self.batches = batches
        self.scan = batch * scan_factor
        self.after = retention_store.START
        self.log = log.bind(instance_id=instance_id)

    def run_once(
        self, *, dry_run: bool = False, until_swept: bool = False, now: datetime | None = None
    ) -> PruneReport:
        """One pass: at most `batches` batches, or with `until_swept` as many as it takes to
        reach the end of the history once (`prune`)."""
        report = PruneReport(dry_run=dry_run)
        with pooled_transaction(self.pool) as conn:
            retention = fleet_store.history_retention(conn)
            shortest = retention_store.min_override(conn)
        report.retention = retention
        bounds = [r for r in (retention, shortest) if r is not None]
        if not bounds:
            return report  # no retention anywhere: keep everything
        if dry_run or until_swept:
            self.after = retention_store.START
        try:
            while until_swept or report.batches < self.batches:
                with pooled_transaction(self.pool, UNIT_LIMITS) as conn:
                    batch = retention_store.prune(
                        conn,
                        retention=retention,
                        min_retention=min(bounds),
                        after=self.after,
                        scan=self.scan,
                        limit=self.batch,
                        dry_run=dry_run,
                        now=now,
                    )
                report.batches += 1
                report.occurrences += batch.occurrences
                report.runs += batch.runs
                if batch.after is None:
                    self.after, report.swept = retention_store.START, True
                    break
                if dry_run or batch.occurrences < self.batch:
                    self.after = batch.after  # everything due in that window is gone
                # else: the batch was full; the same window holds more, so stay on it
        except LOCK_ERRORS as exc:  # a held row: the rest waits for the next pass
            self.log.warning("prune_batch_failed", error=first_line(exc))
        if report.occurrences:
            self.log.info(
                "history_pruned",
                dry_run=dry_run,
                occurrences=report.occurrences,
                runs=report.runs,
            )
        return report
