"""Writes run rows: create at launch, renew leases, lock and finish (sql/run.sql)."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

import psycopg
from psycopg_pool import ConnectionPool

from scheduler_daemon.domain import timing
from scheduler_daemon.domain.held import Lease
from scheduler_daemon.domain.run import Run, TakeoverCandidate
from scheduler_daemon.domain.status import RunStatus
from scheduler_daemon.storage import query
from scheduler_daemon.storage.database import Limits, Statement, one_trip
from scheduler_daemon.storage.instance_store import WAKEUP_CHANNEL


def running_by_build(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Executing runs per build head; "before-0004" for a build that does not record it."""
    return {
        row["build_revision"] or "before-0004": row["runs"]
        for row in query.run(conn, "run_running_by_build")
    }


@dataclass(frozen=True)
class Renewal:
    """What a renewal did for one held run: `renewed` (its lease now runs from the statement's
    time), `locked` (another session holds its row: not renewed, not lost) or `fenced` (not this
    owner's at that token any more); a renewed run may have a cancel request."""

    outcome: Literal["renewed", "locked", "fenced"]
    cancel_requested: bool = False
    followed: bool = False  # renewed, and someone follows its output (`runs logs -f`)


@dataclass(frozen=True)
class LeaseTerms:
    """What a renewal asks: the owner it is fenced on, the TTL and grace it extends a lease by."""

    owner: str
    ttl: timedelta
    grace: timedelta

    def params(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "ttl": self.ttl,
            "grace": self.grace,
            "follow_window": timing.follow_window(self.ttl),
        }


def renew(
    conn: psycopg.Connection[Any], terms: LeaseTerms, held: Sequence[Lease]
) -> dict[int, Renewal]:
    """Renews, without waiting for a row, every held lease whose row it can lock, in one
    statement; returns each held run id with what became of it."""
    if not held:
        return {}
    ids, occurrence_ids, tokens = zip(*sorted(held), strict=True)
    rows = query.run(
        conn,
        "run_renew",
        {
            "ids": list(ids),
            "occurrence_ids": list(occurrence_ids),
            "tokens": list(tokens),
            **terms.params(),
        },
    )
    return {
        row["id"]: Renewal(row["outcome"], row["cancel_requested"], row["followed"]) for row in rows
    }


def renew_one(conn: psycopg.Connection[Any], terms: LeaseTerms, lease: Lease) -> Renewal:
    """Renews one lease `renew` found locked, waiting for its row up to the transaction's lock
    timeout: `renewed` or `fenced`; still locked, it raises LockNotAvailable."""
    row = query.run(
        conn,
        "run_renew_one",
        {
            "id": lease.run_id,
            "occurrence_id": lease.occurrence_id,
            "token": lease.token,
            **terms.params(),
        },
    )
    if row is None:
        return Renewal("fenced")
    return Renewal("renewed", row["cancel_requested"], row["followed"])


def write_output(
    conn: psycopg.Connection[Any], *, owner: str, lease: Lease, output_tail: str | None
) -> bool:
    """Writes a followed running run's output so far (storable already); False: fenced, the run
    is no longer this owner's at that token and nothing was written."""
    count = query.run(
        conn,
        "run_write_output",
        {
            "id": lease.run_id,
            "occurrence_id": lease.occurrence_id,
            "token": lease.token,
            "owner": owner,
            "output_tail": output_tail,
        },
    )
    return bool(count)


def lock(conn: psycopg.Connection[Any], run_id: int) -> Run | None:
    row = query.run(conn, "run_lock", {"id": run_id})
    return None if row is None else Run.from_row(row)


@dataclass(frozen=True)
class RunEnd:
    """One run's outcome to record, fenced on its token (`finish`, `finish_many`), with the
    parents a batch of successes locks (`succeed_many`, whose runs are all `success`)."""

    run_id: int
    token: int
    occurrence_id: int
    task_id: int
    status: RunStatus
    exit_code: int | None
    http_status: int | None
    output_tail: str | None
    error: str | None


def finish(conn: psycopg.Connection[Any], end: RunEnd, *, owner: str) -> bool:
    """Records the outcome if `owner` still holds its token; False means fenced."""
    row = {
        "id": end.run_id,
        "token": end.token,
        "status": end.status,
        "exit_code": end.exit_code,
        "http_status": end.http_status,
        "output_tail": end.output_tail,
        "error": end.error,
    }
    return query.run(conn, "run_finish", {**row, "owner": owner}) == 1


