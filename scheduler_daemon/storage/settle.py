"""Applies the end of an attempt (a Decision) to its occurrence and task, inside the caller's
transaction, after the caller locked task → occurrence → run and ended the run row."""

from typing import Any, Literal

import psycopg

from scheduler_daemon.domain.occurrence import Occurrence
from scheduler_daemon.domain.outcome import LIFECYCLE, Decision
from scheduler_daemon.storage import instance_store, occurrence_store, task_store


def settle(
    conn: psycopg.Connection[Any],
    occurrence: Occurrence,
    *,
    token: int,
    decision: Decision,
    error: str | None,
) -> Literal["retry", "recorded"]:
    """Back to the queue for another attempt, or final: occurrence finished and, if it is the
    newest outcome, shown on the task (a one-shot task's lifecycle follows)."""
    if not decision.final:
        occurrence_store.retry(
            conn,
            occurrence.id,
            token=token,
            delay=decision.delay,
            error=error,
            refund=decision.refund,
        )
        instance_store.notify_wakeup(conn, "retry")
        return "retry"
    occurrence_store.finish(
        conn,
        occurrence.id,
        token=token,
        status=decision.occurrence_status,
        error=error,
        reason=decision.reason,
    )
    task_store.record_outcome(
        conn,
        occurrence.task_id,
        occurrence_id=occurrence.id,
        occurrence_seq=occurrence.occurrence_seq,
        scheduled_for=occurrence.scheduled_for,
        status=decision.occurrence_status,
        error=error,
        lifecycle=LIFECYCLE[decision.occurrence_status],
    )
    instance_store.notify_wakeup(conn, "finished")
    return "recorded"
