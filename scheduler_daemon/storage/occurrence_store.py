"""Writes occurrence rows (and the runs they own) through sql/occurrence.sql and sql/run.sql."""

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

import psycopg

from scheduler_daemon.domain.backfill import Recorded
from scheduler_daemon.domain.claim import Claim, Launched, claimed
from scheduler_daemon.domain.misfire import DispatchPlan
from scheduler_daemon.domain.occurrence import ExpiredClaim, Occurrence, OccurrenceRef
from scheduler_daemon.domain.outcome import Settlement
from scheduler_daemon.domain.status import FAILED_OUTCOMES, FINISHED, NOT_STARTED
from scheduler_daemon.domain.task import TaskRecord
from scheduler_daemon.storage import instance_store, outbox_store, query, task_store
from scheduler_daemon.storage.database import Conn, Limits
from scheduler_daemon.storage.fleet_store import BUDGET_LOCK_KEY


def _one(row: dict[str, Any] | None) -> Occurrence | None:
    return None if row is None else Occurrence.from_row(row)


def insert(
    conn: psycopg.Connection[Any],
    *,
    task_id: int,
    occurrence_seq: int,
    scheduled_for: datetime,
    trigger: str,
    overlap: str,
    concurrency_key: str | None,
    status: str,
    reason: str | None,
    now: datetime,
    requested_by: str | None = None,
    firing_count: int = 1,
    last_scheduled_for: datetime | None = None,
) -> Occurrence | None:
    """Inserts an occurrence; the caller holds the task's row lock and allocated the seq. None
    when the scheduled firing is recorded already (the unique firing constraint)."""
    return _one(
        query.run(
            conn,
            "occurrence_insert",
            {
                "task_id": task_id,
                "occurrence_seq": occurrence_seq,
                "scheduled_for": scheduled_for,
                "last_scheduled_for": last_scheduled_for,
                "firing_count": firing_count,
                "trigger": trigger,
                "overlap": overlap,
                "concurrency_key": concurrency_key,
                "status": status,
                "reason": reason,
                "requested_by": requested_by,
                "now": now,
                "finished": list(FINISHED),
            },
        )
    )


def dispatch(
    conn: psycopg.Connection[Any],
    task: TaskRecord,
    plan: DispatchPlan,
    *,
    once_fired: bool,
    now: datetime,
    spread_offsets: Sequence[timedelta | None] | None = None,
) -> list[dict[str, Any]]:
    """Records `plan`'s firings of the locked `task` and moves it on (`occurrence_dispatch`),
    in a savepoint of its own: on an error the transaction goes on without them (the error is
    raised). `spread_offsets`, one per firing (None: no spread), start each no earlier than its
    nominal time plus its offset. Returns the occurrences inserted (id, status, reason,
    scheduled_for); a firing recorded already has none."""
    firings = plan.firings
    params = {
        "spread_offsets": list(spread_offsets or [None] * len(firings)),
        "task_id": task.id,
        "scheduled_fors": [f.scheduled_for for f in firings],
        "last_scheduled_fors": [f.last_scheduled_for for f in firings],
        "firing_counts": [f.firing_count for f in firings],
        "statuses": [str(f.status) for f in firings],
        "reasons": [f.reason for f in firings],
        "overlap": task.spec.overlap,
        "concurrency_key": task.spec.concurrency_key,
        "next_run_at": plan.next_run_at,
        "once_fired": once_fired,
        "now": now,
        "finished": list(FINISHED),
    }
    return query.run_in_savepoint(conn, "occurrence_dispatch", params)


def insert_many(
    conn: psycopg.Connection[Any],
    *,
    task_id: int,
    seqs: range,
    now: datetime,
    trigger: str,
    overlap: str,
    concurrency_key: str | None,
    status: str,
    requested_by: str | None,
) -> list[dict[str, Any]]:
    """Inserts one occurrence per sequence number in `seqs` (allocated by the caller, which
    holds the task's row lock), all due at `now`; returns (id, occurrence_seq) in seq order."""
    return query.run(
        conn,
        "occurrence_insert_many",
        {
            "task_id": task_id,
            "first_seq": seqs.start,
            "last_seq": seqs.stop - 1,
            "now": now,
            "trigger": trigger,
            "overlap": overlap,
            "concurrency_key": concurrency_key,
            "status": status,
            "requested_by": requested_by,
        },
    )