def finish_many(conn: psycopg.Connection[Any], ends: Sequence[RunEnd], *, owner: str) -> set[int]:
    """Records a batch of outcomes in one statement, each fenced on `owner` and its token;
    returns the run ids written (a missing one was fenced)."""
    if not ends:
        return set()
    ordered = sorted(ends, key=lambda e: e.run_id)
    rows = query.run(
        conn,
        "run_finish_many",
        {
            **_outcome_arrays(ordered),
            "statuses": [e.status for e in ordered],
            "owner": owner,
            "now": None,
        },
    )
    return {row["id"] for row in rows}


def succeed_many(
    pool: ConnectionPool,
    successes: Sequence[RunEnd],
    *,
    owner: str,
    limits: Limits,
    wake_peers: bool = True,
    then: Statement | None = None,
) -> tuple[set[int], Any]:
    """Records a batch of successful runs, their occurrences and their tasks' newest outcome in
    one transaction sent in one round trip (`run_succeed_many`), each run fenced on `owner` and
    its token, and its occurrence on that token too; returns the run ids written (a missing one
    was fenced, and nothing was written for it), and what `then` returned. `wake_peers`: NOTIFY
    the idle daemons. `then`: a statement run after the successes in the same transaction and
    round trip (the loop's next claim, which the freed slots take part in): both commit, or
    neither; None without one."""
    ordered = sorted(successes, key=lambda s: s.run_id)
    statement = (
        "run_succeed_many",
        {
            **_outcome_arrays(ordered),
            "occurrence_ids": [s.occurrence_id for s in ordered],
            "task_ids": sorted({s.task_id for s in ordered}),
            "owner": owner,
            "channel": WAKEUP_CHANNEL,
            "wake": wake_peers,
            "now": None,
        },
    )
    if then is None:
        (rows,), after = one_trip(pool, statement, limits=limits), None
    else:
        rows, after = one_trip(pool, statement, then, limits=limits)
    return {row["id"] for row in rows}, after


def _outcome_arrays(ordered: Sequence[RunEnd]) -> dict[str, list[Any]]:
    """What every batch of outcomes sends, as the parallel arrays its statement unnests (in the
    order of `ordered`): run ids, tokens, exit codes, HTTP statuses, output tails, errors."""
    return {
        "ids": [o.run_id for o in ordered],
        "tokens": [o.token for o in ordered],
        "exit_codes": [o.exit_code for o in ordered],
        "http_statuses": [o.http_status for o in ordered],
        "output_tails": [o.output_tail for o in ordered],
        "errors": [o.error for o in ordered],
    }


def takeover_candidates(
    conn: psycopg.Connection[Any],
    *,
    after: int,
    limit: int,
    restart_quiet: timedelta,
    known: Sequence[str],
) -> list[TakeoverCandidate]:
    """A page of the runs past their takeover point; those of occurrences marked for a build
    whose revision is not in `known` passed over (ADR 0029)."""
    params = {"after": after, "limit": limit, "restart_quiet": restart_quiet}
    rows = query.run(conn, "run_takeover_candidates", {**params, "known": list(known)})
    return [TakeoverCandidate.from_row(row) for row in rows]


def take_over(
    conn: psycopg.Connection[Any],
    run_id: int,
    *,
    token: int,
    by: str,
    error: str,
    restart_quiet: timedelta,
) -> bool:
    """Compare-and-set: False when the run changed since it was seen (the owner finished it,
    or another reconciler won)."""
    return (
        query.run(
            conn,
            "run_take_over",
            {
                "id": run_id,
                "token": token,
                "by": by,
                "error": error,
                "restart_quiet": restart_quiet,
            },
        )
        == 1
    )


def inside_lease(
    conn: psycopg.Connection[Any], *, restart_quiet: timedelta, overdue: float
) -> list[dict[str, Any]]:
    """Every running run with its `takeover_from`, `renewing` and the database's `db_now`."""
    return query.run(conn, "run_inside_lease", {"restart_quiet": restart_quiet, "overdue": overdue})


def running_page(conn: psycopg.Connection[Any], *, limit: int) -> list[dict[str, Any]]:
    """The running runs, oldest start first, at most `limit` (the console's "running now")."""
    return [dict(row) for row in query.run(conn, "run_running_page", {"limit": limit})]


def takeovers_since(conn: psycopg.Connection[Any], since: timedelta, *, cap: int) -> int:
    """Runs taken over within `since` (database clock), counted up to `cap`."""
    return int(query.run(conn, "run_takeovers_since", {"since": since, "cap": cap}))
