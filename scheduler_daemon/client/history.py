"""The Client's history: runs and occurrences, newest first and a page at a time, one run or
occurrence in full, and the cancel of an occurrence."""

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

import psycopg

from scheduler_daemon.client.base import (
    ALL_PAGE_SIZE,
    PAGE_SIZE,
    ClientBase,
    Page,
    check_limit,
    found,
    task_ref,
)
from scheduler_daemon.domain import argument
from scheduler_daemon.domain.occurrence import Occurrence
from scheduler_daemon.domain.operator import Actor
from scheduler_daemon.domain.outcome import task_outcome
from scheduler_daemon.domain.run import HistoryRow, RunDetail, RunOutput
from scheduler_daemon.domain.status import OccurrenceStatus, RunStatus
from scheduler_daemon.domain.timing import renew_interval
from scheduler_daemon.executors.base import STOP_GRACE_SECONDS
from scheduler_daemon.storage import (
    history,
    instance_store,
    occurrence_store,
    operator_action_store,
    task_store,
)
from scheduler_daemon.storage.database import Conn
from scheduler_daemon.storage.error import Conflict


@dataclass(frozen=True)
class Cancellation:
    """What `Client.cancel` did: `cancelled` at once, or `requested` of a running occurrence's
    owner, with how soon it stops the job (None: its owner is not registered) or else the run's
    takeover point."""

    occurrence: Occurrence
    cancel: Literal["cancelled", "requested"]
    stop_within_seconds: float | None = None
    takeover_at: datetime | None = None


FOLLOW_REFRESH = timedelta(seconds=1)
"""A follower marks its run followed at most this often, however often it polls."""


def history_cursor(row: HistoryRow) -> str:
    """The `runs list --after` cursor that continues after this history row."""
    return str(row.occurrence_id) + ("" if row.id is None else f":{row.id}")