def insert_trigger(
    conn: psycopg.Connection[Any],
    *,
    task_id: int,
    overlap: str,
    concurrency_key: str | None,
    status: str,
    reason: str | None,
    requested_by: str,
    now: datetime,
    commit: bool = False,
    args: object = None,  # a Jsonb of the arguments, or None
) -> Occurrence:
    """A manual occurrence (with `args`) of a locked task due now, its sequence number allocated,
    daemons woken at commit; `commit`: COMMIT sent with the statement (`occurrence_trigger`)."""
    row = (query.run_and_commit if commit else query.run)(
        conn,
        "occurrence_trigger",
        {
            "task_id": task_id,
            "channel": instance_store.WAKEUP_CHANNEL,
            "reason_woken": "triggered",
            "now": now,
            "overlap": overlap,
            "concurrency_key": concurrency_key,
            "status": status,
            "reason": reason,
            "requested_by": requested_by,
            "finished": list(FINISHED),
            "args": args,
        },
    )
    assert row is not None  # the caller holds the task's lock: its row exists
    return Occurrence.from_row(row)


def active_count(conn: psycopg.Connection[Any], task_id: int) -> int:
    return int(query.run(conn, "occurrence_active_count", {"task_id": task_id}))


def cancel_active(
    conn: Conn, task_id: int, *, reason: str, requested_by: str | None, now: datetime
) -> list[Occurrence]:
    """Ends a locked task's queued and launching occurrences at once and asks the owners of its
    running ones to stop their jobs (those keep their slots until confirmed); also how a new
    firing of a `replace` task replaces them (`replaced`, `requested_by` None). Returns each, as
    `cancelled`, or `running` for a pending cancel."""
    rows = query.run(
        conn,
        "occurrence_cancel_active",
        {"task_id": task_id, "reason": reason, "requested_by": requested_by, "now": now},
    )
    return [Occurrence.from_row(row) for row in rows]


def get(conn: psycopg.Connection[Any], occurrence_id: int) -> Occurrence | None:
    """One occurrence with its task's name."""
    return _one(query.run(conn, "occurrence_get", {"id": occurrence_id}))


def executing_count(conn: psycopg.Connection[Any]) -> int:
    return int(query.run(conn, "occurrence_executing_count"))


def queue_depth(conn: psycopg.Connection[Any]) -> int:
    return int(query.run(conn, "occurrence_queue_depth"))


def claim_launch_statement(
    *,
    owner: str,
    slots: int,
    ttl: timedelta,
    grace: timedelta,
    known: Sequence[str],
    now: datetime | None = None,
    after_successes: bool = False,
) -> tuple[str, dict[str, Any]]:
    """The claim of up to `slots` startable occurrences under the fleet budget, for the launcher
    to send in one round trip (`occurrence_claim_launch`): each claimed occurrence is running
    with its run, leased on the database clock until now + ttl (takeover after that + grace),
    naming this build (its schema head); none marked for a build whose revision is not in
    `known` (ADR 0029); `launched` reads its rows. `after_successes`: it is sent after a batch
    of successes, in their transaction (`run_store.succeed_many`), and waits for the budget's
    lock as long as it would alone."""
    from scheduler_daemon.storage.migration import head_revision  # alembic: load on first use

    params: dict[str, Any] = {"key": BUDGET_LOCK_KEY, "slots": slots, "owner": owner}
    params |= {"ttl": ttl, "grace": grace, "build_revision": head_revision(), "now": now}
    params["known"] = list(known)
    if not after_successes:
        return "occurrence_claim_launch", params
    after = {**params, "claim_lock_timeout": Limits().lock_timeout}
    return "occurrence_claim_launch_after_successes", after


def launched(rows: list[dict[str, Any]]) -> tuple[int, list[tuple[Claim, Launched]]]:
    """The rows of `occurrence_claim_launch`: the slots the claim could fill, and the claims
    it launched with their runs, each decoded on its own (`claim.claimed`: a row whose JSON
    cannot be read is a claim `unreadable`, whose run the launcher fails)."""
    return int(rows[0]["free"]), [claimed(row) for row in rows if row["id"] is not None]


