"""Applies the end of an attempt (a Decision) to its occurrence and task, inside the caller's
transaction, after the caller locked task → occurrence → run and ended the run row."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import psycopg

from scheduler_daemon.domain.outcome import LIFECYCLE, Decision
from scheduler_daemon.storage import instance_store, occurrence_store, task_store


def settle(
    conn: psycopg.Connection[Any],
    occurrence: dict[str, Any],
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
            occurrence["id"],
            token=token,
            delay=decision.delay,
            error=error,
            refund=decision.refund,
        )
        instance_store.notify_wakeup(conn, "retry")
        return "retry"
    occurrence_store.finish(
        conn,
        occurrence["id"],
        token=token,
        status=decision.occurrence_status,
        error=error,
        reason=decision.reason,
    )
    task_store.record_outcome(
        conn,
        occurrence["task_id"],
        occurrence_id=occurrence["id"],
        occurrence_seq=occurrence["occurrence_seq"],
        scheduled_for=occurrence["scheduled_for"],
        status=decision.occurrence_status,
        error=error,
        lifecycle=LIFECYCLE[decision.occurrence_status],
    )
    instance_store.notify_wakeup(conn, "finished")
    return "recorded"


@dataclass(frozen=True)
class Settled:
    """One attempt's end to apply (`settle_many`): its locked occurrence row and decision."""

    occurrence: dict[str, Any]
    token: int
    decision: Decision
    error: str | None


def settle_many(conn: psycopg.Connection[Any], batch: Sequence[Settled]) -> None:
    """`settle` for a batch whose tasks and occurrences the caller locked and whose runs it
    ended: the retries one by one (rare), the final ones in one fenced statement per table,
    each task shown its newest outcome; one wake-up per kind."""
    finals = [s for s in batch if s.decision.final]
    retries = [s for s in batch if not s.decision.final]
    for s in sorted(retries, key=lambda s: s.occurrence["id"]):
        occurrence_store.retry(
            conn,
            s.occurrence["id"],
            token=s.token,
            delay=s.decision.delay,
            error=s.error,
            refund=s.decision.refund,
        )
    if retries:
        instance_store.notify_wakeup(conn, "retry")
    if not finals:
        return
    occurrence_store.finish_many(
        conn,
        [
            (s.occurrence["id"], s.token, s.decision.occurrence_status, s.error, s.decision.reason)
            for s in finals
        ],
    )
    task_store.record_outcomes(
        conn,
        [
            {
                "task_id": s.occurrence["task_id"],
                "occurrence_id": s.occurrence["id"],
                "occurrence_seq": s.occurrence["occurrence_seq"],
                "scheduled_for": s.occurrence["scheduled_for"],
                "status": s.decision.occurrence_status,
                "error": s.error,
                "lifecycle": LIFECYCLE[s.decision.occurrence_status],
            }
            for s in finals
        ],
    )
    instance_store.notify_wakeup(conn, "finished")