class History(ClientBase):
    """Reads what ran, and cancels what should not."""

    def list_runs(
        self,
        *,
        task: str | int | None = None,
        status: str | None = None,
        limit: int = PAGE_SIZE,
        after: str | None = None,
    ) -> list[HistoryRow]:
        """One page of history (see runs_page)."""
        return self.runs_page(task=task, status=status, limit=limit, after=after).rows

    def runs_page(
        self,
        *,
        task: str | int | None = None,
        status: str | None = None,
        limit: int | None = PAGE_SIZE,
        after: str | None = None,
    ) -> "Page":
        """History newest occurrence first (its own row, then its runs newest first), after the
        cursor `after`: `OCCURRENCE_ID:RUN_ID` after a run row, `OCCURRENCE_ID` after an
        occurrence row. `limit` None: all of it, read a page at a time."""
        argument.status_filter(status)
        check_limit(limit)
        keyset = argument.history_cursor(after) if after is not None else None
        rows: list[HistoryRow] = []
        with self._tx() as conn:
            task_id = task_store.find(conn, task_ref(task)).id if task is not None else None
        while True:
            want = ALL_PAGE_SIZE if limit is None else limit + 1 - len(rows)
            with self._tx() as conn:  # one short transaction per page
                page = history.list_history(
                    conn, task_id=task_id, status=status, limit=want, after=keyset
                )
            rows += page
            if len(page) < want or (limit is not None and len(rows) > limit):
                break
            keyset = (page[-1].occurrence_id, page[-1].id)
        more = limit is not None and len(rows) > limit
        rows = rows[:limit] if more else rows
        last = rows[-1] if more else None
        return Page(rows, history_cursor(last) if last else None)

    def show_run(self, run_id: int) -> RunDetail:
        with self._tx() as conn:
            run = history.get_run(conn, run_id)
        return found(run, f"run {run_id}")

    def run_output(self, run_id: int) -> RunOutput:
        """One run's status and output tail (`runs logs`)."""
        with self._tx() as conn:
            row = history.output(conn, run_id)
        return found(row, f"run {run_id}")

    def follow_run(self, run_id: int) -> tuple[RunOutput, bool]:
        """`runs logs -f`, one poll: the run's status and output tail, and in the same short
        transaction a running run marked followed, so its owner writes its output with its next
        renewals (ADR 0014). The flag says whether this role may mark it: one that may not
        update `run` (the reader) reads it unmarked, and sees its output when it ends."""
        try:
            with self._tx() as conn:
                row = history.follow(conn, run_id, FOLLOW_REFRESH)
        except psycopg.errors.InsufficientPrivilege:
            return self.run_output(run_id), False
        return found(row, f"run {run_id}"), True

    def show_occurrence(self, occurrence_id: int) -> tuple[Occurrence, list[RunDetail]]:
        """One occurrence and its runs, oldest first."""
        with self._tx() as conn:
            occurrence = found(
                occurrence_store.get(conn, occurrence_id), f"occurrence {occurrence_id}"
            )
            return occurrence, history.runs_of(conn, occurrence_id)

    def cancel(
        self,
        ident: int,
        *,
        occurrence: bool = False,
        requested_by: str,
        actor: Actor | None = None,
    ) -> Cancellation:
        """Cancels a run's occurrence (or an occurrence). A queued or claimed one ends at once
        (its token raised, so a launcher that has not started the job is fenced). A running one
        gets a cancel request: its owner learns of it at its next renewal, stops the job, and
        records `cancelled` once the job is gone; until then it keeps its slot (`forbid`, key,
        budget). If the owner is dead, the takeover ends it after its takeover point. With
        `actor`, `operator_action` records it in the same transaction."""
        with self._tx() as conn:
            done = self._cancel_in(conn, ident, occurrence=occurrence, requested_by=requested_by)
            if actor is not None:
                row = done.occurrence
                operator_action_store.record(
                    conn,
                    actor,
                    "cancel",
                    task_id=row.task_id,
                    occurrence_id=row.id,
                    detail=done.cancel,
                )
            return done

    def _cancel_in(
        self, conn: Conn, ident: int, *, occurrence: bool, requested_by: str
    ) -> Cancellation:
        if occurrence:
            occurrence_id = ident
        else:
            occurrence_id = found(history.get_run(conn, ident), f"run {ident}").occurrence_id
        seen = found(occurrence_store.get(conn, occurrence_id), f"occurrence {occurrence_id}")
        task_store.lock_row(conn, seen.task_id)  # parent first
        current = occurrence_store.lock(conn, occurrence_id)
        reason = f"cancelled by {requested_by}"
        if current is not None and current.status == OccurrenceStatus.RUNNING:
            requested = occurrence_store.request_cancel(
                conn, occurrence_id, reason=reason, requested_by=requested_by
            )
            assert requested is not None  # running and locked
            within, takeover_at = self._stop_bound(conn, occurrence_id)
            return Cancellation(
                replace(requested, task_name=seen.task_name), "requested", within, takeover_at
            )
        cancelled = occurrence_store.cancel(
            conn, occurrence_id, reason=reason, requested_by=requested_by
        )
        if cancelled is None:
            status = current.status if current else seen.status
            raise Conflict(f"occurrence {occurrence_id} is already {status}")
        task_store.record_outcome(
            conn,
            seen.task_id,
            task_outcome(cancelled, OccurrenceStatus.CANCELLED, cancelled.reason),
        )
        instance_store.notify_wakeup(conn, "cancelled")
        return Cancellation(replace(cancelled, task_name=seen.task_name), "cancelled")

    @staticmethod
    def _stop_bound(
        conn: psycopg.Connection[Any], occurrence_id: int
    ) -> tuple[float | None, datetime | None]:
        """How soon the owner of a running occurrence stops its job after a cancel request: at
        its next renewal (every TTL/3) plus the stop grace; an owner that no longer renews is
        taken over at the run's takeover point, and its watchdog killed the job before that."""
        running = [r for r in history.runs_of(conn, occurrence_id) if r.status == RunStatus.RUNNING]
        if not running:
            return None, None
        run = running[-1]
        owner = next(
            (i for i in instance_store.list_instances(conn) if i.id == run.instance_id), None
        )
        within = None
        if owner is not None:
            within = renew_interval(owner.lease_ttl).total_seconds() + STOP_GRACE_SECONDS
        return within, run.takeover_at