def release_claims(conn: psycopg.Connection[Any], owner: str) -> int:
    return query.run(conn, "occurrence_release_claims", {"owner": owner})


def lock(conn: psycopg.Connection[Any], occurrence_id: int) -> Occurrence | None:
    return _one(query.run(conn, "occurrence_lock", {"id": occurrence_id}))


def lock_many(conn: psycopg.Connection[Any], ids: Sequence[int]) -> dict[int, Occurrence]:
    """Locks the occurrences `ids` in id order (after their tasks); by id."""
    rows = query.run(conn, "occurrence_lock_many", {"ids": sorted(set(ids))})
    return {row["id"]: Occurrence.from_row(row) for row in rows}


def finish_many(
    conn: psycopg.Connection[Any], finals: Sequence[tuple[int, int, str, str | None, str | None]]
) -> set[int]:
    """Records (id, token, status, error, reason) final statuses in one fenced statement;
    returns the ids written (a missing one was fenced)."""
    if not finals:
        return set()
    ids, tokens, statuses, errors, reasons = zip(*sorted(finals), strict=True)
    rows = query.run(
        conn,
        "occurrence_finish_many",
        {
            "ids": list(ids),
            "tokens": list(tokens),
            "statuses": list(statuses),
            "errors": list(errors),
            "reasons": list(reasons),
            "now": None,
        },
    )
    return {row["id"] for row in rows}


def finish(
    conn: psycopg.Connection[Any],
    occurrence_id: int,
    *,
    token: int,
    status: str,
    error: str | None,
    reason: str | None = None,
) -> bool:
    return (
        query.run(
            conn,
            "occurrence_finish",
            {
                "id": occurrence_id,
                "token": token,
                "status": status,
                "error": error,
                "reason": reason,
            },
        )
        == 1
    )


def retry(
    conn: psycopg.Connection[Any],
    occurrence_id: int,
    *,
    token: int,
    delay: timedelta,
    error: str | None,
    refund: bool,
) -> bool:
    """Back to the queue after `delay`; `refund` gives the attempt back (an interruption)."""
    return (
        query.run(
            conn,
            "occurrence_retry",
            {
                "id": occurrence_id,
                "token": token,
                "delay": delay,
                "error": error,
                "refund": int(refund),
            },
        )
        == 1
    )


def cancel(
    conn: psycopg.Connection[Any], occurrence_id: int, *, reason: str, requested_by: str
) -> Occurrence | None:
    """Cancels one queued or launching occurrence (task locked first); None otherwise."""
    return _one(
        query.run(
            conn,
            "occurrence_cancel",
            {
                "id": occurrence_id,
                "reason": reason,
                "requested_by": requested_by,
                "not_started": list(NOT_STARTED),
            },
        )
    )


def request_cancel(
    conn: psycopg.Connection[Any], occurrence_id: int, *, reason: str, requested_by: str
) -> Occurrence | None:
    """Asks the owner of a running occurrence to stop its job; None when it is not running."""
    return _one(
        query.run(
            conn,
            "occurrence_request_cancel",
            {"id": occurrence_id, "reason": reason, "requested_by": requested_by},
        )
    )


def expired_claims(
    conn: Conn, *, after: int, limit: int, known: Sequence[str]
) -> list[ExpiredClaim]:
    page = {"after": after, "limit": limit, "known": list(known)}  # marked rows (ADR 0029)
    rows = query.run(conn, "occurrence_expired_claims", page)
    return [ExpiredClaim.from_row(row) for row in rows]


def requeue_claim(conn: psycopg.Connection[Any], occurrence_id: int, *, token: int) -> bool:
    return query.run(conn, "occurrence_requeue_claim", {"id": occurrence_id, "token": token}) == 1


def past_deadline(
    conn: Conn, *, after: int, limit: int, known: Sequence[str]
) -> list[OccurrenceRef]:
    page = {"after": after, "limit": limit, "known": list(known)}  # marked rows (ADR 0029)
    rows = query.run(conn, "occurrence_past_deadline", page)
    return [OccurrenceRef.from_row(row) for row in rows]


