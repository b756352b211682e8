"""Pruner: deletes finished history older than its retention, a bounded batch at a time.

The retention is the fleet setting `history-retention`, or a task's own `history_retention`;
with neither, nothing is deleted. A pass runs at most `batches` batches, each one short
transaction that deletes at most `batch` terminal occurrences (with their runs) among the at
most `scan` oldest finished ones after its cursor (occurrence_finished_idx), so a pass is bounded
however large the backlog, and holds no lock for long: rows another transaction holds are
skipped, not waited for. The cursor lives in memory and goes round: a row kept (a task's latest
outcome, a longer retention) is passed over once per sweep, not once per pass. A deleted task
keeps nothing: all its finished occurrences go after the retention (its task row and definition
history stay, a few bytes, as a tombstone). The statement that deletes also raises each task's
mark, the newest scheduled firing deleted (task_pruned), so `audit` knows which firings are gone
whatever the retention is later set to (two prunes marking one task wait for each other, one
short transaction at most). A batch that fails on a row it cannot delete (a data
or integrity error: a value written by hand, a trigger or key an operator added) is done again
a task per transaction; the task whose rows still fail is logged and passed over, and every
other task's history is still pruned. A pass also deletes the `deadline` notifications written
before their firing had a row (no cascade reaches them) once past the same retention. Every
retention is capped at 100 years in SQL, so none written by hand subtracts from now() past the
calendar. On history partitioned by time (ADR 0033) the fleet's retention is taken one
partition interval later here, so that what the partition upkeep drops whole is not deleted
row by row first: this prune keeps what a drop cannot do (a task's shorter retention, the rows
kept in or fallen into the DEFAULT partition, and everything while the upkeep stalls). Called
from the daemon's reconcile step, and by `scheduler-daemon prune`.
"""

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime, timedelta
from functools import partial

import structlog
from psycopg_pool import ConnectionPool

from scheduler_daemon.storage import fleet_store, outbox_store, partition_store, retention_store
from scheduler_daemon.storage.database import UNIT_LIMITS, first_line, transaction
from scheduler_daemon.storage.error import LOCK_ERRORS, UNSTORABLE_ERRORS, sqlstate
from scheduler_daemon.storage.retention_store import Batch

log = structlog.get_logger()
BATCH = 500  # occurrences deleted per transaction at most
BATCHES = 4  # transactions per daemon pass at most
SCAN_FACTOR = 4  # rows scanned per batch at most, as a multiple of BATCH


@dataclass
class PruneReport:
    dry_run: bool = False
    occurrences: int = 0
    runs: int = 0
    notifications: int = 0  # `deadline` notifications of firings that had no row when written
    batches: int = 0
    swept: bool = False  # the cursor reached the end of the history
    retention: timedelta | None = None


@dataclass(eq=False)
class Pruner:
    pool: ConnectionPool
    _: KW_ONLY
    instance_id: str
    batch: int = BATCH
    batches: int = BATCHES
    scan_factor: int = SCAN_FACTOR
    after: tuple[datetime, int] = field(default=retention_store.START, init=False)  # cursor

    def __post_init__(self) -> None:
        self.scan = self.batch * self.scan_factor
        self.log = log.bind(instance_id=self.instance_id)

    def run_once(
        self, *, dry_run: bool = False, until_swept: bool = False, now: datetime | None = None
    ) -> PruneReport:
        """One pass: at most `batches` batches, or with `until_swept` as many as it takes to
        reach the end of the history once (`prune`)."""
        report = PruneReport(dry_run=dry_run)
        with transaction(self.pool) as tx:
            retention = fleet_store.history_retention(tx.conn)
            shortest = retention_store.min_override(tx.conn)
            by_row = partition_store.row_by_row_retention(tx.conn, retention)
        report.retention = retention
        bounds = [r for r in (by_row, shortest) if r is not None]
        if not bounds:
            return report  # no retention anywhere: keep everything
        if dry_run or until_swept:
            self.after = retention_store.START
        prune = partial(
            retention_store.prune,
            retention=by_row,
            min_retention=min(bounds),
            scan=self.scan,
            dry_run=dry_run,
            now=now,
        )
        try:
            while until_swept or report.batches < self.batches:
                try:
                    with transaction(self.pool, UNIT_LIMITS) as tx:
                        batch = prune(tx.conn, after=self.after, limit=self.batch)
                    full = batch.occurrences >= self.batch
                except UNSTORABLE_ERRORS:  # one task's rows: the same window, a task at a time
                    batch, full = self._by_task(prune, min(bounds), now), False
                report.batches += 1
                report.occurrences += batch.occurrences
                report.runs += batch.runs
                if batch.after is None:
                    self.after, report.swept = retention_store.START, True
                    break
                if dry_run or not full:
                    self.after = batch.after  # everything due in that window is gone
                # else: the batch was full; the same window holds more, so stay on it
            if not dry_run:  # what no occurrence's cascade reaches (ADR 0016)
                with transaction(self.pool, UNIT_LIMITS) as tx:
                    report.notifications = outbox_store.prune_unrecorded(
                        tx.conn, retention=retention, min_retention=min(bounds), limit=self.batch
                    )
        except LOCK_ERRORS as exc:  # a held row: the rest waits for the next pass
            self.log.warning("prune_batch_failed", error=first_line(exc))
        if report.occurrences or report.notifications:
            self.log.info(
                "history_pruned",
                dry_run=dry_run,
                occurrences=report.occurrences,
                runs=report.runs,
                notifications=report.notifications,
            )
        return report

    def _by_task(
        self, prune: Callable[..., Batch], min_retention: timedelta, now: datetime | None
    ) -> Batch:
        """The batch at the cursor once more, one transaction per task of its window, each with
        room for all of that task's rows in it; a task whose rows still cannot be deleted is
        logged and passed over. Returns the sum, with the cursor after the window."""
        with transaction(self.pool, UNIT_LIMITS) as tx:
            window = retention_store.window(
                tx.conn, min_retention=min_retention, after=self.after, scan=self.scan, now=now
            )
        occurrences = runs = 0
        for task_id in window.task_ids:
            try:
                with transaction(self.pool, UNIT_LIMITS) as tx:
                    done = prune(tx.conn, after=self.after, limit=self.scan, task_id=task_id)
            except UNSTORABLE_ERRORS as exc:
                self.log.warning(
                    "prune_task_failed",
                    task_id=task_id,
                    error=first_line(exc),
                    sqlstate=sqlstate(exc),
                )
                continue
            occurrences += done.occurrences
            runs += done.runs
        return Batch(occurrences, runs, window.scanned, window.after)