def expire(conn: psycopg.Connection[Any], occurrence_id: int) -> Occurrence | None:
    """Expires one queued occurrence past its start deadline (its task locked first) and, in
    the same transaction, records the notification it owes."""
    expired = _one(query.run(conn, "occurrence_expire", {"id": occurrence_id}))
    if expired is not None:
        outbox_store.enqueue(conn, [expired.id])
    return expired


def latest(conn: psycopg.Connection[Any], task_id: int) -> Occurrence | None:
    return _one(query.run(conn, "occurrence_latest", {"task_id": task_id}))


def settle(
    conn: psycopg.Connection[Any], occurrence: Occurrence, *, token: int, settlement: Settlement
) -> Literal["retry", "recorded"]:
    """Writes the end of an attempt as domain.outcome.settlement decided it, inside the caller's
    transaction, after the caller locked task → occurrence → run and ended the run row: back to
    the queue, or the occurrence finished and its outcome shown on the task."""
    decision = settlement.decision
    if settlement.outcome is None:
        retry(
            conn,
            occurrence.id,
            token=token,
            delay=decision.delay,
            error=settlement.error,
            refund=decision.refund,
        )
        instance_store.notify_wakeup(conn, settlement.wakeup)
        return "retry"
    finished = finish(
        conn,
        occurrence.id,
        token=token,
        status=decision.occurrence_status,
        error=settlement.error,
        reason=decision.reason,
    )
    if finished and decision.occurrence_status in FAILED_OUTCOMES:
        outbox_store.enqueue(conn, [occurrence.id])  # its notification, beside its outcome
    task_store.record_outcome(conn, occurrence.task_id, settlement.outcome)
    instance_store.notify_wakeup(conn, settlement.wakeup)
    return "recorded"


def settle_many(
    conn: psycopg.Connection[Any], batch: Sequence[tuple[Occurrence, int, Settlement]]
) -> None:
    """`settle` for a batch (occurrence, token, settlement) whose tasks and occurrences the
    caller locked and whose runs it ended: the retries one by one (rare), the final ones in one
    fenced statement per table, each task shown its newest outcome; one wake-up per kind."""
    retries = sorted((b for b in batch if b[2].outcome is None), key=lambda b: b[0].id)
    finals = [b for b in batch if b[2].outcome is not None]
    for occurrence, token, settled in retries:
        retry(
            conn,
            occurrence.id,
            token=token,
            delay=settled.decision.delay,
            error=settled.error,
            refund=settled.decision.refund,
        )
    if retries:
        instance_store.notify_wakeup(conn, "retry")
    if not finals:
        return
    written = finish_many(
        conn,
        [
            (o.id, token, s.decision.occurrence_status, s.error, s.decision.reason)
            for o, token, s in finals
        ],
    )
    # Their notifications, beside their outcomes (a success owes none: no round trip for it).
    failed = [o.id for o, _, s in finals if s.decision.occurrence_status in FAILED_OUTCOMES]
    outbox_store.enqueue(conn, [i for i in failed if i in written])
    task_store.record_outcomes(
        conn, [(o.task_id, s.outcome) for o, _, s in finals if s.outcome is not None]
    )
    instance_store.notify_wakeup(conn, "finished")


def firings(
    conn: psycopg.Connection[Any], task_id: int, low: datetime, high: datetime
) -> list[Recorded]:
    """The scheduled and backfill rows recorded for one task's firings in [low, high]."""
    rows = query.run(conn, "occurrence_firings", {"task_id": task_id, "low": low, "high": high})
    return [
        Recorded(
            r["scheduled_for"],
            r["last_scheduled_for"],
            r["occurrence_seq"],
            r["status"],
            r["trigger"],
        )
        for r in rows
    ]


def insert_backfill(
    conn: psycopg.Connection[Any],
    *,
    task_id: int,
    occurrence_seq: int,
    scheduled_for: datetime,
    overlap: str,
    concurrency_key: str | None,
    requested_by: str,
    now: datetime,
) -> dict[str, Any] | None:
    """Queues a backfill occurrence (task locked, seq allocated); None if the firing has one."""
    return query.run(
        conn,
        "occurrence_insert_backfill",
        {
            "task_id": task_id,
            "occurrence_seq": occurrence_seq,
            "scheduled_for": scheduled_for,
            "overlap": overlap,
            "concurrency_key": concurrency_key,
            "requested_by": requested_by,
            "now": now,
        },
    )
